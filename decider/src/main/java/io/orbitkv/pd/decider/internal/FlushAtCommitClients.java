package io.orbitkv.pd.decider.internal;

import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetCommitCallback;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.streams.KafkaClientSupplier;

/**
 * The decider's Kafka clients: each stream thread's producer is waited for once per commit instead of once per task.
 *
 * <p>Streams commits a thread's tasks one by one: every task's {@code prepareCommit} flushes its record cache and
 * then flushes the thread's one producer ({@code StreamTask.flush → RecordCollector.flush → Producer.flush}), and only
 * then are the offsets committed (at-least-once: the main consumer's {@code commitSync}; exactly-once: the
 * producer's {@code commitTransaction}). A flush waits for every record in flight, so with N tasks on a thread a
 * commit waits for N broker round trips in a row, and no fact is processed meanwhile: the stall lands in the decider's
 * latency tail (measured: docs/decider.md, "Commits: one producer flush per commit, not one per task").
 *
 * <p>Here a stream thread's producer does not flush when a task asks; the thread's main consumer flushes it once,
 * right before it commits offsets, and refuses to commit when a record sent since the last commit failed: it throws
 * {@link CommitFailedException}, which Streams handles as it handles any failed offset commit (all the thread's tasks
 * closed dirty and processed again from the last committed offsets; the thread lives on). The at-least-once rule —
 * offsets are committed only after everything produced before them is acknowledged — holds as before. Under
 * exactly-once the per-task flush is skipped outright: {@code commitTransaction} flushes the producer itself and
 * fails when a send of the transaction failed. A producer that cannot be paired with its thread's main consumer
 * (client ids not in Streams' {@code <client>-StreamThread-<n>-producer/-consumer} form, or the {@code streams} group
 * protocol, whose consumer Streams builds itself) flushes as usual.
 *
 * <p>Two differences from Streams' own clients, both without loss: a send that fails after the producer's own retries
 * is noticed at the commit, not at the task's flush, so under at-least-once the whole thread's tasks are re-processed
 * instead of the failed task only, and under exactly-once Streams sees the transaction fail and replaces the thread
 * instead of reviving the task (the transaction is aborted either way). And when a commit has no offsets to commit
 * (nothing consumed since the last one) Streams does not call the consumer, so nothing flushes: the records in flight
 * are still delivered, and a checkpoint only ever holds acknowledged changelog offsets.
 *
 * <p>This relies on Streams 4.4 calling {@code Producer.flush()} only from a task's commit preparation and committing
 * at-least-once offsets only through the main consumer's {@code commitSync}; {@code DeciderIT} (restarts, rebalance,
 * replay) and {@code FlushAtCommitClientsTest} cover it. Streams' per-record send-error handling still runs: the
 * callbacks are Streams' own, wrapped only to note a failure and count the acknowledgement.
 *
 * <p>Under at-least-once each stream thread's producer also numbers its sends and publishes how far they are
 * acknowledged ({@link Acks}, found by thread name with {@link #acksOf}), so that {@link RequestStore} writes a
 * request's state only after the decisions it reflects are acknowledged: without a transaction the two go to
 * different partitions, and a state that outlived its decisions in a crash would make them look already decided.
 */
public final class FlushAtCommitClients implements KafkaClientSupplier {

    private static final String PRODUCER_SUFFIX = "-producer";
    private static final String CONSUMER_SUFFIX = "-consumer";

    /** Producer and main consumer of one stream thread, paired by the common part of their client ids. */
    private static final class Pair {
        final String key;
        volatile DeferringProducer producer;
        volatile boolean consumerFlushes;

        Pair(String key) {
            this.key = key;
        }
    }

    private final Map<String, Pair> pairs = new ConcurrentHashMap<>();

    /**
     * How far a stream thread's producer has been acknowledged (at-least-once only): the request store writes a
     * request's state, which goes to the changelog through the same producer, only once the decisions it reflects
     * are acknowledged, so that after a crash no restored state can claim decisions the broker never got
     * ({@link RequestStore}). Under exactly-once the transaction makes them land together and there is none.
     */
    public interface Acks {
        /** Sends handed to the producer so far: a state changed now waits until {@link #acknowledged()} reaches it. */
        long sent();

