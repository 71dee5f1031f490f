package io.orbitkv.pd.bench;

import io.orbitkv.pd.decider.DeciderApp;
import io.orbitkv.pd.decider.DeciderConfig;
import io.orbitkv.pd.decider.DeciderConfig.Guarantee;
import io.orbitkv.pd.decider.DeciderMetrics;
import io.orbitkv.pd.decider.DeciderPolicy;
import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.DecodeCompleted;
import io.orbitkv.pd.events.DecodeReady;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.KvLayout;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.SerdeConfig;
import io.orbitkv.pd.schemas.TopicAdmin;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.BitSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Callable;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import org.HdrHistogram.Histogram;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The decider benchmark: decision latency (last input fact produced → decision consumed by its actor) at a fixed
 * rate and full-state-machine throughput, per processing mode, next to one raw Kafka produce→consume hop
 * measured in the same run against the same broker.
 */
public final class DeciderBench {

    /** A processing mode: what runs, its guarantee and commit interval, and how actors read decisions. */
    public record Mode(String name, Guarantee guarantee, Duration commitInterval, String isolation, Kind kind) {
        public Mode(String name, Guarantee guarantee, Duration commitInterval, String isolation) {
            this(name, guarantee, commitInterval, isolation, Kind.DECIDER);
        }
    }

    /** What a mode runs: the decider, or one of the two yardsticks beside it (neither is a decider). */
    public enum Kind {
        /** The Streams decider, full state machine. */
        DECIDER,
        /** The same state machine and decisions on plain clients ({@link PlainClientsDecider}). */
        FLOOR,
        /** DESIGN.md's minimal Streams match of two halves ({@link MinimalMatch}); its "handoffs" are pairs. */
        REFERENCE
    }

    /** What one mode measured. */
    public record Result(Mode mode, LatencyStats decision, double handoffsPerSecond, long handoffs, long duplicateDecisions,
            double cpuMsPerHandoff, LatencyStats rawHopUnderLoad, double coresBusyAtRate, Map<String, Double> recordsPerHandoff,
            Map<String, Double> requestsPerHandoff, Breakdown breakdown, GcPauses.Summary gcPauses) { }

    /**
     * Where a decision's latency goes (same measured decisions, same JVM clock): the hop in (last fact produced → the
     * decider starts processing it), the decider's own work (state, transition, decisions handed to the producer) and the
     * hop out (→ the actor has the decision).
     */
    public record Breakdown(LatencyStats hopIn, LatencyStats work, LatencyStats hopOut) { }

    /** Rate of the raw-hop probe that runs beside the decider during the latency phase (records/s). */
    static final int PROBE_RATE = 200;

    /** Knobs of a run. */
    public record Options(int rate, Duration warmup, Duration measure, int burst, int engines, Map<String, Object> deciderOverrides,
                          int partitions, DeciderConfig.StoreKind store, Duration writeBehind) {
        public Options(int rate, Duration warmup, Duration measure, int burst, int engines) {
            this(rate, warmup, measure, burst, engines, Map.of(), TopicsConfig.DEFAULT_PARTITIONS, DeciderConfig.StoreKind.ROCKSDB,
                    DeciderConfig.DEFAULT_STORE_WRITE_BEHIND);
        }
    }

