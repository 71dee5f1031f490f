package io.orbitkv.pd.logtools;

import io.orbitkv.pd.decider.DeciderPolicy;
import io.orbitkv.pd.decider.DeciderReplay;
import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.CancelRequested;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.DecodeCompleted;
import io.orbitkv.pd.events.DecodeReady;
import io.orbitkv.pd.events.DecodeRejected;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.events.FailurePolicy;
import io.orbitkv.pd.events.KvLayout;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.events.LeaseHeartbeat;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.events.PrefillFailed;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.Tick;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferFailed;
import io.orbitkv.pd.events.TransferStarted;
import io.orbitkv.pd.logtools.internal.MergeOrder;
import io.orbitkv.pd.schemas.Topics;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.PriorityQueue;
import java.util.Random;
import java.util.function.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;

/**
 * A synthetic run of the <em>real</em> decider, as a log: facts for N requests in a mix of scenarios (handoffs,
 * retried transfers, cancels mid-transfer, decode rejections, prefill failures, timeouts, recomputes) with
 * ticks, fed partition by partition through {@link DeciderReplay}, and the decisions it made. Used to measure
 * the audit on a million events, to try the tools without a cluster, and by tests (which plant violations in it).
 *
 * <p>The facts are what engines, workers and the proxy would report, timed so that each answers the decision
 * it depends on (a worker reports on order {@code <request>/a<n>} only after the decider can have issued it).
 * Deterministic for a seed.
 */
public final class SyntheticLog {

    private static final String[] SCENARIOS = {"handoff", "retry", "cancel", "decode-rejected", "prefill-failed", "timeout", "recompute"};
    private static final long TICK_EVERY_MS = 250;

    /**
     * @param requests   how many requests
     * @param seed       random seed (same seed, same log)
     * @param partitions partitions of the request-events and decisions topics
     * @param rate       requests started per second of log time
     * @param startMs    timestamp of the first request
     */
    public record Options(int requests, long seed, int partitions, int rate, long startMs) {
        public Options {
            if (requests < 1) {
                throw new IllegalArgumentException("--synthetic: at least 1 request, got " + requests);
            }
            if (partitions < 1 || rate < 1) {
                throw new IllegalArgumentException("partitions and rate must be >= 1");
            }
        }

        /** {@code requests} at 1,000 per second on 6 partitions, starting 2025-01-01T00:00:00Z. */
        public static Options of(int requests, long seed) {
            return new Options(requests, seed, 6, 1_000, 1_735_689_600_000L);
        }
    }

    /** What was written. */
    public record Summary(long records, long facts, long decisions, int requests, long firstMs, long lastMs) { }

    private SyntheticLog() { }

    /** Request ids of the synthetic log: {@code syn-000042}. */
    public static String requestId(int i) {
        return String.format("syn-%06d", i);
    }

    /** The scenario of request {@code i} (handoff, retry, cancel, ...). */
    public static String scenario(Options o, int i) {
        return SCENARIOS[scenarioIndex(o, i)];
    }

    private static int scenarioIndex(Options o, int i) {
        int r = new Random(o.seed() * 1_000_003L + i).nextInt(100);
        return r < 70 ? 0 : r < 80 ? 1 : r < 87 ? 2 : r < 90 ? 3 : r < 93 ? 4 : r < 96 ? 5 : 6;
    }

    /** The log in memory, in merged order (for tests and small runs). */
    public static List<LogRecord> generate(Options o, DeciderPolicy policy, Topics topics) {
        List<LogRecord> out = new ArrayList<>();
        List<List<LogRecord>> perPartition = new ArrayList<>();
        for (int p = 0; p < o.partitions(); p++) {
            perPartition.add(partition(o, policy, topics, p));
        }
        out.addAll(engines(o, topics));
        mergeInto(perPartition, out::add);
        return out;
    }