        /** Every send numbered below this has been acknowledged; a failed send holds it back until its commit is refused. */
        long acknowledged();

        /** Waits until every send so far has completed (a producer flush). */
        void awaitAll();
    }

    /** The acks of each stream thread with an at-least-once producer from a supplier of this class, by thread name. */
    private static final Map<String, Acks> ACKS = new ConcurrentHashMap<>();

    /**
     * The acks of the stream thread named {@code threadName} (Streams names a thread by the client-id prefix its
     * clients share); null under exactly-once, with Streams' own clients, or on any other thread.
     */
    public static Acks acksOf(String threadName) {
        return ACKS.get(threadName);
    }

    /** Registers acks for a thread name (tests; producers register themselves). */
    static void register(String threadName, Acks acks) {
        ACKS.put(threadName, acks);
    }

    static void unregister(String threadName, Acks acks) {
        ACKS.remove(threadName, acks);
    }

    @Override
    public Admin getAdmin(Map<String, Object> config) {
        return Admin.create(config);
    }

    @Override
    public Producer<byte[], byte[]> getProducer(Map<String, Object> config) {
        boolean transactional = config.get(ProducerConfig.TRANSACTIONAL_ID_CONFIG) != null;
        String key = threadKey(config, PRODUCER_SUFFIX);
        Pair pair = key == null ? null : pairs.computeIfAbsent(key, Pair::new);
        DeferringProducer producer = new DeferringProducer(config, transactional, pair, this::closed);
        if (pair != null) {
            synchronized (pair) {
                pair.producer = producer;
                pairs.putIfAbsent(key, pair); // the old producer of a reused index may have just removed it
            }
            if (!transactional) {
                register(key, producer);
            }
        }
        return producer;
    }

    @Override
    public Consumer<byte[], byte[]> getConsumer(Map<String, Object> config) {
        String key = threadKey(config, CONSUMER_SUFFIX);
        if (key == null) {
            return plainConsumer(config);
        }
        Pair pair = pairs.computeIfAbsent(key, Pair::new);
        FlushingConsumer consumer = new FlushingConsumer(config, pair);
        pair.consumerFlushes = true; // only once a consumer exists that will flush
        return consumer;
    }

    @Override
    public Consumer<byte[], byte[]> getRestoreConsumer(Map<String, Object> config) {
        return plainConsumer(config);
    }

    @Override
    public Consumer<byte[], byte[]> getGlobalConsumer(Map<String, Object> config) {
        return plainConsumer(config);
    }

    /**
     * A producer closed: its thread is gone. A replacement thread may reuse the thread's index, hence its client ids,
     * and register its own producer in the same pair before the old producer is closed; only the producer still
     * registered unregisters, so a replacement's producer is never left unflushed at its thread's commits.
     */
    private void closed(DeferringProducer producer) {
        Pair pair = producer.pair;
        if (pair != null) {
            unregister(pair.key, producer);
            synchronized (pair) {
                if (pair.producer == producer) {
                    pair.producer = null;
                    pairs.remove(pair.key, pair);
                }
            }
        }
    }

    /** Stream threads currently paired (for tests). */
    int pairs() {
        return pairs.size();
    }

    private static Consumer<byte[], byte[]> plainConsumer(Map<String, Object> config) {
        return new KafkaConsumer<>(config, new ByteArrayDeserializer(), new ByteArrayDeserializer());
    }

    /** {@code app-StreamThread-1} from {@code app-StreamThread-1-producer}; null for any other client id. */
    static String threadKey(Map<String, Object> config, String suffix) {
        Object id = config.get(CommonClientConfigs.CLIENT_ID_CONFIG);
        if (!(id instanceof String s) || !s.endsWith(suffix) || s.endsWith("-restore" + suffix)) {
            return null;
        }
        String key = s.substring(0, s.length() - suffix.length());
        return key.contains("-StreamThread-") ? key : null;
    }

    /** A stream thread's producer: flushes when its thread commits, not when each task asks. */
    static final class DeferringProducer extends KafkaProducer<byte[], byte[]> implements Acks {
        private final boolean transactional;
        /** Numbered sends and how far they are acknowledged (kept under at-least-once only). */
        private final AckWatermark watermark = new AckWatermark();
        private final Pair pair;
        private final java.util.function.Consumer<DeferringProducer> onClose;
        private final AtomicReference<Exception> failure = new AtomicReference<>();
        private final java.util.concurrent.atomic.AtomicLong flushes = new java.util.concurrent.atomic.AtomicLong();

