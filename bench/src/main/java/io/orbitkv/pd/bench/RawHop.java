package io.orbitkv.pd.bench;

import io.orbitkv.pd.schemas.TopicAdmin;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.List;
import java.util.Map;
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
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * One raw Kafka produce→consume hop, the physical reference every Kafka hop of the product is compared with: a plain
 * producer (acks=all, idempotent, linger 0, as the product's fact producers) sends fact-sized records at a steady rate
 * to a one-partition topic, a plain consumer (read_uncommitted) in the same JVM reads them, and the latency of each is
 * recorded on one clock ({@code System.nanoTime}). Used by {@code bench decider} and {@code bench e2e}.
 */
final class RawHop {

    private RawHop() { }

    /**
     * Warm-up, then the measured window, at {@code rate} records/s on a new topic {@code topic}. With {@code settle} the
     * warm-up ends with {@link GcPauses#settleHeap()} (off for a probe running beside a load whose warm-up settles it).
     */
    static LatencyStats measure(String bootstrap, String topic, int rate, Duration warmup, Duration measure, boolean settle) throws Exception {
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            admin.createTopics(List.of(new NewTopic(topic, 1, (short) 1))).all().get();
            TopicAdmin.awaitServed(admin, List.of(topic));
        }
        Histogram h = LatencyStats.histogram();
        AtomicLong stopAt = new AtomicLong(Long.MAX_VALUE);
        long measureFrom = System.nanoTime() + warmup.toNanos();
        long end = measureFrom + measure.toNanos();
        Map<String, Object> p = Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap, ProducerConfig.ACKS_CONFIG, "all",
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true, ProducerConfig.LINGER_MS_CONFIG, 0);
        Map<String, Object> c = Map.of(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap, ConsumerConfig.GROUP_ID_CONFIG, "raw-" + System.nanoTime(),
                ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest", ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_uncommitted",
                ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 2000);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(p, new ByteArraySerializer(), new ByteArraySerializer());
             KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.subscribe(List.of(topic));
            Thread reader = Thread.ofPlatform().name("raw-hop-reader").start(() -> {
                while (System.nanoTime() < stopAt.get()) {
                    for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(50))) {
                        long sent = ByteBuffer.wrap(r.value()).getLong();
                        long now = System.nanoTime();
                        if (sent >= measureFrom) {
                            h.recordValue(Math.max(0, (now - sent) / 1000));
                        }
                    }
                }
            });
            Pacer pacer = new Pacer(rate);
            byte[] pad = new byte[150]; // about the size of a request fact
            long settleAt = settle ? settleAt(measureFrom, warmup) : Long.MAX_VALUE;
            while (System.nanoTime() < end) {
                pacer.awaitNext();
                if (System.nanoTime() >= settleAt) {
                    GcPauses.settleHeap();
                    settleAt = Long.MAX_VALUE;
                }
                byte[] v = ByteBuffer.allocate(8 + pad.length).putLong(System.nanoTime()).put(pad).array();
                producer.send(new ProducerRecord<>(topic, v));
            }
            producer.flush();
            stopAt.set(System.nanoTime() + 2_000_000_000L);
            reader.join();
        }
        return LatencyStats.of(h);
    }

    /** When a warm-up ending at {@code measureFrom} settles the heap: half-way, at most 3 s before the window. */
    static long settleAt(long measureFrom, Duration warmup) {
        if (warmup.isZero() || warmup.isNegative()) {
            return Long.MAX_VALUE;
        }
        return measureFrom - Math.min(3_000_000_000L, warmup.toNanos() / 2);
    }
}
