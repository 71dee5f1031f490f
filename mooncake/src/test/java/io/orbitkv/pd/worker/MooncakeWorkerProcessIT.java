package io.orbitkv.pd.worker;

import static io.orbitkv.pd.kv.BlockRuns.run;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.MemoryRegion;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferFailed;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.events.TransferStarted;
import io.orbitkv.pd.events.TransportEndpoint;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvTestData;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.mooncake.te.MooncakeEngine;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.OrderTokens;
import io.orbitkv.pd.schemas.TopicAdmin;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.testsupport.kafka.WithKafka;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIfEnvironmentVariable;

/**
 * Two transfer workers as separate processes (transfer-worker's {@link WorkerProcess}) on a real KRaft broker, both
 * offering only the {@code mooncake} transport over Mooncake's TCP protocol, driven as the decider drives them: signed
 * orders on {@code engine-commands}, facts read back from {@code request-events}. The pools are shared tmpfs files, so
 * the test fills the prefill pages and checks every byte of the decode pages itself.
 */
@WithKafka
@EnabledIfEnvironmentVariable(named = MooncakeEngine.LIBRARY_ENV, matches = ".+",
        disabledReason = "skipped: ORBITKV_MOONCAKE_LIB is not set — see docs/mooncake.md")
class MooncakeWorkerProcessIT {

    private static final String KEY = "mooncake-it-auth-key-0123456789";
    private static final OrderTokens TOKENS = new OrderTokens(KEY.getBytes(StandardCharsets.UTF_8));
    private static final byte SENTINEL = (byte) 0xEE;
    /** 32 layers × K,V of 32 KiB pages: 2 MiB per block, 128 blocks = 256 MiB. */
    private static final KvGeometry PREFILL = KvTestData.small(32, 128);
    private static final KvGeometry DECODE = KvTestData.small(32, 260);

    private static KraftCluster kafka;
    private static Path work;
    private final List<AutoCloseable> resources = new ArrayList<>();
    private final String prefix = "mc" + System.nanoTime() % 100_000 + ".";
    private final Topics topics = new Topics(new TopicsConfig(prefix, 3, (short) 1, Duration.ofHours(1)), EventSerdes.embedded());
    private final Path prefillFile = Path.of("/dev/shm", "orbitkv-mc-it-" + ProcessHandle.current().pid() + "-prefill.kv");
    private final Path decodeFile = Path.of("/dev/shm", "orbitkv-mc-it-" + ProcessHandle.current().pid() + "-decode.kv");
    private final List<RequestEvent> facts = new ArrayList<>();
    private KafkaProducer<String, byte[]> producer;
    private KafkaConsumer<byte[], byte[]> events;
    private int seq;

    @BeforeAll
    static void setUp(KraftCluster cluster) throws IOException {
        kafka = cluster;
        work = Files.createDirectories(Path.of("target", "it", "MooncakeWorkerProcessIT-" + System.nanoTime()).toAbsolutePath());
    }

    @AfterAll
    static void cleanShm() throws IOException {
        try (var files = Files.list(Path.of("/dev/shm"))) {
            for (Path p : files.filter(f -> f.getFileName().toString().startsWith("orbitkv-mc-it-" + ProcessHandle.current().pid())).toList()) {
                Files.deleteIfExists(p);
            }
        }
    }

    @AfterEach
    void close() throws Exception {
        for (int i = resources.size() - 1; i >= 0; i--) {
            resources.get(i).close();
        }
    }

