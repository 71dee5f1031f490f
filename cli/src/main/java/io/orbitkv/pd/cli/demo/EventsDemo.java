package io.orbitkv.pd.cli.demo;

import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.cli.demo.SampleEvents.Kind;
import io.orbitkv.pd.cli.demo.SampleEvents.Sample;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.EventText;
import io.orbitkv.pd.schemas.RecordDecoding;
import io.orbitkv.pd.schemas.Topic;
import io.orbitkv.pd.schemas.TopicAdmin;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * {@code orbitkv-pd demo --events}: starts an embedded KRaft broker, creates the topics, sends one event of every
 * type through the real serdes and prints them back, read from the broker, as a timeline. Returns non-zero when
 * any event does not come back equal to what was sent.
 */
final class EventsDemo {

    private EventsDemo() { }

    static int run(Path workDir, boolean keep) throws Exception {
        Path dir = workDir != null ? workDir.toAbsolutePath() : Files.createTempDirectory("orbitkv-demo-");
        long t = System.nanoTime();
        System.out.println("OrbitKV P/D demo: starting an embedded KRaft broker (child JVM) under " + dir + " ...");
        try (KraftCluster cluster = KraftCluster.builder().nodes(1).dataDir(dir.resolve("data")).logsDir(dir.resolve("logs"))
                .persistent(keep).build().start();
             EventSerdes serdes = EventSerdes.embedded()) {
            System.out.printf("broker ready at %s in %.1f s%n", cluster.bootstrapServers(), (System.nanoTime() - t) / 1e9);
            Topics topics = new Topics(TopicsConfig.defaults(), serdes);
            try (Admin admin = cluster.createAdmin()) {
                TopicAdmin.ensureTopics(admin, topics);
            }
            System.out.println();
            System.out.printf("%-28s %-12s %-20s %-10s %s%n", "TOPIC", "KEY", "VALUE", "PARTITIONS", "RETENTION");
            for (Topic<String, ?> topic : topics.all()) {
                System.out.printf("%-28s %-12s %-20s %-10d %s%n", topic.name(), topic.keyName(), topic.valueTypeName(),
                        topic.spec().partitions(), topic.spec().retentionDescription());
            }

            long t0 = System.currentTimeMillis();
            List<Sample> story = SampleEvents.story(t0);
            Map<Kind, Topic<String, ?>> route = Map.of(Kind.ENGINE, topics.engines(), Kind.REQUEST_EVENT, topics.requestEvents(),
                    Kind.DECISION, topics.decisions(), Kind.ENGINE_COMMAND, topics.engineCommands(), Kind.DEAD_LETTER, topics.deadLetters());
            send(cluster.bootstrapServers(), story, route);
            List<Received> received = readBack(cluster.bootstrapServers(), topics, story.size());

            System.out.println();
            System.out.printf("Timeline: %d events read back from the broker through the embedded Avro serde%n", received.size());
            System.out.printf("%10s  %-16s %-3s %-12s %s%n", "T+ms", "TOPIC", "P", "KEY", "EVENT");
            received.sort(Comparator.comparingLong(Received::timestamp).thenComparing(Received::topic).thenComparingLong(Received::offset));
            for (Received r : received) {
                System.out.printf("%10d  %-16s %-3d %-12s %s%n", r.timestamp() - t0, r.topic().substring(TopicsConfig.DEFAULT_PREFIX.length()),
                        r.partition(), r.key(), EventText.describe(r.value()));
            }
            int mismatches = verify(story, received);
            long types = received.stream().map(r -> EventText.typeOf(r.value())).distinct().count();
            System.out.println();
            if (mismatches == 0) {
                System.out.printf("OK: %d events of %d types sent and read back unchanged.%n", received.size(), types);
                return 0;
            }
            System.out.printf("FAILED: %d of %d events did not come back unchanged.%n", mismatches, story.size());
            return 1;
        }
    }

    private record Received(String topic, int partition, long offset, long timestamp, String key, Object value) { }

    @SuppressWarnings({"unchecked", "rawtypes"})
    private static void send(String bootstrap, List<Sample> story, Map<Kind, Topic<String, ?>> route) throws Exception {
        Map<String, Object> cfg = Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap, ProducerConfig.ACKS_CONFIG, "all",
                ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true, ProducerConfig.LINGER_MS_CONFIG, 0);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(cfg, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (Sample s : story) {
                Topic topic = route.get(s.kind());
                byte[] key = topic.keySerde().serializer().serialize(topic.name(), s.key());
                byte[] value = topic.valueSerde().serializer().serialize(topic.name(), s.value());
                producer.send(new ProducerRecord<>(topic.name(), null, s.timestampMs(), key, value)).get();
            }
        }
    }

    private static List<Received> readBack(String bootstrap, Topics topics, int expected) {
        Map<String, Topic<String, ?>> byName = new HashMap<>();
        topics.all().forEach(t -> byName.put(t.name(), t));
        Map<String, Object> cfg = Map.of(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap, ConsumerConfig.GROUP_ID_CONFIG,
                "orbitkv-demo-" + System.nanoTime(), ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest",
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed");
        List<Received> out = new ArrayList<>();
        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(cfg, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.subscribe(byName.keySet());
            while (out.size() < expected) {
                if (System.nanoTime() > deadline) {
                    throw new IllegalStateException("only " + out.size() + " of " + expected + " events came back within 60 s");
                }
                for (ConsumerRecord<byte[], byte[]> rec : consumer.poll(Duration.ofMillis(200))) {
                    Topic<String, ?> topic = byName.get(rec.topic());
                    String key = topic.keySerde().deserializer().deserialize(rec.topic(), rec.key());
                    Object value = RecordDecoding.decodeValue(rec, topic.valueSerde().deserializer());
                    out.add(new Received(rec.topic(), rec.partition(), rec.offset(), rec.timestamp(), key, value));
                }
            }
        }
        return out;
    }

    private static int verify(List<Sample> story, List<Received> received) {
        int mismatches = 0;
        for (Sample s : story) {
            // Facts carry the broker's append time (request-events is LogAppendTime: docs/decider.md, "Clocks"), so only the
            // other topics keep the time they were sent with; key and value must come back unchanged everywhere.
            boolean found = received.stream().anyMatch(r -> (r.timestamp() == s.timestampMs() || r.topic().endsWith("request-events"))
                    && Objects.equals(r.key(), s.key()) && Objects.equals(r.value(), s.value()));
            if (!found) {
                mismatches++;
                System.out.println("missing or changed: " + s.key() + " " + EventText.describe(s.value()));
            }
        }
        return mismatches;
    }
}