    /** The slice a synthetic log of these options describes, with the given per-partition record counts. */
    public static LogSlice slice(Options o, Topics topics, long[] facts, long[] decisions) {
        List<LogSlice.PartitionRange> f = new ArrayList<>();
        List<LogSlice.PartitionRange> d = new ArrayList<>();
        for (int p = 0; p < o.partitions(); p++) {
            f.add(new LogSlice.PartitionRange(p, 0, facts[p], true));
            d.add(new LogSlice.PartitionRange(p, 0, decisions[p], true));
        }
        return new LogSlice("synthetic run of the decider: " + o.requests() + " requests, seed " + o.seed(), "embedded",
                System.currentTimeMillis(), null, List.of(
                new LogSlice.TopicSlice(topics.engines().name(), TopicRole.ENGINES, List.of(new LogSlice.PartitionRange(0, 0, 8, true))),
                new LogSlice.TopicSlice(topics.requestEvents().name(), TopicRole.REQUEST_EVENTS, f),
                new LogSlice.TopicSlice(topics.decisions().name(), TopicRole.DECISIONS, d),
                new LogSlice.TopicSlice(topics.deadLetters().name(), TopicRole.DEAD_LETTERS, List.of(new LogSlice.PartitionRange(0, 0, 0, true)))));
    }