    private KafkaConsumer<byte[], byte[]> consumer() {
        return new KafkaConsumer<>(Map.of(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, kafka.bootstrapServers(), ConsumerConfig.GROUP_ID_CONFIG,
                "it-reader-" + System.nanoTime(), ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest"), new ByteArrayDeserializer(),
                new ByteArrayDeserializer());
    }

    private Map<String, String> settings(String engine, long epoch, KvGeometry g, Path pool) {
        Map<String, String> s = new HashMap<>();
        s.put("bootstrap.servers", kafka.bootstrapServers());
        s.put("worker.engine.id", engine);
        s.put("worker.engine.instance-epoch", Long.toString(epoch));
        s.put("worker.engine.role", engine.startsWith("prefill") ? "prefill" : "decode");
        s.put("worker.layout.num-layers", Integer.toString(g.numLayers()));
        s.put("worker.layout.num-blocks", Integer.toString(g.numBlocks()));
        s.put("worker.pool.path", pool.toString());
        s.put("worker.peer.wait", "10s");
        s.put("worker.commit.interval", "200ms");
        s.put("worker.transports", "mooncake");
        // The library comes from ORBITKV_MOONCAKE_LIB, inherited by the worker processes.
        s.put("transfer.mooncake.protocol", "tcp");
        s.put("transfer.mooncake.host", "127.0.0.1");
        s.put("topics.prefix", prefix);
        s.put("topics.partitions", "3");
        s.put("topics.retention", "1h");
        s.put("auth.key", KEY);
        return s;
    }

    private WorkerProcess start(String name, Map<String, String> settings) throws Exception {
        WorkerProcess w = WorkerProcess.start(work, prefix + name, settings);
        resources.add(w);
        await().atMost(Duration.ofSeconds(120)).pollInterval(Duration.ofMillis(50)).until(w::isReady);
        return w;
    }

    private TransferOrder order(String request, int attempt, List<BlockRun> src, long destEpoch, List<BlockRun> dst, String lease, long leaseEpoch) {
        String id = request + "/a" + attempt;
        return TransferOrder.newBuilder().setOrderId(id).setAttempt(attempt).setSourceEngineId("prefill-0").setSourceInstanceEpoch(101)
                .setDestEngineId("decode-0").setDestInstanceEpoch(destEpoch).setSourceBlocks(src).setDestBlocks(dst)
                .setLayout(PREFILL.toLayout(0, 1)).setLeaseId(lease).setLeaseEpoch(leaseEpoch)
                .setAuthToken(ByteBuffer.wrap(TOKENS.sign(id, leaseEpoch, "decode-0", destEpoch, dst)))
                .setDeadlineMs(System.currentTimeMillis() + 120_000).setTransport("auto").build();
    }

    private RecordMetadata command(String engine, String request, Object payload) throws Exception {
        Decision d = Decision.newBuilder().setRequestId(request).setDecisionId(request + "/" + seq).setSeq(seq++)
                .setStreamTimeMs(System.currentTimeMillis()).setPayload(payload).build();
        return producer.send(new ProducerRecord<>(topics.engineCommands().name(), engine,
                topics.engineCommands().valueSerde().serializer().serialize(topics.engineCommands().name(), d))).get();
    }

    private void awaitActedOn(String engine, RecordMetadata md) {
        TopicPartition tp = new TopicPartition(md.topic(), md.partition());
        try (Admin admin = Admin.create(kafka.adminConfig())) {
            await().atMost(Duration.ofSeconds(30)).pollInterval(Duration.ofMillis(50)).until(() -> {
                OffsetAndMetadata o = admin.listConsumerGroupOffsets("orbitkv-worker-" + engine).partitionsToOffsetAndMetadata().get().get(tp);
                return o != null && o.offset() > md.offset();
            });
        }
    }

    private Object awaitOutcome(String orderId) {
        Object[] found = new Object[1];
        await().atMost(Duration.ofSeconds(120)).pollInterval(Duration.ofMillis(20)).until(() -> {
            for (ConsumerRecord<byte[], byte[]> r : events.poll(Duration.ofMillis(100))) {
                facts.add(topics.requestEvents().valueSerde().deserializer().deserialize(r.topic(), r.value()));
            }
            for (RequestEvent e : facts) {
                if (e.getPayload() instanceof TransferCompleted c && c.getOrderId().equals(orderId)
                        || e.getPayload() instanceof TransferFailed f && f.getOrderId().equals(orderId)) {
                    found[0] = e.getPayload();
                    return true;
                }
            }
            return false;
        });
        return found[0];
    }

    private TransferFailed awaitFailure(String orderId) {
        Object o = awaitOutcome(orderId);
        assertThat(o).as("outcome of %s", orderId).isInstanceOf(TransferFailed.class);
        return (TransferFailed) o;
    }

    private TransferCompleted awaitCompletion(String orderId) {
        Object o = awaitOutcome(orderId);
        assertThat(o).as("outcome of %s", orderId).isInstanceOf(TransferCompleted.class);
        return (TransferCompleted) o;
    }

    private static List<BlockRun> everyOther(int blocks) {
        List<BlockRun> out = new ArrayList<>();
        for (int i = 0; i < blocks; i++) {
            out.add(run(1 + 2 * i, 1));
        }
        return out;
    }

    @Test
    void twoWorkerProcessesMove256MiBIn32KiBPagesOverMooncakeAndRefuseWhatIsNotTheirs() throws Exception {
        producer = new KafkaProducer<>(Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, kafka.bootstrapServers(), ProducerConfig.ACKS_CONFIG, "all",
                ProducerConfig.LINGER_MS_CONFIG, 0), new StringSerializer(), new ByteArraySerializer());
        resources.add(producer);
        events = consumer();
        resources.add(events);
        try (Admin admin = Admin.create(kafka.adminConfig())) {
            TopicAdmin.ensureTopics(admin, topics);
        }
        events.subscribe(List.of(topics.requestEvents().name()));
        HostKvPool prefillPool = HostKvPool.mapFile(PREFILL, prefillFile);
        HostKvPool decodePool = HostKvPool.mapFile(DECODE, decodeFile);
        resources.add(prefillPool);
        resources.add(decodePool);
        KvTestData.fill(prefillPool, 42);
        KvTestData.sentinel(decodePool, SENTINEL);

        start("decode", settings("decode-0", 201, DECODE, decodeFile));
        WorkerProcess prefill = start("prefill", settings("prefill-0", 101, PREFILL, prefillFile));

        // The decode worker announced its Mooncake segment, its admission listener and its regions' addresses.
        EngineRegistration reg = registration("decode-0");
        TransportEndpoint ep = reg.getEndpoints().stream().filter(e -> e.getTransport().equals("mooncake")).findFirst().orElseThrow();
        assertThat(ep.getAddress()).as("the segment name (P2P handshake: the engine's RPC host:port)").matches("127\\.0\\.0\\.1:\\d+");
        assertThat(ep.getAttributes()).containsEntry("protocol", "tcp").containsEntry("metadata", "P2PHANDSHAKE").containsKey("control");
        assertThat(reg.getRegions()).hasSize(DECODE.regionCount()).allSatisfy(r -> assertThat(r.getBaseAddress()).isNotZero());
        assertThat(reg.getRegions().stream().map(MemoryRegion::getBaseAddress).distinct().count()).isEqualTo(DECODE.regionCount());

        // 256 MiB: 128 contiguous prefill blocks into 128 scattered decode blocks, 8,192 separate 32 KiB pages.
        List<BlockRun> src = List.of(run(0, 128));
        List<BlockRun> dst = everyOther(128);
        command("prefill-0", "req-big", order("req-big", 1, src, 201, dst, "lease-big", 1));
        TransferCompleted done = awaitCompletion("req-big/a1");
        assertThat(done.getBytes()).isEqualTo(256L << 20);
        assertThat(facts.stream().map(RequestEvent::getPayload).filter(p -> p instanceof TransferStarted s && s.getOrderId().equals("req-big/a1")))
                .singleElement().satisfies(s -> assertThat(((TransferStarted) s).getTransport()).isEqualTo("mooncake"));
        TransferPlan plan = TransferPlan.build(PREFILL, src, DECODE, dst);
        assertThat(plan.spans()).isEqualTo(8192);
        assertThat(KvTestData.verify(prefillPool, decodePool, plan, SENTINEL)).as("every byte, and nothing else").isNull();

        // A forged token: refused by the receiving worker at admission, before any write is issued.
        KvTestData.sentinel(decodePool, SENTINEL);
        List<BlockRun> small = List.of(run(200, 8));
        TransferOrder forged = TransferOrder.newBuilder(order("req-forged", 1, List.of(run(0, 8)), 201, small, "lease-f", 1))
                .setAuthToken(ByteBuffer.wrap(new OrderTokens("somebody-elses-key-123".getBytes(StandardCharsets.UTF_8))
                        .sign("req-forged/a1", 1, "decode-0", 201, small))).build();
        command("prefill-0", "req-forged", forged);
        TransferFailed f1 = awaitFailure("req-forged/a1");
        assertThat(f1.getRetriable()).isFalse();
        assertThat(f1.getReason()).startsWith("UNAUTHORIZED: refused by decode-0@201 mooncake://").contains("does not verify");

        // A released lease: the decode worker fences it; a late order under that epoch is refused.
        awaitActedOn("decode-0", command("decode-0", "req-late", ReleaseDecided.newBuilder().setEngineId("decode-0").setSide(ReleaseSide.DECODE)
                .setBlocks(small).setLeaseId("lease-late").setLeaseEpoch(3L).setReason("request finished").build()));
        command("prefill-0", "req-late", order("req-late", 1, List.of(run(0, 8)), 201, small, "lease-late", 3));
        assertThat(awaitFailure("req-late/a1").getReason()).startsWith("STALE_EPOCH: refused by decode-0@201 mooncake://")
                .contains("lease lease-late epoch 3 was released (through epoch 3)");

        // An order for a previous incarnation of the decode engine, and one for pages outside its pool.
        command("prefill-0", "req-old", order("req-old", 1, List.of(run(0, 8)), 200, small, "lease-o", 1));
        assertThat(awaitFailure("req-old/a1").getReason())
                .isEqualTo("STALE_EPOCH: destination engine decode-0 is registered at instance epoch 201, the order names 200");
        command("prefill-0", "req-oob", order("req-oob", 1, List.of(run(0, 8)), 201, List.of(run(255, 8)), "lease-x", 1));
        TransferFailed oob = awaitFailure("req-oob/a1");
        assertThat(oob.getReason()).isEqualTo("OUT_OF_RANGE: cannot plan the order: dest_blocks: run 255+8 is outside the pool of 260 blocks");
        assertThat(oob.getRetriable()).isFalse();
        assertThat(KvTestData.untouched(decodePool, SENTINEL)).as("no byte of a refused order lands").isNull();

        // Through all of it both workers keep serving.
        command("prefill-0", "req-last", order("req-last", 1, List.of(run(64, 8)), 201, small, "lease-l", 1));
        awaitCompletion("req-last/a1");
        assertThat(KvTestData.verify(prefillPool, decodePool, TransferPlan.build(PREFILL, List.of(run(64, 8)), DECODE, small), SENTINEL)).isNull();
        assertThat(prefill.isAlive()).isTrue();
    }

    private EngineRegistration registration(String engine) {
        try (KafkaConsumer<byte[], byte[]> c = consumer()) {
            c.subscribe(List.of(topics.engines().name()));
            EngineRegistration[] found = new EngineRegistration[1];
            await().atMost(Duration.ofSeconds(30)).until(() -> {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    EngineRegistration e = topics.engines().valueSerde().deserializer().deserialize(r.topic(), r.value());
                    if (e.getEngineId().equals(engine)) {
                        found[0] = e;
                    }
                }
                return found[0] != null;
            });
            return found[0];
        }
    }
}
