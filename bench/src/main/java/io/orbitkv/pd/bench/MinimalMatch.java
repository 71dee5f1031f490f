package io.orbitkv.pd.bench;

import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The reference match of {@code DESIGN.md}, for the benchmark only: one co-partitioned input topic carrying both
 * halves of a pair, one key-value store, the pair forwarded when its second half arrives, at-least-once, with the
 * settings DESIGN.md names (producer linger 0, {@code poll.ms} 10, no record cache) and the decider's client
 * settings. It is not a decider — no state machine, no leases, no engines, one record in per half and one out per
 * pair — it measures what the smallest Streams rendezvous costs on this machine, so the full state machine's numbers
 * can be read against what the design was measured with.
 *
 * <p>The second half's value starts with its send time ({@link System#nanoTime()}, same JVM as the load); the
 * forwarded value is that time, then the processing start and the time the pair was handed to the sink.
 */
final class MinimalMatch implements AutoCloseable {

    static final String STORE = "halves";

    private final KafkaStreams streams;
    /** Counted down when Streams first reaches RUNNING, or fails before it. */
    private final java.util.concurrent.CountDownLatch settled = new java.util.concurrent.CountDownLatch(1);

    /** The match of {@code input}'s halves into {@code output}; both topics exist, co-partitioned. */
    MinimalMatch(String bootstrap, String applicationId, String input, String output, Duration commitInterval, Path stateDir) {
        Topology t = new Topology();
        t.addSource("halves", Serdes.String().deserializer(), Serdes.ByteArray().deserializer(), input);
        t.addProcessor("match", Match::new, "halves");
        t.addStateStore(Stores.keyValueStoreBuilder(Stores.persistentKeyValueStore(STORE), Serdes.String(), Serdes.ByteArray()), "match");
        t.addSink("pairs", output, Serdes.String().serializer(), Serdes.ByteArray().serializer(), "match");
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, applicationId);
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, commitInterval.toMillis());
        p.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.toAbsolutePath().toString());
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, 0L);
        p.put(StreamsConfig.POLL_MS_CONFIG, 10);
        p.put(StreamsConfig.MAX_TASK_IDLE_MS_CONFIG, -1L);
        p.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), 0);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG), 100);
        this.streams = new KafkaStreams(t, p);
        streams.setStateListener((now, before) -> {
            if (now == KafkaStreams.State.RUNNING || now == KafkaStreams.State.ERROR || now == KafkaStreams.State.NOT_RUNNING) {
                settled.countDown();
            }
        });
    }

    MinimalMatch start() {
        streams.start();
        return this;
    }

    KafkaStreams streams() {
        return streams;
    }

    /** True once the app runs (its partitions assigned and restored) within {@code timeout}. */
    boolean awaitRunning(Duration timeout) throws InterruptedException {
        return settled.await(timeout.toMillis(), java.util.concurrent.TimeUnit.MILLISECONDS) && streams.state() == KafkaStreams.State.RUNNING;
    }

    @Override
    public void close() {
        streams.close(Duration.ofSeconds(30));
    }

    /** Keeps the first half of a pair; on the second, forwards the pair's timings and forgets it. */
    static final class Match implements Processor<String, byte[], String, byte[]> {
        private ProcessorContext<String, byte[]> context;
        private KeyValueStore<String, byte[]> halves;

        @Override
        public void init(ProcessorContext<String, byte[]> context) {
            this.context = context;
            this.halves = context.getStateStore(STORE);
        }

        @Override
        public void process(Record<String, byte[]> record) {
            long start = System.nanoTime();
            if (halves.get(record.key()) == null) {
                halves.put(record.key(), record.value());
                return;
            }
            halves.delete(record.key());
            long sent = ByteBuffer.wrap(record.value()).getLong();
            context.forward(record.withValue(ByteBuffer.allocate(24).putLong(sent).putLong(start).putLong(System.nanoTime()).array()));
        }
    }
}
