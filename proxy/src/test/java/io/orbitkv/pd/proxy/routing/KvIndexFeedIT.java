package io.orbitkv.pd.proxy.routing;

import static io.orbitkv.pd.proxy.routing.KvEvents.ev;
import static io.orbitkv.pd.proxy.routing.KvEvents.h;
import static io.orbitkv.pd.proxy.routing.KvEvents.removed;
import static io.orbitkv.pd.proxy.routing.KvEvents.stored;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.events.AllBlocksCleared;
import io.orbitkv.pd.events.KvCacheEvent;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.TopicAdmin;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.testsupport.kafka.WithKafka;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The proxy's KV index is rebuilt from the log on a real broker: a feed started after the events holds what they say; a
 * feed started again (a restarted proxy) holds the same; an engine restarted as a new instance loses its old blocks in
 * the index once the new instance's events (or its worker's clear) are in; garbage on the topic is skipped, not fatal.
 */
@WithKafka
class KvIndexFeedIT {

    private static KraftCluster kafka;

    @BeforeAll
    static void setUp(KraftCluster cluster) {
        kafka = cluster;
    }

    /** Fresh topics of their own (3 partitions) on the test's broker. */
    private static Topics topics(String name) throws Exception {
        Topics topics = new Topics(new TopicsConfig(name + System.nanoTime() % 100_000 + ".", 3, (short) 1, Duration.ofHours(1)), EventSerdes.embedded());
        try (Admin admin = Admin.create(kafka.adminConfig())) {
            TopicAdmin.ensureTopics(admin, topics);
        }
        return topics;
    }

