package io.orbitkv.pd.logtools;

import io.orbitkv.pd.logtools.internal.MergeOrder;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.tracing.Marks;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.function.Consumer;
import java.util.stream.Collectors;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.ConsumerRecords;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndTimestamp;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * The log on a Kafka cluster, read as a {@link LogSource}: the topics of the requested roles, each partition
 * from its first retained offset (or the first at or after {@code from}) up to the end offset seen when the
 * source was opened (or the first after {@code to}), so a read of a live cluster ends. Reads with
 * {@code read_committed}: the decider's aborted transactions are not part of the record. Assigns partitions
 * directly (no consumer group, nothing committed), so it disturbs no other reader.
 *
 * <p>Merged order across partitions needs the head of every partition: each partition gets a small queue,
 * partitions whose queue is full are paused, so memory stays bounded however far apart the partitions are in time.
 */
public final class KafkaLogSource implements LogSource {

    private static final int QUEUE_HIGH = 4_000;
    private static final int QUEUE_LOW = 1_000;

    /**
     * Where and what to read.
     *
     * @param bootstrap       bootstrap servers
     * @param clientOverrides extra consumer properties (security settings, e.g. from {@code kafka.*} config keys)
     * @param topics          the deployment's topic registry (names by role)
     * @param serdeMode       how the deployment encodes values (recorded in the slice; the cluster does not say)
     * @param roles           which topics to read; roles other than request-events and decisions are skipped
     *                        when their topic does not exist
     * @param fromMs          first record timestamp, or null for the log start
     * @param toMs            last record timestamp (inclusive), or null for the end
     * @param timeout         how long to wait for the cluster before giving up with a clear error
     */
    public record Options(String bootstrap, Map<String, Object> clientOverrides, Topics topics, String serdeMode, Set<TopicRole> roles, Long fromMs,
                          Long toMs, Duration timeout) {
        public Options {
            if (bootstrap == null || bootstrap.isBlank()) {
                throw new IllegalArgumentException("--bootstrap: required");
            }
            clientOverrides = Map.copyOf(clientOverrides);
            roles = roles.isEmpty() ? EnumSet.noneOf(TopicRole.class) : EnumSet.copyOf(roles);
            if (fromMs != null && toMs != null && toMs < fromMs) {
                throw new IllegalArgumentException("--to: must not be before --from");
            }
        }
    }

    private final Options options;
    private final KafkaConsumer<byte[], byte[]> consumer;
    private final LogSlice slice;
    private final Map<String, TopicRole> roleByTopic = new HashMap<>();
    private final List<String> skipped = new ArrayList<>();