    public static final List<Mode> MODES = List.of(
            new Mode("low-latency (EOS v2, commit 500 ms, actors read_uncommitted)", Guarantee.EXACTLY_ONCE_V2, DeciderConfig.DEFAULT_COMMIT_INTERVAL,
                    "read_uncommitted"),
            new Mode("exactly-once (EOS v2, commit 100 ms, read_committed)", Guarantee.EXACTLY_ONCE_V2, Duration.ofMillis(100), "read_committed"),
            new Mode("exactly-once (EOS v2, commit 20 ms, read_committed)", Guarantee.EXACTLY_ONCE_V2, Duration.ofMillis(20), "read_committed"),
            new Mode("at-least-once (ALOS, read_uncommitted)", Guarantee.AT_LEAST_ONCE, Duration.ofMillis(100), "read_uncommitted"),
            // Not a decider: the same state machine and decisions over one plain consumer and producer (see PlainClientsDecider),
            // to show what the handoff's message pattern alone costs here.
            new Mode("floor: same state machine on plain clients (no Streams, no store, no transactions)", Guarantee.AT_LEAST_ONCE,
                    Duration.ofMillis(100), "read_uncommitted", Kind.FLOOR),
            // Not a decider either: DESIGN.md's minimal Processor-API match (two halves in, one pair out), against which the
            // design's latency target was set; the full state machine's numbers read against it.
            new Mode("reference: DESIGN.md's minimal Streams match (2 records in, 1 out per pair; ALOS, not a decider)", Guarantee.AT_LEAST_ONCE,
                    Duration.ofMillis(100), "read_uncommitted", Kind.REFERENCE));

    private final String bootstrap;
    private final Options options;
    private final Path workDir;
    private final PrintStreamLike out;
    /** CPU time of the broker process(es), when they run on this machine; 0 when unknown. */
    private volatile java.util.function.LongSupplier brokerCpuNanos = () -> 0L;

    /** Lets the CPU cost per handoff include the broker's CPU time (the benchmark runs it on the same cores). */
    public DeciderBench withBrokerCpu(java.util.function.LongSupplier brokerCpuNanos) {
        this.brokerCpuNanos = brokerCpuNanos;
        return this;
    }

    private long cpuNanos() {
        var os = (com.sun.management.OperatingSystemMXBean) java.lang.management.ManagementFactory.getOperatingSystemMXBean();
        return os.getProcessCpuTime() + brokerCpuNanos.getAsLong();
    }

    /** Where progress lines go (the CLI's stdout). */
    public interface PrintStreamLike {
        void println(String line);
    }

    public DeciderBench(String bootstrap, Options options, Path workDir, PrintStreamLike out) {
        this.bootstrap = bootstrap;
        this.options = options;
        this.workDir = workDir;
        this.out = out;
    }

    // ------------------------------------------------------------------------------------------- raw hop

    /** One raw produce→consume hop at the benchmark rate: the baseline every decider number is compared with. */
    public LatencyStats rawHop(String topic) throws Exception {
        return rawHop(topic, options.rate(), options.warmup(), options.measure(), true);
    }

    /**
     * One raw produce→consume hop at {@code rate} records/s: warm-up, then the measured window. With {@code settle} the
     * warm-up ends with {@link GcPauses#settleHeap()}, as before a decider's window (off for the probe that runs beside
     * a decider, whose own warm-up settles the heap).
     */
    LatencyStats rawHop(String topic, int rate, Duration warmup, Duration measure, boolean settle) throws Exception {
        return RawHop.measure(bootstrap, topic, rate, warmup, measure, settle);
    }

