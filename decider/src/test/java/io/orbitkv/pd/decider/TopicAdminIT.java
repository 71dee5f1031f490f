package io.orbitkv.pd.decider;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.TopicAdmin;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.testsupport.kafka.WithKafka;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.Test;

/**
 * {@link TopicAdmin#ensureTopics} returns only when the broker serves every partition it created: an idempotent
 * producer's first write to each partition, right after creation, is accepted without a retry (a write that met
 * the creation window was answered NOT_LEADER_OR_FOLLOWER, and with Kafka 4.4 clients such a retried first batch
 * could be stuck behind later ones with OutOfOrderSequence and lost).
 */
@WithKafka
class TopicAdminIT {

    private static final int PARTITIONS = 32;

    private static double retries(KafkaProducer<?, ?> producer) {
        return producer.metrics().entrySet().stream()
                .filter(e -> e.getKey().name().equals("record-retry-total") && e.getKey().group().equals("producer-metrics"))
                .mapToDouble(e -> ((Number) e.getValue().metricValue()).doubleValue()).sum();
    }

    @Test
    void createdTopicsAreServedWhenEnsureTopicsReturns(KraftCluster kafka) throws Exception {
        String prefix = "admin" + System.nanoTime() % 100000 + ".";
        try (EventSerdes serdes = EventSerdes.embedded(); Admin admin = Admin.create(Map.of("bootstrap.servers", kafka.bootstrapServers()))) {
            // Many partitions widen the window between "created" and "served"; the producer is connected beforehand so
            // its first writes go out right after creation.
            Topics topics = new Topics(new TopicsConfig(prefix, PARTITIONS, (short) 1, Duration.ofHours(1)), serdes);
            try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, kafka.bootstrapServers(),
                    ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true, ProducerConfig.ACKS_CONFIG, "all", ProducerConfig.LINGER_MS_CONFIG, 0),
                    new ByteArraySerializer(), new ByteArraySerializer())) {
                admin.createTopics(List.of(new org.apache.kafka.clients.admin.NewTopic(prefix + "warm", 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
                producer.send(new ProducerRecord<>(prefix + "warm", new byte[] {0})).get(30, TimeUnit.SECONDS);
                double retriesBefore = retries(producer);
                List<String> created = TopicAdmin.ensureTopics(admin, topics);
                assertThat(created).contains(topics.requestEvents().name(), topics.decisions().name(), topics.engineCommands().name());
                List<java.util.concurrent.Future<?>> sends = new java.util.ArrayList<>();
                for (String topic : List.of(topics.requestEvents().name(), topics.decisions().name(), topics.engineCommands().name())) {
                    for (int p = 0; p < PARTITIONS; p++) {
                        sends.add(producer.send(new ProducerRecord<>(topic, p, null, new byte[] {1})));
                    }
                }
                for (var f : sends) {
                    f.get(30, TimeUnit.SECONDS);
                }
                double retries = retries(producer) - retriesBefore;
                assertThat(retries).as("writes retried because a partition was not served yet").isZero();
            }
            // Existing topics are left alone, and the call returns at once.
            assertThat(TopicAdmin.ensureTopics(admin, topics)).isEmpty();
        }
    }
}