    private KafkaLogSource(Options options) {
        this.options = options;
        Map<String, Object> p = new HashMap<>();
        p.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, options.bootstrap());
        p.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        p.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        p.put(ConsumerConfig.CLIENT_ID_CONFIG, "orbitkv-log-tools");
        p.put(ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 5_000);
        p.put(ConsumerConfig.FETCH_MAX_BYTES_CONFIG, 64 << 20);
        p.put(ConsumerConfig.MAX_PARTITION_FETCH_BYTES_CONFIG, 8 << 20);
        p.put(ConsumerConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, (int) options.timeout().toMillis());
        p.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, (int) Math.min(30_000, options.timeout().toMillis()));
        p.putAll(options.clientOverrides());
        p.remove(ConsumerConfig.GROUP_ID_CONFIG);
        this.consumer = new KafkaConsumer<>(p, new ByteArrayDeserializer(), new ByteArrayDeserializer());
        try {
            this.slice = resolve();
        } catch (RuntimeException e) {
            consumer.close(Duration.ZERO);
            throw e;
        }
    }

    /**
     * Connects and fixes the slice (offset ranges) to read.
     *
     * @throws IllegalArgumentException when the cluster cannot be reached or a needed topic does not exist,
     *                                  with what to check
     */
    public static KafkaLogSource open(Options options) {
        return new KafkaLogSource(options);
    }

    /** Topics of requested roles that do not exist on the cluster and were left out. */
    public List<String> skippedTopics() {
        return List.copyOf(skipped);
    }

    private LogSlice resolve() {
        Map<String, List<PartitionInfo>> existing;
        try {
            existing = consumer.listTopics(options.timeout());
        } catch (TimeoutException e) {
            throw new IllegalArgumentException("cannot reach Kafka at " + options.bootstrap() + " within " + options.timeout().toSeconds()
                    + " s: is a broker running there? ('./orbitkv-pd broker' starts one on 127.0.0.1:9092)");
        }
        List<LogSlice.TopicSlice> topics = new ArrayList<>();
        for (TopicRole role : options.roles()) {
            String name = role.topic(options.topics()).name();
            List<PartitionInfo> parts = existing.get(name);
            if (parts == null || parts.isEmpty()) {
                if (role == TopicRole.REQUEST_EVENTS || role == TopicRole.DECISIONS) {
                    String similar = existing.keySet().stream().filter(t -> t.endsWith(name.substring(options.topics().config().prefix().length())))
                            .sorted().collect(Collectors.joining(", "));
                    throw new IllegalArgumentException("topic " + name + " does not exist on " + options.bootstrap()
                            + (similar.isEmpty() ? " (has anything run against this cluster?)" : "; topics with other prefixes: " + similar
                            + " (use --prefix)"));
                }
                skipped.add(name);
                continue;
            }
            roleByTopic.put(name, role);
            List<TopicPartition> tps = parts.stream().map(pi -> new TopicPartition(name, pi.partition()))
                    .sorted((a, b) -> Integer.compare(a.partition(), b.partition())).toList();
            Map<TopicPartition, Long> begin = consumer.beginningOffsets(tps);
            Map<TopicPartition, Long> end = consumer.endOffsets(tps);
            Map<TopicPartition, Long> from = options.fromMs() == null ? begin : offsetsFor(tps, options.fromMs(), end);
            Map<TopicPartition, Long> to = options.toMs() == null ? end : offsetsFor(tps, options.toMs() + 1, end);
            List<LogSlice.PartitionRange> ranges = new ArrayList<>();
            for (TopicPartition tp : tps) {
                long s = Math.max(begin.get(tp), from.get(tp));
                long e = Math.min(end.get(tp), to.get(tp));
                ranges.add(new LogSlice.PartitionRange(tp.partition(), s, Math.max(s, e), s == begin.get(tp)));
            }
            topics.add(new LogSlice.TopicSlice(name, role, ranges));
        }
        String range = options.fromMs() == null && options.toMs() == null ? "" : " from " + (options.fromMs() == null ? "start"
                : java.time.Instant.ofEpochMilli(options.fromMs())) + " to " + (options.toMs() == null ? "end" : java.time.Instant.ofEpochMilli(options.toMs()));
        return new LogSlice("kafka " + options.bootstrap() + range, options.serdeMode(), System.currentTimeMillis(), null, topics);
    }

    private Map<TopicPartition, Long> offsetsFor(List<TopicPartition> tps, long ts, Map<TopicPartition, Long> end) {
        Map<TopicPartition, Long> query = new HashMap<>();
        tps.forEach(tp -> query.put(tp, ts));
        Map<TopicPartition, OffsetAndTimestamp> found = consumer.offsetsForTimes(query);
        Map<TopicPartition, Long> out = new HashMap<>();
        for (TopicPartition tp : tps) {
            OffsetAndTimestamp o = found.get(tp);
            out.put(tp, o == null ? end.get(tp) : o.offset());
        }
        return out;
    }

    @Override
    public LogSlice slice() {
        return slice;
    }

    private static final class Part {
        final TopicPartition tp;
        final TopicRole role;
        final long end;
        final ArrayDeque<LogRecord> queue = new ArrayDeque<>();
        boolean exhausted;
        boolean paused;

        Part(TopicPartition tp, TopicRole role, long end) {
            this.tp = tp;
            this.role = role;
            this.end = end;
        }
    }

    @Override
    public void read(RecordFilter filter, Consumer<LogRecord> sink, Progress progress) {
        List<Part> parts = new ArrayList<>();
        Map<TopicPartition, Part> byTp = new HashMap<>();
        long total = 0;
        for (LogSlice.TopicSlice t : slice.topics()) {
            for (LogSlice.PartitionRange r : t.partitions()) {
                if (r.count() == 0 || !filter.wantsPartition(t.role(), r.partition())) {
                    continue;
                }
                Part part = new Part(new TopicPartition(t.name(), r.partition()), t.role(), r.end());
                parts.add(part);
                byTp.put(part.tp, part);
                total += r.count();
            }
        }
        progress.start("reading " + new TreeSet<>(parts.stream().map(p -> p.tp.topic()).toList()) + " from " + options.bootstrap(), total);
        try {
            consumer.assign(byTp.keySet());
            for (LogSlice.TopicSlice t : slice.topics()) {
                for (LogSlice.PartitionRange r : t.partitions()) {
                    TopicPartition tp = new TopicPartition(t.name(), r.partition());
                    if (byTp.containsKey(tp)) {
                        consumer.seek(tp, r.start());
                    }
                }
            }
            long lastProgress = System.nanoTime();
            while (true) {
                boolean needPoll = false;
                for (Part p : parts) {
                    if (p.queue.isEmpty() && !p.exhausted) {
                        needPoll = true;
                        break;
                    }
                }
                if (needPoll) {
                    if (poll(byTp)) {
                        lastProgress = System.nanoTime();
                    } else if (System.nanoTime() - lastProgress > options.timeout().toNanos()) {
                        Part stuck = parts.stream().filter(p -> p.queue.isEmpty() && !p.exhausted).findFirst().orElseThrow();
                        throw new IllegalStateException("no progress reading " + stuck.tp + " at offset " + consumer.position(stuck.tp)
                                + " (end " + stuck.end + ") for " + options.timeout().toSeconds() + " s");
                    }
                    continue;
                }
                Part min = null;
                for (Part p : parts) {
                    if (!p.queue.isEmpty() && (min == null || MergeOrder.COMPARATOR.compare(p.queue.peekFirst(), min.queue.peekFirst()) < 0)) {
                        min = p;
                    }
                }
                if (min == null) {
                    break;
                }
                LogRecord r = min.queue.pollFirst();
                progress.advance(1);
                if (filter.wants(r)) {
                    sink.accept(r);
                }
                if (min.paused && !min.exhausted && min.queue.size() < QUEUE_LOW) {
                    consumer.resume(List.of(min.tp));
                    min.paused = false;
                }
            }
        } finally {
            consumer.unsubscribe();
            progress.done();
        }
    }

    /** One poll; true when anything moved (records queued or a partition reached its end). */
    private boolean poll(Map<TopicPartition, Part> byTp) {
        ConsumerRecords<byte[], byte[]> records = consumer.poll(Duration.ofMillis(200));
        boolean moved = !records.isEmpty();
        for (TopicPartition tp : records.partitions()) {
            Part part = byTp.get(tp);
            for (ConsumerRecord<byte[], byte[]> r : records.records(tp)) {
                if (r.offset() < part.end) {
                    Header timing = r.headers().lastHeader(Marks.HEADER);
                    part.queue.addLast(LogRecord.of(part.role, r.topic(), r.partition(), r.offset(), r.timestamp(), r.key(), r.value(),
                            timing == null || timing.value() == null ? null : new String(timing.value(), StandardCharsets.US_ASCII)));
                }
            }
        }
        List<TopicPartition> pause = new ArrayList<>();
        for (Part p : byTp.values()) {
            if (!p.exhausted && consumer.position(p.tp) >= p.end) {
                p.exhausted = true;
                moved = true;
            }
            if (!p.paused && (p.exhausted || p.queue.size() >= QUEUE_HIGH)) {
                pause.add(p.tp);
                p.paused = true;
            }
        }
        if (!pause.isEmpty()) {
            consumer.pause(pause);
        }
        return moved;
    }

    @Override
    public void close() {
        consumer.close(Duration.ofSeconds(5));
    }
}