        DeferringProducer(Map<String, Object> config, boolean transactional, Pair pair,
                          java.util.function.Consumer<DeferringProducer> onClose) {
            super(config, new ByteArraySerializer(), new ByteArraySerializer());
            this.transactional = transactional;
            this.pair = pair;
            this.onClose = onClose;
        }

        @Override
        public Future<RecordMetadata> send(ProducerRecord<byte[], byte[]> record, Callback callback) {
            long seq = transactional ? -1 : watermark.send();
            try {
                return super.send(record, (metadata, e) -> {
                    if (e != null) {
                        failure.compareAndSet(null, e);
                    }
                    if (seq >= 0) {
                        watermark.completed(seq, e == null); // after the failure is recorded: a commit sees both
                    }
                    if (callback != null) {
                        callback.onCompletion(metadata, e);
                    }
                });
            } catch (RuntimeException e) {
                failure.compareAndSet(null, e); // never acknowledged: holds the watermark until the commit is refused
                throw e;
            }
        }

        @Override
        public long sent() {
            return watermark.sent();
        }

        @Override
        public long acknowledged() {
            return watermark.acknowledged();
        }

        @Override
        public void awaitAll() {
            realFlush();
        }

        /**
         * A task's flush: skipped under exactly-once ({@code commitTransaction} flushes) and where the thread's main
         * consumer flushes before committing offsets; a real flush otherwise.
         */
        @Override
        public void flush() {
            if (transactional || (pair != null && pair.consumerFlushes)) {
                return;
            }
            realFlush();
        }

        private void realFlush() {
            flushes.incrementAndGet();
            super.flush();
        }

        /** Flushes that waited for the records in flight (for tests). */
        long flushes() {
            return flushes.get();
        }

        /** The commit's one flush; fails when a record sent since the last commit failed. */
        void flushForCommit() {
            realFlush();
            Exception e = failure.getAndSet(null);
            if (e != null) {
                watermark.reset();
                // What Streams does when its own commitSync fails: TaskMigratedException, all tasks closed dirty and
                // re-processed from the last committed offsets; the thread lives on. The failure is cleared: what was
                // sent before it is re-sent by that re-processing.
                CommitFailedException refused = new CommitFailedException(
                        "not committing offsets: a record sent since the last commit failed (" + e + ")");
                refused.initCause(e);
                throw refused;
            }
        }

        @Override
        public void close(Duration timeout) {
            try {
                super.close(timeout);
            } finally {
                onClose.accept(this);
            }
        }
    }

    /** A stream thread's main consumer: waits for the thread's producer once before committing offsets. */
    static final class FlushingConsumer extends KafkaConsumer<byte[], byte[]> {
        private final Pair pair;

        FlushingConsumer(Map<String, Object> config, Pair pair) {
            super(config, new ByteArrayDeserializer(), new ByteArrayDeserializer());
            this.pair = pair;
        }

        private void flushProducer() {
            DeferringProducer producer = pair.producer;
            if (producer != null && !producer.transactional) {
                producer.flushForCommit();
            }
        }

        @Override
        public void commitSync() {
            flushProducer();
            super.commitSync();
        }

        @Override
        public void commitSync(Duration timeout) {
            flushProducer();
            super.commitSync(timeout);
        }

        @Override
        public void commitSync(Map<TopicPartition, OffsetAndMetadata> offsets) {
            flushProducer();
            super.commitSync(offsets);
        }

        @Override
        public void commitSync(Map<TopicPartition, OffsetAndMetadata> offsets, Duration timeout) {
            flushProducer();
            super.commitSync(offsets, timeout);
        }

        @Override
        public void commitAsync() {
            flushProducer();
            super.commitAsync();
        }

        @Override
        public void commitAsync(OffsetCommitCallback callback) {
            flushProducer();
            super.commitAsync(callback);
        }

        @Override
        public void commitAsync(Map<TopicPartition, OffsetAndMetadata> offsets, OffsetCommitCallback callback) {
            flushProducer();
            super.commitAsync(offsets, callback);
        }
    }
}
