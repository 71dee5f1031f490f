package io.orbitkv.pd.logtools;

import io.orbitkv.pd.decider.DeciderPolicy;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.logtools.internal.MergeOrder;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Predicate;
import java.util.function.UnaryOperator;
import java.util.stream.IntStream;

/**
 * A small synthetic run of the real decider shared by the unit tests, and surgery on a copy of it: find a request
 * of a scenario, its facts and decisions, replace or add records (re-encoded with the real serdes, kept in merged
 * order). How violations are planted.
 */
public final class SyntheticRun {

    public static final EventSerdes SERDES = EventSerdes.embedded();
    public static final Topics TOPICS = new Topics(TopicsConfig.defaults(), SERDES);
    public static final DeciderPolicy POLICY = DeciderPolicy.defaults("orbitkv-dev-insecure-auth-key".getBytes(StandardCharsets.UTF_8));
    public static final SyntheticLog.Options OPTIONS = new SyntheticLog.Options(240, 7, 3, 1000, 1_735_689_600_000L);
    /** A slower run: 60 requests over 12 s of log time, long enough to slice past the admission grace. */
    public static final SyntheticLog.Options SLOW = new SyntheticLog.Options(60, 9, 3, 5, 1_735_689_600_000L);
    private static final java.util.Map<SyntheticLog.Options, List<LogRecord>> RUNS = new java.util.HashMap<>();

    private final List<LogRecord> log;
    private long nextOffset = 1_000_000;

    private SyntheticRun(List<LogRecord> log) {
        this.log = new ArrayList<>(log);
    }

    /** A fresh copy of the shared run (generated once per JVM). */
    public static SyntheticRun copy() {
        return copy(OPTIONS);
    }

    public static synchronized SyntheticRun copy(SyntheticLog.Options options) {
        return new SyntheticRun(RUNS.computeIfAbsent(options, o -> List.copyOf(SyntheticLog.generate(o, POLICY, TOPICS))));
    }

    public static LogSlice slice() {
        long[] big = IntStream.range(0, OPTIONS.partitions()).mapToLong(i -> 1L << 40).toArray();
        return SyntheticLog.slice(OPTIONS, TOPICS, big, big);
    }

    public List<LogRecord> records() {
        return List.copyOf(log);
    }

    /** The first request of a scenario (handoff, retry, cancel, decode-rejected, prefill-failed, timeout, recompute) matching {@code also}. */
    public String request(String scenario, Predicate<String> also) {
        for (int i = 0; i < OPTIONS.requests(); i++) {
            String id = SyntheticLog.requestId(i);
            if (SyntheticLog.scenario(OPTIONS, i).equals(scenario) && also.test(id)) {
                return id;
            }
        }
        throw new IllegalStateException("no " + scenario + " request in the run");
    }

    public String request(String scenario) {
        return request(scenario, id -> true);
    }

    public List<LogRecord> decisions(String id) {
        return log.stream().filter(r -> r.role() == TopicRole.DECISIONS && id.equals(r.keyString())).toList();
    }

    public List<LogRecord> facts(String id) {
        return log.stream().filter(r -> r.role() == TopicRole.REQUEST_EVENTS && id.equals(r.keyString())).toList();
    }

    public static Decision decision(LogRecord r) {
        return TOPICS.decisions().valueSerde().deserializer().deserialize(r.topic(), r.value());
    }

    public static RequestEvent fact(LogRecord r) {
        return TOPICS.requestEvents().valueSerde().deserializer().deserialize(r.topic(), r.value());
    }

    /** The request's first decision with a payload of this type. */
    public LogRecord decision(String id, Class<?> payload) {
        return decisions(id).stream().filter(r -> payload.isInstance(decision(r).getPayload())).findFirst()
                .orElseThrow(() -> new IllegalStateException(id + " has no " + payload.getSimpleName()));
    }

    public LogRecord fact(String id, Class<?> payload) {
        return facts(id).stream().filter(r -> payload.isInstance(fact(r).getPayload())).findFirst()
                .orElseThrow(() -> new IllegalStateException(id + " has no " + payload.getSimpleName()));
    }

    public void remove(LogRecord r) {
        if (!log.remove(r)) {
            throw new IllegalStateException("not in the log: " + r);
        }
    }