    @Test
    void theIndexIsRebuiltFromTheLogAndARestartedEnginesOldBlocksGo() throws Exception {
        Topics topics = topics("kvidx");
        String topic = topics.kvEvents().name();
        try (KafkaProducer<String, byte[]> p = new KafkaProducer<>(Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, kafka.bootstrapServers()),
                new StringSerializer(), new ByteArraySerializer())) {
            for (KvCacheEvent e : List.of(ev("p-0", 1, 1, stored(1, 2, 3)), ev("p-0", 1, 2, removed(3)),
                    ev("d-0", 7, 1, stored(1, 2)), ev("d-0", 7, 1, stored(1, 2)))) {
                p.send(new ProducerRecord<>(topic, e.getEngineId(), topics.kvEvents().valueSerde().serializer().serialize(topic, e))).get();
            }
            p.send(new ProducerRecord<>(topic, "d-0", new byte[] {1, 2, 3})).get(); // garbage: skipped, never fatal
            List<byte[]> prompt = List.of(h(1), h(2), h(3));
            Map<String, Integer> before;
            try (KvIndexFeed f = new KvIndexFeed(kafka.bootstrapServers(), Map.of(), topics, "it").start()) {
                await().atMost(Duration.ofSeconds(30)).until(f::caughtUp);
                before = f.matches(prompt);
                assertThat(before).containsExactly(Map.entry("d-0", 2), Map.entry("p-0", 2));
                assertThat(f.snapshot()).containsEntry("dropped", 1L).containsEntry("undecodable", 1L).containsEntry("entries", 4L);
            }
            // a restarted proxy: the same index from the same log
            try (KvIndexFeed f = new KvIndexFeed(kafka.bootstrapServers(), Map.of(), topics, "it-2").start()) {
                await().atMost(Duration.ofSeconds(30)).until(f::caughtUp);
                assertThat(f.matches(prompt)).isEqualTo(before);
                // d-0 restarts as a new instance: its worker clears the old one, the new one stores other blocks
                p.send(new ProducerRecord<>(topic, "d-0", topics.kvEvents().valueSerde().serializer().serialize(topic,
                        ev("d-0", 7, 0, AllBlocksCleared.newBuilder().setReason("new_instance").build())))).get();
                p.send(new ProducerRecord<>(topic, "d-0", topics.kvEvents().valueSerde().serializer().serialize(topic, ev("d-0", 8, 1, stored(9)))))
                        .get();
                await().atMost(Duration.ofSeconds(30)).until(() -> f.matches(prompt).get("d-0") == 0 && f.matches(List.of(h(9))).get("d-0") == 1);
                assertThat(f.snapshot()).containsEntry("entries", 3L); // p-0: 2, d-0: 1 — no stale entry of instance 7
            }
        }
    }

    /**
     * KV cache events the index cannot use go to the dead-letter topic with the reason — undecodable bytes, an engine that
     * never registered, a block size other than the engine's registered layout, a hash too short to key — and change
     * nothing; the good events around them are applied.
     */
    @Test
    void eventsTheIndexCannotUseAreDeadLetteredWithTheReasonAndChangeNothing() throws Exception {
        Topics topics = topics("kvdlq");
        String topic = topics.kvEvents().name();
        io.orbitkv.pd.events.BlockStored wide = io.orbitkv.pd.events.BlockStored.newBuilder(stored(5)).setBlockSize(32)
                .setTokenIds(java.util.Collections.nCopies(32, 7)).build();
        io.orbitkv.pd.events.BlockStored shortHash = io.orbitkv.pd.events.BlockStored.newBuilder(stored(6))
                .setBlockHashes(List.of(java.nio.ByteBuffer.wrap(new byte[] {1, 2, 3}))).build();
        try (KafkaProducer<String, byte[]> p = new KafkaProducer<>(Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, kafka.bootstrapServers()),
                new StringSerializer(), new ByteArraySerializer())) {
            p.send(new ProducerRecord<>(topic, "p-0", new byte[] {9, 9, 9})).get();
            for (KvCacheEvent e : List.of(ev("p-0", 1, 1, stored(1, 2)), ev("ghost", 1, 1, stored(3)), ev("p-0", 1, 2, wide),
                    ev("p-0", 1, 3, shortHash), ev("p-0", 1, 4, stored(4)))) {
                p.send(new ProducerRecord<>(topic, e.getEngineId(), topics.kvEvents().valueSerde().serializer().serialize(topic, e))).get();
            }
        }
        List<io.orbitkv.pd.events.DeadLetter> dead = new java.util.concurrent.CopyOnWriteArrayList<>();
        try (KvIndexFeed f = new KvIndexFeed(kafka.bootstrapServers(), Map.of(), topics, "it-dlq", () -> Map.of("p-0", 16), dead::add,
                "proxy:it").start()) {
            await().atMost(Duration.ofSeconds(30)).until(f::caughtUp);
            assertThat(dead).extracting(io.orbitkv.pd.events.DeadLetter::getErrorType)
                    .containsExactlyInAnyOrder("UNDECODABLE", "UNKNOWN_ENGINE", "BLOCK_SIZE_MISMATCH", "MALFORMED_HASH");
            assertThat(dead).allSatisfy(d -> {
                assertThat(d.getComponent()).isEqualTo("proxy:it");
                assertThat(d.getTopic()).isEqualTo(topic);
                assertThat(d.getOriginalValue()).isNotNull();
            });
            assertThat(dead).extracting(io.orbitkv.pd.events.DeadLetter::getReason).anySatisfy(r -> assertThat(r).contains("'ghost' never registered"))
                    .anySatisfy(r -> assertThat(r).contains("block_size: 32 tokens, engine p-0's registered layout has 16-token blocks"))
                    .anySatisfy(r -> assertThat(r).contains("block_hashes[0]: 3 bytes"));
            assertThat(f.matches(List.of(h(1), h(2)))).containsExactly(Map.entry("p-0", 2));
            assertThat(f.matches(List.of(h(4)))).containsExactly(Map.entry("p-0", 1));
            assertThat(f.snapshot()).containsEntry("refused", 3L).containsEntry("undecodable", 1L).containsEntry("entries", 3L);
        }
    }
}
