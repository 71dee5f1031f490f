package io.orbitkv.pd.kvbridge;

import static io.orbitkv.pd.kvbridge.VllmWire.batch;
import static io.orbitkv.pd.kvbridge.VllmWire.removedNamed;
import static io.orbitkv.pd.kvbridge.VllmWire.removedPositional;
import static io.orbitkv.pd.kvbridge.VllmWire.storedNamed;
import static io.orbitkv.pd.kvbridge.VllmWire.storedPositional;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.events.AllBlocksCleared;
import io.orbitkv.pd.events.BlockRemoved;
import io.orbitkv.pd.events.BlockStored;
import io.orbitkv.pd.events.DeadLetter;
import io.orbitkv.pd.events.KvCacheEvent;
import io.orbitkv.pd.proxy.routing.KvIndexFeed;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.config.ConfigProps;
import io.orbitkv.pd.testsupport.kafka.WithKafka;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The bridge between a publisher speaking vLLM's exact KV-event wire protocol (real ZMQ sockets: PUB and the ROUTER replay
 * socket) and a real broker: batches in both encodings become {@code KvCacheEvent}s numbered without gaps; a batch the
 * subscriber missed is replayed and written in order; one lost for good starts a new epoch with a clear; a batch that
 * does not decode is dead-lettered and the rest flows; a restarted publisher (numbers from 0 again) is a new instance.
 * The proxy's KV index, fed from the topic as a router is, ends up with what the engine caches.
 */
@WithKafka
class KvEventsBridgeIT {

    private static KraftCluster kafka;

    @BeforeAll
    static void setUp(KraftCluster cluster) {
        kafka = cluster;
    }

    private static ByteBuffer h(long v) {
        return ByteBuffer.wrap(ByteBuffer.allocate(8).putLong(v).array());
    }

    private static BridgeConfig config(String prefix, VllmPublisher pub) {
        return BridgeConfig.from(ConfigProps.empty().with("bootstrap.servers", kafka.bootstrapServers()).with("bridge.engine-id", "vllm-0")
                .with("bridge.endpoint", pub.endpoint).with("bridge.replay-endpoint", pub.replayEndpoint).with("bridge.zmq-topic", "kv")
                .with("topics.prefix", prefix).with("topics.partitions", "2"));
    }

    /** Empty batches until the bridge has written one: ZMQ delivers only what is published after the subscription joined. */
    private static void join(VllmPublisher pub, KvEventsBridge b) {
        await().atMost(Duration.ofSeconds(10)).until(b::subscribed);
        await().atMost(Duration.ofSeconds(20)).pollInterval(Duration.ofMillis(20)).until(() -> {
            pub.publish(batch(0.0, List.of(), 0));
            return b.snapshot().get("batches") > 0;
        });
    }