    /** Creates {@code names} with {@code partitions} each and waits until the broker serves them (a first write must not race the creation). */
    private void createTopics(int partitions, String... names) throws Exception {
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            admin.createTopics(java.util.Arrays.stream(names).map(n -> new NewTopic(n, partitions, (short) 1)).toList()).all().get();
            TopicAdmin.awaitServed(admin, List.of(names));
        }
    }

    // ------------------------------------------------------------------------------------------- decider

    /** CPUs the system under test (decider, floor or reference) is started on, or null: wherever this JVM runs. */
    private BitSet deciderCpus;

    /** Starts each system under test with its threads pinned to {@code cpus}; the load, actors and probe stay where this JVM runs. */
    public DeciderBench withDeciderCpus(BitSet cpus) {
        this.deciderCpus = cpus;
        return this;
    }

    /** Builds and starts a system under test on {@link #deciderCpus}: the threads it starts now inherit the calling thread's CPUs. */
    private <T> T underTestOnItsCpus(Callable<T> start) throws Exception {
        if (deciderCpus == null) {
            return start.call();
        }
        BitSet before = CpuAffinity.pinThread(deciderCpus);
        try {
            return start.call();
        } finally {
            CpuAffinity.pinThread(before);
        }
    }

    public Result run(Mode mode, int index) throws Exception {
        String prefix = "bench" + index + "-" + System.currentTimeMillis() % 100000 + ".";
        TopicsConfig tc = new TopicsConfig(prefix, options.partitions(), (short) 1, Duration.ofHours(1));
        // The bench's engines write their facts to Kafka themselves (no engine API), so an order ahead of the prefill
        // could only be started by its copy with the pages: one decision more per handoff and nothing gained. The
        // deployment for such engines runs without it, and so does the bench (docs/decider.md, "Orders ahead").
        DeciderPolicy policy = DeciderPolicy.defaults("bench-auth-key-0123456789".getBytes(StandardCharsets.UTF_8)).withOrderAhead(false);
        String applicationId = "bench-decider-" + index + "-" + System.nanoTime() % 100000;
        if (mode.kind() == Kind.FLOOR) {
            try (EventSerdes serdes = EventSerdes.embedded();
                 PlainClientsDecider plain = underTestOnItsCpus(() -> new PlainClientsDecider(bootstrap, new Topics(tc, serdes), policy, applicationId)
                         .start())) {
                if (!plain.awaitAssigned(Duration.ofSeconds(60))) {
                    throw new IllegalStateException("plain-clients decider got no partitions within 60 s");
                }
                return run(mode, prefix, new UnderTest(() -> new Actor(plain.topics(), mode), plain::factTimings, () -> null,
                        plain::clientMetrics, applicationId));
            }
        }
        Path state = Files.createDirectories(workDir.resolve("state-" + index));
        if (mode.kind() == Kind.REFERENCE) {
            String input = prefix + "halves";
            String output = prefix + "pairs";
            createTopics(options.partitions(), input, output);
            try (MinimalMatch match = underTestOnItsCpus(() -> new MinimalMatch(bootstrap, applicationId, input, output, mode.commitInterval(), state)
                    .start())) {
                if (!match.awaitRunning(Duration.ofSeconds(60))) {
                    throw new IllegalStateException("minimal match did not start: " + match.streams().state());
                }
                return run(mode, prefix, new UnderTest(() -> new PairLoad(input, output), timings -> { }, () -> commitStats(match.streams()),
                        () -> List.of(match.streams().metrics()), applicationId));
            }
        }
        DeciderConfig config = new DeciderConfig(bootstrap, applicationId, tc,
                SerdeConfig.embedded(), mode.guarantee(), mode.commitInterval(), state, options.store(), options.writeBehind(), 1, policy,
                Duration.ofMillis(200), "127.0.0.1", "", -1, options.deciderOverrides());
        try (DeciderApp app = underTestOnItsCpus(() -> new DeciderApp(config).start())) {
            if (!app.awaitRunning(Duration.ofSeconds(60))) {
                throw new IllegalStateException("decider did not start: " + app.streams().state());
            }
            return run(mode, prefix, new UnderTest(() -> new Actor(app.topics(), mode), app.deciderMetrics()::factTimings, () -> commitStats(app.streams()),
                    () -> List.of(app.streams().metrics()), applicationId));
        }
    }

    /**
     * The decider under test, as the measurement needs it: the load that drives it, its per-fact timing hook, Streams'
     * commit metrics (null for the plain-clients floor), its Kafka clients' metrics, and its application id (the
     * prefix of its internal topics).
     */
    private record UnderTest(java.util.function.Supplier<Load<?>> load, java.util.function.Consumer<DeciderMetrics.FactTimings> factTimings,
                             java.util.function.Supplier<String> commitStats,
                             java.util.function.Supplier<List<Map<MetricName, ? extends Metric>>> clientMetrics, String applicationId) { }

    private Result run(Mode mode, String prefix, UnderTest decider) throws Exception {
        try (Load<?> actor = decider.load().get(); GcPauses gc = new GcPauses()) {
            actor.start();
            // Latency at a fixed rate: warm-up (JIT, caches), then the measured window.
            long measureFrom = System.nanoTime() + options.warmup().toNanos();
            long end = measureFrom + options.measure().toNanos();
            actor.measureFrom = measureFrom;
            decider.factTimings().accept(actor::factProcessed);
            // The same raw hop, measured beside the decider while it carries this load: what one hop costs here.
            var probe = java.util.concurrent.CompletableFuture.supplyAsync(() -> {
                try {
                    return rawHop(prefix + "raw-probe", PROBE_RATE, options.warmup(), options.measure(), false);
                } catch (Exception e) {
                    throw new java.util.concurrent.CompletionException(e);
                }
            }, r -> Thread.ofPlatform().name("raw-hop-probe").start(r));
            Pacer pacer = new Pacer(options.rate());
            int i = 0;
            long cpuAtMeasure = -1;
            long wallAtMeasure = 0;
            Map<String, Double> requestsAtMeasure = Map.of();
            int handoffsAtMeasure = 0;
            long settleAt = settleAt(measureFrom, options.warmup());
            while (System.nanoTime() < end) {
                pacer.awaitNext();
                if (System.nanoTime() >= settleAt) {
                    GcPauses.settleHeap();
                    settleAt = Long.MAX_VALUE;
                }
                if (cpuAtMeasure < 0 && System.nanoTime() >= measureFrom) {
                    cpuAtMeasure = cpuNanos();
                    wallAtMeasure = System.nanoTime();
                    requestsAtMeasure = requestCounts(decider, actor);
                    handoffsAtMeasure = i;
                }
                actor.send("L" + i, i);
                i++;
            }
            // How much of the machine the pipeline (bench JVM + broker) keeps busy at the benchmark rate.
            double coresBusy = (cpuNanos() - cpuAtMeasure) / (double) (System.nanoTime() - wallAtMeasure);
            GcPauses.Summary pauses = gc.between(measureFrom, System.nanoTime());
            Map<String, Double> requests = perHandoff(requestsAtMeasure, requestCounts(decider, actor), i - handoffsAtMeasure);
            actor.awaitCompleted(i, Duration.ofSeconds(60));
            LatencyStats latency = LatencyStats.of(actor.latency);
            String commits = decider.commitStats().get();
            if (commits != null) {
                out.println(commits);
            }
            decider.factTimings().accept(null);
            Breakdown breakdown = new Breakdown(LatencyStats.of(actor.hopIn), LatencyStats.of(actor.work), LatencyStats.of(actor.hopOut));
            LatencyStats underLoad = probe.join();
            // Throughput: a burst of handoffs as fast as the pipeline takes them, full state machine.
            actor.measureFrom = Long.MAX_VALUE;
            long before = actor.completed.get();
            long cpu0 = cpuNanos();
            long t0 = System.nanoTime();
            for (int j = 0; j < options.burst(); j++) {
                actor.send("T" + j, j);
            }
            actor.awaitCompleted(before + options.burst(), Duration.ofMinutes(3));
            double seconds = (System.nanoTime() - t0) / 1e9;
            double cpuMs = (cpuNanos() - cpu0) / 1e6 / options.burst();
            return new Result(mode, latency, options.burst() / seconds, options.burst(), actor.duplicates.get(), cpuMs, underLoad, coresBusy,
                    recordsPerHandoff(prefix, decider.applicationId(), i + options.burst()), requests, breakdown, pauses);
        }
    }

    /**
     * When a warm-up settles the heap ({@link GcPauses#settleHeap()}): a few seconds before the measured window, so the
     * backlog that the full collection's pause leaves behind has drained when measuring starts; never without a
     * warm-up, whose pause would land in the measured window.
     */
    static long settleAt(long measureFrom, Duration warmup) {
        return RawHop.settleAt(measureFrom, warmup);
    }

    /** Requests each client has sent to the broker so far (client metrics {@code request-total}), by client role. */
    private static Map<String, Double> requestCounts(UnderTest decider, Load<?> actor) {
        Map<String, Double> m = new java.util.TreeMap<>();
        java.util.function.BiConsumer<String, Map<MetricName, ? extends Metric>> add = (role, metrics) ->
                metrics.forEach((name, metric) -> {
                    if (name.name().equals("request-total") && (name.group().equals("producer-metrics") || name.group().equals("consumer-metrics"))
                            && !name.tags().getOrDefault("client-id", "").contains("restore") && metric.metricValue() instanceof Number n) {
                        m.merge(role + (name.group().startsWith("producer") ? " producer" : " consumer"), n.doubleValue(), Double::sum);
                    }
                });
        decider.clientMetrics().get().forEach(metrics -> add.accept("decider", metrics));
        actor.clientMetrics().forEach(metrics -> add.accept("actors", metrics));
        return m;
    }

    /** Requests per handoff between two {@link #requestCounts} snapshots. */
    private static Map<String, Double> perHandoff(Map<String, Double> before, Map<String, Double> after, long handoffs) {
        Map<String, Double> m = new java.util.TreeMap<>();
        after.forEach((k, v) -> m.put(k, (v - before.getOrDefault(k, 0.0)) / Math.max(1, handoffs)));
        return m;
    }

    /** The stream-thread metrics {@link #commitStats} prints. */
    private static final Set<String> THREAD_METRICS = Set.of("commit-latency-avg", "commit-latency-max", "commit-rate", "commit-ratio",
            "process-ratio", "poll-ratio", "punctuate-ratio");

    /** Streams' own commit metrics after the latency phase: how long the stream thread spends committing. */
    private static String commitStats(org.apache.kafka.streams.KafkaStreams streams) {
        Map<String, Double> m = new java.util.TreeMap<>();
        streams.metrics().forEach((name, metric) -> {
            if (name.group().equals("stream-thread-metrics") && THREAD_METRICS.contains(name.name())) {
                Object v = metric.metricValue();
                if (v instanceof Number num) {
                    m.put(name.name(), num.doubleValue());
                }
            }
        });
        StringBuilder b = new StringBuilder("  stream thread:");
        m.forEach((k, v) -> b.append(' ').append(k).append('=').append(String.format(java.util.Locale.ROOT, "%.3f", v)));
        return b.toString();
    }

    /** Records written per handoff to each topic of this run (inputs, decisions, commands, changelogs), from end offsets. */
    private Map<String, Double> recordsPerHandoff(String prefix, String applicationId, long handoffs) throws Exception {
        Map<String, Double> out = new java.util.TreeMap<>();
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            List<String> names = admin.listTopics().names().get().stream()
                    .filter(n -> (n.startsWith(prefix) || n.startsWith(applicationId)) && !n.contains("raw-probe")).toList();
            TopicAdmin.endOffsets(admin, names).forEach((tp, end) -> out.merge(tp.topic().startsWith(prefix)
                    ? tp.topic().substring(prefix.length()) : tp.topic().substring(applicationId.length() + 1), end / (double) handoffs, Double::sum));
        }
        return out;
    }

    private Map<String, Object> producerConfig() {
        Map<String, Object> p = new HashMap<>();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 0);
        return p;
    }

    private Map<String, Object> consumerConfig(String group, String isolation) {
        Map<String, Object> c = new HashMap<>();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        c.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation);
        c.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 2000);
        return c;
    }

    private static KvLayout layout() {
        return KvLayout.newBuilder().setNumLayers(32).setKvSplit(KvSplit.SEPARATE).setBlockSizeTokens(16).setNumKvHeads(8)
                .setHeadDim(128).setDtype(Dtype.BF16).setTpRank(0).setTpSize(1).setPageBytes(32768).setNumBlocks(8192).build();
    }

    /**
     * What drives the system under test: sends each handoff's inputs, plays the actors that read its outputs, and
     * records the latency of the measured ones (sent at or after {@link #measureFrom}) and its three parts.
     */
    private abstract static class Load<V> extends ClientsLoop<V> {
        final AtomicLong completed = new AtomicLong();
        final AtomicLong duplicates = new AtomicLong();
        final Histogram latency = LatencyStats.histogram();
        /** The three parts of each measured decision: hop in (fact produced → processing starts), the decider's work, hop out. */
        final Histogram hopIn = LatencyStats.histogram();
        final Histogram work = LatencyStats.histogram();
        final Histogram hopOut = LatencyStats.histogram();
        volatile long measureFrom = Long.MAX_VALUE;

        Load(KafkaProducer<String, V> producer, KafkaConsumer<String, byte[]> consumer, String reads) {
            super("bench-actor", producer, consumer, reads);
        }

        /** Sends handoff {@code i}'s inputs, keyed {@code id}. */
        abstract void send(String id, int i);

        /** The system under test (same JVM) processed an input: start and end of its processing. */
        void factProcessed(String eventId, long startNanos, long endNanos) { }

        /** Records one measured latency and its parts from the same JVM clock. */
        void record(long sent, long processStart, long processEnd, long now) {
            hopIn.recordValue(Math.max(0, (processStart - sent) / 1000));
            work.recordValue(Math.max(0, (processEnd - processStart) / 1000));
            hopOut.recordValue(Math.max(0, (now - processEnd) / 1000));
        }

        void awaitCompleted(long n, Duration timeout) throws InterruptedException {
            long deadline = System.nanoTime() + timeout.toNanos();
            while (completed.get() < n) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("only " + completed.get() + " of " + n + " handoffs completed within " + timeout);
                }
                synchronized (this) {
                    wait(20);
                }
            }
        }
    }

    /**
     * Plays the proxy and the engines (sends each handoff's facts) and the workers (acts on orders and KV-ready
     * decisions, deduping by decision id as every actor must), recording decision latency.
     */
    private final class Actor extends Load<RequestEvent> {
        final Topics topics;
        final Map<String, Long> sentAt = new ConcurrentHashMap<>();
        /** Decision ids seen (engine key + id) and requests finished: only the actor's thread touches them. */
        final LongSet seen = new LongSet();
        final LongSet done = new LongSet();
        /** Processing start and end of the facts whose decisions are measured, keyed like {@link #sentAt}. */
        final Map<String, long[]> processedAt = new ConcurrentHashMap<>();
        final KvLayout layout = layout();

        Actor(Topics topics, Mode mode) {
            super(new KafkaProducer<>(producerConfig(), new StringSerializer(), topics.requestEvents().valueSerde().serializer()),
                    new KafkaConsumer<>(consumerConfig("bench-actor-" + System.nanoTime(), mode.isolation()), new StringDeserializer(),
                            new ByteArrayDeserializer()), topics.engineCommands().name());
            this.topics = topics;
        }

        @Override
        void send(String req, int i) {
            String p = "prefill-" + (i % options.engines());
            String d = "decode-" + (i % options.engines());
            List<BlockRun> src = List.of(BlockRun.newBuilder().setStart((i * 8) % 8000).setCount(8).build());
            List<BlockRun> dst = List.of(BlockRun.newBuilder().setStart((i * 8 + 4) % 8000).setCount(8).build());
            send(req, "adm", RequestAdmitted.newBuilder().setModel("m").setPromptTokens(128).setMaxTokens(16).setPrefillEngineId(p)
                    .setDecodeEngineId(d).build());
            send(req, "dr", DecodeReady.newBuilder().setEngineId(d).setInstanceEpoch(1).setLeaseId(req).setLeaseEpoch(1).setDestBlocks(dst)
                    .setLeaseDeadlineMs(0).setLayout(layout).build());
            sentAt.put(req + "/order", System.nanoTime());
            send(req, "pc", PrefillCompleted.newBuilder().setEngineId(p).setInstanceEpoch(1).setSourceBlocks(src).setNumTokens(128)
                    .setLayout(layout).build());
        }

        private void send(String req, String kind, Object payload) {
            producer.send(new ProducerRecord<>(topics.requestEvents().name(), req, RequestEvent.newBuilder().setRequestId(req)
                    .setEventId(req + "/" + kind).setSource("bench").setEventTimeMs(System.currentTimeMillis()).setPayload(payload).build()));
        }

        @Override
        void loop() {
            while (running) {
                for (ConsumerRecord<String, byte[]> r : consumer.poll(Duration.ofMillis(50))) {
                    long now = System.nanoTime();
                    Decision dec = topics.engineCommands().valueSerde().deserializer().deserialize(r.topic(), r.value());
                    if (!seen.add(r.key() + "|" + dec.getDecisionId())) {
                        duplicates.incrementAndGet();
                        continue;
                    }
                    String req = dec.getRequestId();
                    switch (dec.getPayload()) {
                        case TransferOrder o when o.getAwaitPrefill() -> { } // not issued here (order-ahead off); a worker would park it
                        case TransferOrder o -> {
                            record(req + "/order", now);
                            sentAt.put(req + "/kv", System.nanoTime());
                            send(req, "tc" + o.getAttempt(), TransferCompleted.newBuilder().setOrderId(o.getOrderId()).setAttempt(o.getAttempt())
                                    .setWorkerId("bench").setBytes(8L * 64 * 32768).setDurationUs(100).build());
                        }
                        case KvReady k -> {
                            record(req + "/kv", now);
                            send(req, "dc", DecodeCompleted.newBuilder().setEngineId(k.getDecodeEngineId()).setOutputTokens(16).build());
                        }
                        case RequestOutcome o when o.getKind() == OutcomeKind.COMPLETED -> {
                            if (done.add(req)) {
                                completed.incrementAndGet();
                            }
                        }
                        default -> { }
                    }
                }
            }
        }

        private void record(String key, long now) {
            long[] processed = processedAt.remove(key);
            Long sent = sentAt.remove(key);
            if (processed != null && sent != null && sent >= measureFrom) {
                record(sent, processed[0], processed[1], now);
            }
            if (sent != null && sent >= measureFrom) {
                latency.recordValue(Math.max(0, (now - sent) / 1000));
            }
        }

        /** The decider (same JVM) processed a fact: keep the timings of the facts whose decisions are measured. */
        @Override
        void factProcessed(String eventId, long startNanos, long endNanos) {
            int slash = eventId.lastIndexOf('/');
            String kind = eventId.substring(slash + 1);
            String key = kind.equals("pc") ? "/order" : kind.startsWith("tc") ? "/kv" : null;
            if (key != null) {
                processedAt.put(eventId.substring(0, slash) + key, new long[] {startNanos, endNanos});
            }
        }

    }

    /**
     * The load of the {@link Kind#REFERENCE} mode: each "handoff" is a pair, two halves on one key (the second
     * stamped with its send time), and the matched pair read back; its latency is the second half produced → the
     * pair consumed, split by the processing times the match stamps into the pair.
     */
    private final class PairLoad extends Load<byte[]> {
        final String input;
        final byte[] pad = new byte[150]; // about the size of a request fact
        final LongSet seen = new LongSet(); // only the actor's thread touches it

        PairLoad(String input, String output) {
            super(new KafkaProducer<>(producerConfig(), new StringSerializer(), new ByteArraySerializer()),
                    new KafkaConsumer<>(consumerConfig("bench-pairs-" + System.nanoTime(), "read_uncommitted"), new StringDeserializer(),
                            new ByteArrayDeserializer()), output);
            this.input = input;
        }

        @Override
        void send(String id, int i) {
            producer.send(new ProducerRecord<>(input, id, pad));
            producer.send(new ProducerRecord<>(input, id, ByteBuffer.allocate(8 + pad.length).putLong(System.nanoTime()).put(pad).array()));
        }

        @Override
        void loop() {
            while (running) {
                for (ConsumerRecord<String, byte[]> r : consumer.poll(Duration.ofMillis(50))) {
                    long now = System.nanoTime();
                    if (!seen.add(r.key())) {
                        duplicates.incrementAndGet();
                        continue;
                    }
                    ByteBuffer v = ByteBuffer.wrap(r.value());
                    long sent = v.getLong();
                    if (sent >= measureFrom) {
                        record(sent, v.getLong(), v.getLong(), now);
                        latency.recordValue(Math.max(0, (now - sent) / 1000));
                    }
                    completed.incrementAndGet();
                }
            }
        }
    }
}