    /**
     * Writes the log to {@code file}: one partition at a time through the decider (memory: one partition), each
     * into a temporary file, then merged into the export.
     */
    public static Summary write(Path file, Options o, DeciderPolicy policy, Topics topics, Progress progress) {
        Path dir;
        try {
            dir = Files.createTempDirectory(file.toAbsolutePath().getParent(), ".synthetic-");
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
        LogSlice scratch = slice(o, topics, fill(o.partitions(), Long.MAX_VALUE), fill(o.partitions(), Long.MAX_VALUE));
        long[] facts = new long[o.partitions()];
        long[] decisions = new long[o.partitions()];
        List<Path> parts = new ArrayList<>();
        try {
            progress.start("running " + o.requests() + " synthetic requests through the decider", o.partitions());
            for (int p = 0; p < o.partitions(); p++) {
                Path part = dir.resolve("p" + p + ".okvlog");
                parts.add(part);
                try (LogFileWriter w = LogFile.create(part, scratch)) {
                    for (LogRecord r : partition(o, policy, topics, p)) {
                        w.write(r);
                        if (r.role() == TopicRole.REQUEST_EVENTS) {
                            facts[p]++;
                        } else {
                            decisions[p]++;
                        }
                    }
                }
                progress.advance(1);
            }
            progress.done();
            long total = 8;
            for (int p = 0; p < o.partitions(); p++) {
                total += facts[p] + decisions[p];
            }
            progress.start("writing " + file.getFileName(), total);
            long first = Long.MAX_VALUE;
            long last = Long.MIN_VALUE;
            long count = 0;
            try (LogFileWriter w = LogFile.create(file, slice(o, topics, facts, decisions))) {
                for (LogRecord r : engines(o, topics)) {
                    w.write(r);
                    count++;
                }
                List<LogFile.Cursor> cursors = new ArrayList<>();
                try {
                    for (Path part : parts) {
                        cursors.add(LogFile.open(part).cursor());
                    }
                    long[] minMax = {Long.MAX_VALUE, Long.MIN_VALUE, 0};
                    merge(cursors, r -> {
                        w.write(r);
                        minMax[0] = Math.min(minMax[0], r.timestamp());
                        minMax[1] = Math.max(minMax[1], r.timestamp());
                        minMax[2]++;
                        progress.advance(1);
                    });
                    first = minMax[0];
                    last = minMax[1];
                    count += minMax[2];
                } finally {
                    cursors.forEach(LogFile.Cursor::close);
                }
            }
            progress.done();
            long f = 0;
            long d = 0;
            for (int p = 0; p < o.partitions(); p++) {
                f += facts[p];
                d += decisions[p];
            }
            return new Summary(count, f, d, o.requests(), first, last);
        } finally {
            for (Path part : parts) {
                try {
                    Files.deleteIfExists(part);
                } catch (IOException ignored) {
                    // temp file; best effort
                }
            }
            try {
                Files.deleteIfExists(dir);
            } catch (IOException ignored) {
                // best effort
            }
        }
    }

    private static long[] fill(int n, long v) {
        long[] a = new long[n];
        java.util.Arrays.fill(a, v);
        return a;
    }

    private static void merge(List<LogFile.Cursor> cursors, Consumer<LogRecord> sink) {
        record Head(LogRecord record, LogFile.Cursor cursor) { }
        PriorityQueue<Head> heads = new PriorityQueue<>(Comparator.comparing(Head::record, MergeOrder.COMPARATOR));
        for (LogFile.Cursor c : cursors) {
            LogRecord r = c.next();
            if (r != null) {
                heads.add(new Head(r, c));
            }
        }
        while (!heads.isEmpty()) {
            Head h = heads.poll();
            sink.accept(h.record());
            LogRecord n = h.cursor().next();
            if (n != null) {
                heads.add(new Head(n, h.cursor()));
            }
        }
    }

    private static void mergeInto(List<List<LogRecord>> lists, Consumer<LogRecord> sink) {
        record Head(LogRecord record, int list, int index) { }
        PriorityQueue<Head> heads = new PriorityQueue<>(Comparator.comparing(Head::record, MergeOrder.COMPARATOR));
        for (int i = 0; i < lists.size(); i++) {
            if (!lists.get(i).isEmpty()) {
                heads.add(new Head(lists.get(i).get(0), i, 0));
            }
        }
        while (!heads.isEmpty()) {
            Head h = heads.poll();
            sink.accept(h.record());
            List<LogRecord> l = lists.get(h.list());
            if (h.index() + 1 < l.size()) {
                heads.add(new Head(l.get(h.index() + 1), h.list(), h.index() + 1));
            }
        }
    }

    // ------------------------------------------------------------------------------------------------ one partition

    /** Facts of partition {@code p} and the decisions the real decider makes from them, in merged order. */
    static List<LogRecord> partition(Options o, DeciderPolicy policy, Topics topics, int p) {
        List<RequestEvent> facts = new ArrayList<>();
        long lastStart = o.startMs();
        for (int i = 0; i < o.requests(); i++) {
            String id = requestId(i);
            long start = o.startMs() + (long) i * 1000 / o.rate();
            lastStart = start;
            if (Partitioning.partitionOf(id, o.partitions()) == p) {
                story(o, policy, i, id, start, p, facts);
            }
        }
        long end = lastStart + slackMs(policy) + 10_000;
        for (long t = o.startMs(); t <= end; t += TICK_EVERY_MS) {
            facts.add(tick(p, t));
        }
        facts.sort(Comparator.comparingLong(RequestEvent::getEventTimeMs)); // stable: a request's facts keep their order
        String factsTopic = topics.requestEvents().name();
        List<ConsumerRecord<byte[], byte[]>> input = new ArrayList<>(facts.size());
        List<LogRecord> out = new ArrayList<>(facts.size() * 2);
        long offset = 0;
        for (RequestEvent e : facts) {
            byte[] key = e.getRequestId().getBytes(StandardCharsets.UTF_8);
            byte[] value = topics.requestEvents().valueSerde().serializer().serialize(factsTopic, e);
            input.add(new ConsumerRecord<>(factsTopic, p, offset, e.getEventTimeMs(), TimestampType.CREATE_TIME, key.length, value.length, key,
                    value, new RecordHeaders(), java.util.Optional.empty()));
            out.add(LogRecord.of(TopicRole.REQUEST_EVENTS, factsTopic, p, offset, e.getEventTimeMs(), key, value));
            offset++;
        }
        List<Decision> decisions = DeciderReplay.replayPartition(policy, topics, input);
        String decisionsTopic = topics.decisions().name();
        long dOffset = 0;
        List<LogRecord> decided = new ArrayList<>(decisions.size());
        for (Decision d : decisions) {
            byte[] key = d.getRequestId().getBytes(StandardCharsets.UTF_8);
            int dp = Partitioning.partitionOf(key, o.partitions());
            if (dp != p) {
                throw new IllegalStateException("decision of " + d.getRequestId() + " hashes to partition " + dp + ", its facts to " + p);
            }
            decided.add(LogRecord.of(TopicRole.DECISIONS, decisionsTopic, p, dOffset++, d.getStreamTimeMs(), key,
                    topics.decisions().valueSerde().serializer().serialize(decisionsTopic, d)));
        }
        List<LogRecord> merged = new ArrayList<>(out.size() + decided.size());
        mergeInto(List.of(out, decided), merged::add);
        return merged;
    }

    /** How far past the last request the ticks run, so that every request reaches its outcome and releases. */
    private static long slackMs(DeciderPolicy policy) {
        return java.util.stream.LongStream.of(policy.prefillTimeout().toMillis(), policy.decodeReadyTimeout().toMillis(),
                policy.leaseDuration().toMillis(), policy.transferTimeout().toMillis() * policy.maxAttempts()).max().orElse(0)
                + policy.drainGrace().toMillis() + 2 * policy.leaseDuration().toMillis() + policy.backoffMax().toMillis();
    }

    public static KvLayout layout() {
        return KvLayout.newBuilder().setNumLayers(32).setKvSplit(KvSplit.SEPARATE).setBlockSizeTokens(16).setNumKvHeads(8).setHeadDim(128)
                .setDtype(Dtype.BF16).setTpRank(0).setTpSize(1).setPageBytes(16 * 8 * 128 * 2).setNumBlocks(4096).build();
    }

    private static List<LogRecord> engines(Options o, Topics topics) {
        List<LogRecord> out = new ArrayList<>();
        String topic = topics.engines().name();
        for (int k = 0; k < 8; k++) {
            String id = (k < 4 ? "prefill-" : "decode-") + (k % 4);
            EngineRegistration r = EngineRegistration.newBuilder().setEngineId(id).setRole(k < 4 ? EngineRole.PREFILL : EngineRole.DECODE)
                    .setInstanceEpoch(1).setModel("llama-3-8b").setHttpUrl("http://127.0.0.1:" + (8100 + k)).setLayout(layout())
                    .setRegisteredAtMs(o.startMs() - 1000 + k).build();
            out.add(LogRecord.of(TopicRole.ENGINES, topic, 0, k, o.startMs() - 1000 + k, id.getBytes(StandardCharsets.UTF_8),
                    topics.engines().valueSerde().serializer().serialize(topic, r)));
        }
        return out;
    }

    private static RequestEvent tick(int p, long t) {
        String key = "tick/" + p;
        return RequestEvent.newBuilder().setRequestId(key).setEventId(key + "/" + t).setSource("decider-ticker").setEventTimeMs(t)
                .setPayload(Tick.newBuilder().setPartition(p).build()).build();
    }

    /** The facts of request {@code i}; the event time of each is its record timestamp. */
    private static void story(Options o, DeciderPolicy policy, int i, String id, long t0, int partition, List<RequestEvent> out) {
        Random rnd = new Random(o.seed() * 7_919L + i);
        int scenario = scenarioIndex(o, i);
        String prefill = "prefill-" + (i % 4);
        String decode = "decode-" + ((i / 4) % 4);
        int blocks = 4 + rnd.nextInt(61);
        List<BlockRun> src = runs(rnd, blocks);
        List<BlockRun> dst = runs(rnd, blocks);
        Story s = new Story(id, partition, out);
        FailurePolicy fp = scenario == 6 ? FailurePolicy.RECOMPUTE : FailurePolicy.FAIL;
        long t = t0;
        s.at(t, "proxy-0", RequestAdmitted.newBuilder().setModel("llama-3-8b").setPromptTokens(blocks * 16).setMaxTokens(128)
                .setPrefillEngineId(prefill).setDecodeEngineId(decode).setFailurePolicy(fp).build());
        long ready = t + 1 + rnd.nextInt(3);
        long prefilled = t + 10 + rnd.nextInt(40);
        if (scenario == 3) {
            s.at(ready, "engine:" + decode, DecodeRejected.newBuilder().setEngineId(decode).setInstanceEpoch(1).setReason("no free pages").build());
            s.at(prefilled, "engine:" + prefill, prefillCompleted(prefill, src));
            return;
        }
        s.at(ready, "engine:" + decode, DecodeReady.newBuilder().setEngineId(decode).setInstanceEpoch(1).setLeaseId("lease-" + id)
                .setLeaseEpoch(1).setDestBlocks(dst).setLeaseDeadlineMs(0).setLayout(layout()).build());
        if (scenario == 4) {
            s.at(prefilled, "engine:" + prefill, PrefillFailed.newBuilder().setEngineId(prefill).setInstanceEpoch(1).setReason("out of memory").build());
            return;
        }
        if (scenario == 5) {
            return; // the prefill never reports: the lease (then the prefill timeout) ends it
        }
        s.at(prefilled, "engine:" + prefill, prefillCompleted(prefill, src));
        long ordered = Math.max(ready, prefilled);
        String worker = "worker:" + prefill;
        long bytes = (long) blocks * 32 * 2 * layout().getPageBytes();
        long at = ordered + 1;
        s.at(at, worker, TransferStarted.newBuilder().setOrderId(id + "/a1").setAttempt(1).setWorkerId(worker).setTransport("tcp").build());
        int attempt = 1;
        if (scenario == 1) {
            at += 2 + rnd.nextInt(5);
            s.at(at, worker, TransferFailed.newBuilder().setOrderId(id + "/a1").setAttempt(1).setWorkerId(worker).setReason("connection reset")
                    .setRetriable(true).build());
            long retryAt = at + policy.backoffMs(2);
            s.at(retryAt + 5, "decider-ticker", null); // a tick moves stream time past the backoff: the decider issues attempt 2
            at = retryAt + 60;
            attempt = 2;
            s.at(at, worker, TransferStarted.newBuilder().setOrderId(id + "/a2").setAttempt(2).setWorkerId(worker).setTransport("tcp").build());
        }
        if (scenario == 2) {
            s.at(at + 1 + rnd.nextInt(3), "proxy-0", CancelRequested.newBuilder().setRequestedBy("proxy-0").setReason("client disconnected").build());
            if (rnd.nextBoolean()) { // the worker stops and says so; else the drain window passes
                s.at(at + 6, worker, TransferFailed.newBuilder().setOrderId(id + "/a1").setAttempt(1).setWorkerId(worker).setReason("aborted")
                        .setRetriable(false).build());
            }
            return;
        }
        if (scenario == 6) {
            s.at(at + 3, worker, TransferFailed.newBuilder().setOrderId(id + "/a1").setAttempt(1).setWorkerId(worker)
                    .setReason("layout rejected by receiver").setRetriable(false).build());
            s.at(at + 400 + rnd.nextInt(400), "engine:" + decode, DecodeCompleted.newBuilder().setEngineId(decode).setOutputTokens(128)
                    .setRecomputed(true).build());
            return;
        }
        long done = at + 2 + rnd.nextInt(14);
        s.at(done, worker, TransferCompleted.newBuilder().setOrderId(id + "/a" + attempt).setAttempt(attempt).setWorkerId(worker)
                .setBytes(bytes).setDurationUs((done - at) * 1000).build());
        long finished = done + 50 + rnd.nextInt(700);
        if (rnd.nextInt(3) == 0) {
            s.at((done + finished) / 2, "engine:" + decode, LeaseHeartbeat.newBuilder().setEngineId(decode).setLeaseId("lease-" + id)
                    .setLeaseEpoch(1).setExtendToMs(0).build());
        }
        s.at(finished, "engine:" + decode, DecodeCompleted.newBuilder().setEngineId(decode).setOutputTokens(128).build());
    }

    private static PrefillCompleted prefillCompleted(String engine, List<BlockRun> src) {
        return PrefillCompleted.newBuilder().setEngineId(engine).setInstanceEpoch(1).setSourceBlocks(src)
                .setNumTokens(src.stream().mapToInt(BlockRun::getCount).sum() * 16).setFirstToken(791).setLayout(layout()).build();
    }

    /** One or two runs of {@code blocks} pages in a 4,096-page pool. */
    private static List<BlockRun> runs(Random rnd, int blocks) {
        if (blocks < 8 || rnd.nextBoolean()) {
            return List.of(BlockRun.newBuilder().setStart(rnd.nextInt(4096 - blocks)).setCount(blocks).build());
        }
        int first = blocks / 2;
        int a = rnd.nextInt(2048 - first);
        int b = 2048 + rnd.nextInt(2048 - (blocks - first));
        return List.of(BlockRun.newBuilder().setStart(a).setCount(first).build(), BlockRun.newBuilder().setStart(b).setCount(blocks - first).build());
    }

    /** Appends a request's facts with ids {@code <request>/<Type>/<n>}; a null payload is a tick into the request's partition. */
    private static final class Story {
        private final String id;
        private final int partition;
        private final List<RequestEvent> out;
        private int n;

        Story(String id, int partition, List<RequestEvent> out) {
            this.id = id;
            this.partition = partition;
            this.out = out;
        }

        void at(long t, String source, Object payload) {
            if (payload == null) {
                RequestEvent tick = tick(partition, t);
                tick.setEventId(tick.getEventId() + "/" + id);
                out.add(tick);
                return;
            }
            String eventId = id + "/" + payload.getClass().getSimpleName() + "/" + n++;
            out.add(RequestEvent.newBuilder().setRequestId(id).setEventId(eventId).setSource(source).setEventTimeMs(t).setPayload(payload).build());
        }
    }
}