    /** At least {@code atLeast} records of {@code topic} from its start (30 s at most), decoded. */
    private static <T> List<T> read(io.orbitkv.pd.schemas.Topic<String, T> topic, int atLeast) {
        List<T> out = new ArrayList<>();
        try (KafkaConsumer<String, byte[]> c = new KafkaConsumer<>(Map.of(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, kafka.bootstrapServers(),
                ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest", ConsumerConfig.GROUP_ID_CONFIG, "it-" + System.nanoTime()),
                new StringDeserializer(), new ByteArrayDeserializer())) {
            c.subscribe(List.of(topic.name()));
            long until = System.nanoTime() + 30_000_000_000L;
            while (out.size() < atLeast && System.nanoTime() < until) {
                for (ConsumerRecord<String, byte[]> r : c.poll(Duration.ofMillis(200))) {
                    assertThat(r.key()).isEqualTo("vllm-0");
                    out.add(topic.valueSerde().deserializer().deserialize(r.topic(), r.value()));
                }
            }
        }
        return out;
    }

    @Test
    void batchesOfBothEncodingsBecomeGaplessEventsAMissedBatchIsReplayedALostOneClearsAndGarbageIsDeadLettered() throws Exception {
        String prefix = "kvb" + System.nanoTime() % 100_000 + ".";
        try (VllmPublisher pub = new VllmPublisher("kv", 1000, true)) {
            BridgeConfig cfg = config(prefix, pub);
            Topics topics = new Topics(cfg.topics(), EventSerdes.create(cfg.serde()));
            try (KvEventsBridge b = KvEventsBridge.open(cfg).start()) {
                join(pub, b);
                pub.publish(batch(1.0, List.of(storedPositional(0, 16, 0, 1, 2)), 0));          // v0.23 and before: positional
                pub.publish(batch(1.1, List.of(storedNamed(2, 16, 32, 3)), 0));                  // v0.24 on: named fields
                pub.buffer(batch(1.2, List.of(storedNamed(3, 16, 48, 4)), 0));                   // the subscriber misses it
                pub.publish(batch(1.3, List.of(removedPositional(1), removedNamed(9)), 0));      // the gap shows: 4 is replayed first
                pub.publish(new byte[] {(byte) 0x92, 1, 2, 3});                                   // garbage: dead-lettered
                pub.skip();                                                                       // lost for good
                pub.publish(batch(1.5, List.of(storedNamed(0, 16, 64, 5)), 0));                  // a new epoch starts before it
                await().atMost(Duration.ofSeconds(20)).until(() -> b.snapshot().get("events") >= 6);
                assertThat(b.snapshot()).containsEntry("gaps", 2L).containsEntry("replayed_batches", 1L).containsEntry("lost_batches", 1L)
                        .containsEntry("dead_lettered", 1L).containsEntry("restarts", 0L).containsEntry("send_failures", 0L);
            }
            List<KvCacheEvent> ev = read(topics.kvEvents(), 7);
            long first = ev.get(0).getInstanceEpoch();
            List<KvCacheEvent> before = ev.stream().filter(e -> e.getInstanceEpoch() == first).toList();
            List<KvCacheEvent> after = ev.stream().filter(e -> e.getInstanceEpoch() > first).toList();
            assertThat(before).extracting(KvCacheEvent::getSeq).containsExactly(1L, 2L, 3L, 4L, 5L);
            assertThat(before.get(0).getPayload()).isInstanceOfSatisfying(BlockStored.class,
                    s -> assertThat(s.getBlockHashes()).containsExactly(h(1), h(2)));
            assertThat(before.get(2).getPayload()).as("the missed batch, replayed in its place").isInstanceOfSatisfying(BlockStored.class,
                    s -> assertThat(s.getBlockHashes()).containsExactly(h(4)));
            assertThat(before.get(3).getPayload()).isInstanceOf(BlockRemoved.class);
            assertThat(after).extracting(KvCacheEvent::getSeq).containsExactly(0L, 1L);
            assertThat(after.get(0).getPayload()).isEqualTo(AllBlocksCleared.newBuilder().setReason("events_lost").build());
            assertThat(after.get(1).getPayload()).isInstanceOfSatisfying(BlockStored.class, s -> assertThat(s.getBlockHashes()).containsExactly(h(5)));
            assertThat(read(topics.deadLetters(), 1)).singleElement().satisfies(d -> {
                assertThat(d.getComponent()).isEqualTo("kv-events-bridge:vllm-0");
                assertThat(d.getErrorType()).isEqualTo("UNDECODABLE");
                assertThat(d.getReason()).startsWith("batch ").contains("events: an array, got integer");
                assertThat(d.getTopic()).isEqualTo("zmq:" + pub.endpoint);
            });
            // a router's index from the topic: after the loss it knows only what came after it
            List<DeadLetter> indexDead = new CopyOnWriteArrayList<>();
            try (KvIndexFeed f = new KvIndexFeed(kafka.bootstrapServers(), Map.of(), topics, "it-index", () -> Map.of("vllm-0", 16), indexDead::add,
                    "proxy:it").start()) {
                await().atMost(Duration.ofSeconds(30)).until(f::caughtUp);
                assertThat(f.matches(List.of(h(5).array()))).containsEntry("vllm-0", 1);
                assertThat(f.matches(List.of(h(2).array(), h(3).array()))).containsEntry("vllm-0", 0);
                assertThat(indexDead).isEmpty();
            }
        }
    }

    @Test
    void aRestartedPublisherIsANewInstanceAndAReplyWithoutTheTopicFrameIsRead() throws Exception {
        String prefix = "kvr" + System.nanoTime() % 100_000 + ".";
        VllmPublisher first = new VllmPublisher("kv", 1000, false); // replies as before vLLM PR #45177: [seq, payload]
        BridgeConfig cfg = config(prefix, first);
        Topics topics = new Topics(cfg.topics(), EventSerdes.create(cfg.serde()));
        try (KvEventsBridge b = KvEventsBridge.open(cfg).start()) {
            try (first) {
                join(first, b);
                first.publish(batch(1.0, List.of(storedNamed(0, 16, 0, 1)), 0));
                first.buffer(batch(1.1, List.of(storedNamed(1, 16, 16, 2)), 0));
                first.publish(batch(1.2, List.of(storedNamed(2, 16, 32, 3)), 0));
                await().atMost(Duration.ofSeconds(20)).until(() -> b.snapshot().get("events") >= 3);
                assertThat(b.snapshot()).containsEntry("replayed_batches", 1L).containsEntry("lost_batches", 0L);
            }
            // the engine restarts on the same ports: its publisher numbers from 0 again
            try (VllmPublisher second = new VllmPublisher("kv", 1000, true, first.port(), first.replayPort())) {
                second.publish(batch(2.0, List.of(storedNamed(0, 16, 0, 7)), 0)); // batch 0: maybe before the bridge is back
                await().atMost(Duration.ofSeconds(20)).pollInterval(Duration.ofMillis(20)).until(() -> {
                    second.publish(batch(0.0, List.of(), 0));
                    return b.snapshot().get("events") >= 4;
                });
                assertThat(b.snapshot().get("reconnects") + b.snapshot().get("restarts")).isPositive();
            }
        }
        List<KvCacheEvent> ev = read(topics.kvEvents(), 5);
        long epoch1 = ev.get(0).getInstanceEpoch();
        assertThat(ev.stream().filter(e -> e.getInstanceEpoch() == epoch1)).extracting(KvCacheEvent::getSeq).containsExactly(1L, 2L, 3L);
        List<KvCacheEvent> next = ev.stream().filter(e -> e.getInstanceEpoch() > epoch1).toList();
        assertThat(next.get(0).getPayload()).isInstanceOfSatisfying(AllBlocksCleared.class,
                c -> assertThat(c.getReason()).isIn("reconnected", "new_instance"));
        // the new instance's batch 0 is there whether it came live or from its replay buffer
        assertThat(next.get(next.size() - 1).getPayload()).isInstanceOfSatisfying(BlockStored.class,
                s -> assertThat(s.getBlockHashes()).containsExactly(h(7)));
    }
}