    /** Replaces a decision with an edited copy (its record timestamp follows the decision's stream time). */
    public void editDecision(LogRecord r, UnaryOperator<Decision> edit) {
        Decision d = edit.apply(Decision.newBuilder(decision(r)).build());
        remove(r);
        add(new LogRecord(r.role(), r.topic(), r.partition(), r.offset(), d.getStreamTimeMs(), r.key(), encode(d), false, r.timing()));
    }

    public void editFact(LogRecord r, UnaryOperator<RequestEvent> edit) {
        RequestEvent e = edit.apply(RequestEvent.newBuilder(fact(r)).build());
        remove(r);
        add(new LogRecord(r.role(), r.topic(), r.partition(), r.offset(), e.getEventTimeMs(), r.key(), TOPICS.requestEvents().valueSerde()
                .serializer().serialize(r.topic(), e), false, r.timing()));
    }

    /** Appends a decision of request {@code id} (in its partition, at its stream time). */
    public void addDecision(Decision d) {
        byte[] key = d.getRequestId().getBytes(StandardCharsets.UTF_8);
        add(LogRecord.of(TopicRole.DECISIONS, TOPICS.decisions().name(), Partitioning.partitionOf(key, OPTIONS.partitions()), nextOffset++,
                d.getStreamTimeMs(), key, encode(d)));
    }

    public void addFact(RequestEvent e) {
        byte[] key = e.getRequestId().getBytes(StandardCharsets.UTF_8);
        add(LogRecord.of(TopicRole.REQUEST_EVENTS, TOPICS.requestEvents().name(), Partitioning.partitionOf(key, OPTIONS.partitions()),
                nextOffset++, e.getEventTimeMs(), key, TOPICS.requestEvents().valueSerde().serializer().serialize(TOPICS.requestEvents().name(), e)));
    }

    public void addRaw(LogRecord r) {
        add(r);
    }

    private void add(LogRecord r) {
        log.add(r);
        log.sort(MergeOrder.COMPARATOR);
    }

    public static byte[] encode(Decision d) {
        return TOPICS.decisions().valueSerde().serializer().serialize(TOPICS.decisions().name(), d);
    }

    /** A decision of {@code id} following {@code last} (next seq, same request, given time and payload). */
    public static Decision next(Decision last, long streamTime, Object payload, String cause) {
        int seq = last.getSeq() + 1;
        return Decision.newBuilder().setRequestId(last.getRequestId()).setDecisionId(last.getRequestId() + "/" + seq).setSeq(seq)
                .setStreamTimeMs(streamTime).setCauseEventId(cause).setPayload(payload).build();
    }

    /** Inserts a decision at {@code seq}, renumbering the request's later decisions so the log stays gapless. */
    public void insertDecision(String id, int seq, long streamTime, Object payload, String cause) {
        for (LogRecord r : decisions(id)) {
            Decision d = decision(r);
            if (d.getSeq() >= seq) {
                editDecision(r, x -> {
                    x.setSeq(x.getSeq() + 1);
                    x.setDecisionId(id + "/" + x.getSeq());
                    return x;
                });
            }
        }
        addDecision(Decision.newBuilder().setRequestId(id).setDecisionId(id + "/" + seq).setSeq(seq).setStreamTimeMs(streamTime)
                .setCauseEventId(cause).setPayload(payload).build());
    }

    /** The request's last decision. */
    public Decision lastDecision(String id) {
        List<LogRecord> ds = decisions(id);
        return ds.stream().map(SyntheticRun::decision).max(java.util.Comparator.comparingInt(Decision::getSeq)).orElseThrow();
    }

    /** An in-memory source over the records. */
    public LogSource source() {
        List<LogRecord> snapshot = records();
        LogSlice slice = slice();
        return new LogSource() {
            @Override
            public LogSlice slice() {
                return slice;
            }

            @Override
            public void read(RecordFilter filter, java.util.function.Consumer<LogRecord> sink, Progress progress) {
                for (LogRecord r : snapshot) {
                    if (filter.wantsPartition(r.role(), r.partition()) && filter.wants(r)) {
                        sink.accept(r);
                    }
                }
            }

            @Override
            public void close() { }
        };
    }
}
