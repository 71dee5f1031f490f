package io.orbitkv.pd.worker;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.engine.client.DecisionListener;
import io.orbitkv.pd.engine.client.KvSignal;
import io.orbitkv.pd.engine.client.api.ApiException;
import io.orbitkv.pd.engine.client.api.ApiFrames;
import io.orbitkv.pd.engine.client.api.ApiProtocol;
import io.orbitkv.pd.engine.client.api.EngineApiClient;
import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvTestData;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.TopicAdmin;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.schemas.config.ConfigProps;
import io.orbitkv.pd.testsupport.kafka.WithKafka;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceContext;
import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The worker's local engine API on a real broker: a worker in this JVM listening on a Unix socket, driven by the Java
 * client and by raw frames the way a careless or hostile client would send them. Facts are read back from Kafka;
 * decisions are written to {@code engine-commands} the way the decider writes them.
 */
@WithKafka
class EngineApiIT {

    private static final AtomicInteger RUN = new AtomicInteger();
    private static final KvGeometry G = KvTestData.small(2, 64);
    private static KraftCluster kafka;

    private final List<AutoCloseable> resources = new ArrayList<>();
    private String prefix;
    private Topics topics;
    private Path dir;
    private Path socket;
    private Path poolFile;
    private WorkerApp worker;
    private KafkaProducer<String, byte[]> producer;

    @BeforeAll
    static void setUp(KraftCluster cluster) {
        kafka = cluster;
    }

    @BeforeEach
    void start() throws Exception {
        prefix = "api" + RUN.incrementAndGet() + "-" + System.nanoTime() % 100_000 + ".";
        topics = new Topics(new TopicsConfig(prefix, 3, (short) 1, Duration.ofHours(1)), EventSerdes.embedded());
        try (Admin admin = Admin.create(kafka.adminConfig())) {
            TopicAdmin.ensureTopics(admin, topics);
        }
        dir = Files.createTempDirectory("orbitkv-api-it");
        socket = dir.resolve("engine.sock");
        poolFile = Path.of("/dev/shm", "orbitkv-api-it-" + ProcessHandle.current().pid() + "-" + prefix + "kv");
        HostKvPool.ensureFile(G, poolFile);
        worker = newWorker();
        producer = new KafkaProducer<>(Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, kafka.bootstrapServers(), ProducerConfig.LINGER_MS_CONFIG, 0),
                new StringSerializer(), new ByteArraySerializer());
    }

    private WorkerApp newWorker() throws InterruptedException {
        return new WorkerApp(WorkerConfig.from(ConfigProps.empty().with("bootstrap.servers", kafka.bootstrapServers())
                .with("worker.engine.id", "decode-0").with("worker.engine-api.path", socket.toString()).with("worker.commit.interval", "100ms")
                .with("worker.engine-api.io-timeout", "2s")
                .with("topics.prefix", prefix).with("topics.partitions", "3").with("topics.retention", "1h")
                .with("auth.key", "engine-api-it-key-0123456789"))).start();
    }

    @AfterEach
    void stop() throws Exception {
        for (int i = resources.size() - 1; i >= 0; i--) {
            resources.get(i).close();
        }
        producer.close();
        worker.close();
        Files.deleteIfExists(poolFile);
        Files.deleteIfExists(socket);
        Files.deleteIfExists(dir);
    }

    private EngineApiClient.Registration reg(long epoch) {
        return new EngineApiClient.Registration("decode-0", epoch, EngineRole.DECODE, "sim-test", "http://127.0.0.1:1", G.toLayout(0, 1),
                new ApiProtocol.PoolSpec(ApiProtocol.PoolSpec.SHM, poolFile.toString(), 0, List.of()));
    }

    private EngineApiClient client(long epoch, DecisionListener listener) throws Exception {
        EngineApiClient c = EngineApiClient.connect(socket, reg(epoch), listener, Duration.ofSeconds(10));
        resources.add(c);
        return c;
    }

    private void decide(String request, String decisionId, Object payload, Marks marks) throws Exception {
        Decision d = Decision.newBuilder().setRequestId(request).setDecisionId(decisionId).setSeq(1).setStreamTimeMs(System.currentTimeMillis())
                .setPayload(payload).build();
        ProducerRecord<String, byte[]> r = new ProducerRecord<>(topics.engineCommands().name(), "decode-0",
                topics.engineCommands().valueSerde().serializer().serialize(topics.engineCommands().name(), d));
        marks.writeOut(r.headers());
        producer.send(r).get(10, TimeUnit.SECONDS);
    }

    private KafkaConsumer<byte[], byte[]> reader(String topic) {
        KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(Map.of(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, kafka.bootstrapServers(),
                ConsumerConfig.GROUP_ID_CONFIG, "it-" + System.nanoTime(), ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest"),
                new ByteArrayDeserializer(), new ByteArrayDeserializer());
        c.subscribe(List.of(topic));
        resources.add(c);
        return c;
    }

    @Test
    void anEngineRegistersReportsFactsAsTheJavaClientDoesAndReceivesItsDecisions() throws Exception {
        List<ReleaseDecided> releases = new CopyOnWriteArrayList<>();
        EngineApiClient c = client(7, new DecisionListener() {
            @Override
            public void onRelease(Decision decision, ReleaseDecided release) {
                releases.add(release);
            }
        });
        assertThat(c.welcome().path("new_instance").asBoolean()).isTrue();
        assertThat(c.welcome().path("endpoints").get(0).path("transport").asText()).isEqualTo("tcp");

        // The registration the worker announced carries the engine's own fields and the worker's endpoints.
        KafkaConsumer<byte[], byte[]> engines = reader(topics.engines().name());
        List<EngineRegistration> regs = new ArrayList<>();
        await().atMost(Duration.ofSeconds(20)).until(() -> {
            for (ConsumerRecord<byte[], byte[]> r : engines.poll(Duration.ofMillis(100))) {
                regs.add(topics.engines().valueSerde().deserializer().deserialize(r.topic(), r.value()));
            }
            return !regs.isEmpty();
        });
        EngineRegistration reg = regs.get(regs.size() - 1);
        assertThat(reg.getInstanceEpoch()).isEqualTo(7);
        assertThat(reg.getHttpUrl()).isEqualTo("http://127.0.0.1:1");
        assertThat(reg.getRole()).isEqualTo(EngineRole.DECODE);
        assertThat(reg.getEndpoints()).isNotEmpty();
        assertThat(reg.getLayout().getNumBlocks()).isEqualTo(64);

        // A fact: the same event id, source and payload the Java EngineClient writes, with the trace and marks.
        TraceContext trace = TraceContext.newRoot();
        c.prefillCompleted("r1", new int[] {3, 4, 5, 9}, 50, 17, trace, Marks.receivedAt(Marks.nowMicros() - 1000)).get(10, TimeUnit.SECONDS);
        KafkaConsumer<byte[], byte[]> events = reader(topics.requestEvents().name());
        List<ConsumerRecord<byte[], byte[]>> got = new ArrayList<>();
        await().atMost(Duration.ofSeconds(20)).until(() -> {
            events.poll(Duration.ofMillis(100)).forEach(got::add);
            return !got.isEmpty();
        });
        ConsumerRecord<byte[], byte[]> rec = got.get(0);
        RequestEvent e = topics.requestEvents().valueSerde().deserializer().deserialize(rec.topic(), rec.value());
        assertThat(new String(rec.key(), StandardCharsets.UTF_8)).isEqualTo("r1");
        assertThat(e.getEventId()).isEqualTo("r1/prefill-completed");
        assertThat(e.getSource()).isEqualTo("engine:decode-0");
        PrefillCompleted pc = (PrefillCompleted) e.getPayload();
        assertThat(pc.getInstanceEpoch()).isEqualTo(7);
        assertThat(pc.getSourceBlocks()).extracting(BlockRun::getStart, BlockRun::getCount)
                .containsExactly(org.assertj.core.groups.Tuple.tuple(3, 3), org.assertj.core.groups.Tuple.tuple(9, 1));
        assertThat(pc.getFirstToken()).isEqualTo(17);
        Header tp = rec.headers().lastHeader("traceparent");
        assertThat(tp).isNotNull();
        assertThat(new String(tp.value(), StandardCharsets.US_ASCII)).contains(trace.traceId());
        Marks marks = Marks.read(rec.headers());
        assertThat(marks.get(Marks.IN)).isPresent();
        assertThat(marks.get(Marks.API)).isPresent();
        assertThat(marks.get(Marks.OUT)).isPresent();

        // Decisions stream back: KvReady completes the wait, a release reaches the listener.
        var kv = c.awaitKv("r1");
        decide("r1", "r1/kv", KvReady.newBuilder().setDecodeEngineId("decode-0").setOrderId("r1/a1").setBytes(4096).build(), Marks.empty());
        KvSignal s = kv.get(20, TimeUnit.SECONDS);
        assertThat(s).isInstanceOf(KvSignal.Ready.class);
        assertThat(((KvSignal.Ready) s).orderId()).isEqualTo("r1/a1");
        assertThat(((KvSignal.Ready) s).decidedMicros()).as("the decider's out mark travels").isPositive();
        decide("r1", "r1/rel", ReleaseDecided.newBuilder().setEngineId("decode-0").setSide(ReleaseSide.DECODE).setBlocks(List.of(
                BlockRun.newBuilder().setStart(3).setCount(3).build())).setLeaseId("L1").setLeaseEpoch(1L).setReason("done").build(), Marks.empty());
        await().atMost(Duration.ofSeconds(20)).until(() -> releases.size() == 1);
        assertThat(releases.get(0).getBlocks().get(0).getCount()).isEqualTo(3);
        // A repeated decision (a restarted decider re-sends) is delivered once.
        decide("r1", "r1/rel", ReleaseDecided.newBuilder().setEngineId("decode-0").setSide(ReleaseSide.DECODE).setBlocks(List.of())
                .setReason("done").build(), Marks.empty());
        c.ping().get(5, TimeUnit.SECONDS);
        assertThat(c.lastSeq()).isEqualTo(2);
    }

    /** A raw client: frames exactly as written, answers exactly as read. */
    private final class Raw implements AutoCloseable {
        final SocketChannel ch;
        final ByteBuffer header = ByteBuffer.allocate(4);

        Raw() throws IOException {
            ch = SocketChannel.open(StandardProtocolFamily.UNIX);
            ch.connect(UnixDomainSocketAddress.of(socket));
            resources.add(this);
        }

        void bytes(byte[] b) throws IOException {
            ByteBuffer buf = ByteBuffer.wrap(b);
            while (buf.hasRemaining()) {
                ch.write(buf);
            }
        }

        void send(ObjectNode m) throws IOException {
            ApiFrames.write(ch, m);
        }

        ObjectNode read() throws Exception {
            return ApiFrames.read(ch, header, 1 << 20);
        }

        /** The next frame that is not a decision. */
        ObjectNode answer() throws Exception {
            while (true) {
                ObjectNode m = read();
                if (m == null || !"decision".equals(m.path("op").asText())) {
                    return m;
                }
            }
        }

        ObjectNode hello(long epoch, ApiProtocol.Resume resume) throws Exception {
            EngineApiClient.Registration r = reg(epoch);
            send(ApiProtocol.hello(r.engineId(), epoch, r.role(), r.model(), r.httpUrl(), r.layout(), r.pool(), resume));
            return answer();
        }

        @Override
        public void close() throws IOException {
            ch.close();
        }
    }

    private static byte[] frame(int len, byte[] body) {
        ByteBuffer b = ByteBuffer.allocate(4 + body.length);
        b.putInt(len).put(body);
        return b.array();
    }

    /**
     * The engine's own cancel fences the request's pushes at its worker at once: a decode engine that gave a request up (its
     * lease unconfirmed while cut off from Kafka) no longer waits for its KV, and the decider's abort and release reach the
     * worker only as fast as its command stream (the partitions chaos run saw a push acknowledged after the release).
     */
    @Test
    void anEnginesCancelFencesTheRequestsPushesAtOnce() throws Exception {
        EngineApiClient c = client(7, new DecisionListener() { });
        c.cancel("r-gone", "lease unconfirmed", null, null).get(30, TimeUnit.SECONDS);
        io.orbitkv.pd.schemas.OrderTokens tokens = new io.orbitkv.pd.schemas.OrderTokens("engine-api-it-key-0123456789".getBytes(
                java.nio.charset.StandardCharsets.UTF_8));
        List<io.orbitkv.pd.events.BlockRun> runs = List.of(io.orbitkv.pd.kv.BlockRuns.run(0, 2));
        io.orbitkv.pd.transport.PushRequest push = new io.orbitkv.pd.transport.PushRequest("r-gone", "r-gone/a1", 1, "lease/decode-0/r-gone", 1,
                "decode-0", 7, runs, tokens.sign("r-gone/a1", 1, "decode-0", 7, runs), 0, "worker-prefill-0");
        org.assertj.core.api.Assertions.assertThatThrownBy(() -> worker.gate().open("tcp", push, G))
                .isInstanceOfSatisfying(io.orbitkv.pd.transport.TransferException.class, e -> {
                    assertThat(e.kind()).isEqualTo(io.orbitkv.pd.transport.TransferError.ABORTED);
                    assertThat(e.getMessage()).contains("gave the request up: lease unconfirmed");
                });
    }

    /**
     * Instance epochs default to the start time, so a new instance on a host whose clock is behind the one its predecessor
     * ran on says hello with an older epoch. It was refused for good; now the worker names the smallest epoch it takes —
     * after its current instance, or (a restarted worker) after the engines topic's — and the client registers with that.
     */
    @Test
    void aNewInstanceWithAnOlderClockTakesTheNextEpoch() throws Exception {
        EngineApiClient first = client(1_000, new DecisionListener() { });
        first.close();
        EngineApiClient second = client(500, new DecisionListener() { });
        assertThat(second.instanceEpoch()).as("after the worker's current instance").isEqualTo(1_001);
        assertThat(second.welcome().path("instance_epoch").asLong()).isEqualTo(1_001);
        second.close();
        worker.close(); // the worker restarts too: only the engines topic remembers instance 1001
        worker = newWorker();
        EngineApiClient third = client(700, new DecisionListener() { });
        assertThat(third.instanceEpoch()).as("after the engines topic's newest instance").isEqualTo(1_002);
    }

    @Test
    void aClientStalledInsideAFrameOrSilentBeforeItsHelloIsDisconnectedAndAnIdleEngineIsNot() throws Exception {
        Raw engine = new Raw();
        assertThat(engine.hello(1, null).path("op").asText()).isEqualTo("welcome");
        Raw silent = new Raw();
        java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newVirtualThreadPerTaskExecutor();
        try {
            // worker.engine-api.io-timeout is 2 s here: a client that never says hello is closed (an error, then the end)
            java.util.concurrent.Future<ObjectNode> s = pool.submit(silent::answer);
            assertThat(s.get(20, java.util.concurrent.TimeUnit.SECONDS).path("code").asText()).isEqualTo("bad_request");
            assertThat(pool.submit(silent::read).get(20, java.util.concurrent.TimeUnit.SECONDS)).as("the silent client's connection ends").isNull();
            // The registered engine sat idle between frames all that time and is still served.
            engine.send(ApiFrames.object().put("op", "teleport").put("id", 7));
            ObjectNode e = engine.answer();
            assertThat(e.path("code").asText()).isEqualTo("unknown_op");
            assertThat(e.path("id").asLong()).isEqualTo(7);
            // Now it begins a frame and stalls inside it: disconnected, saying why.
            engine.bytes(new byte[] {0, 0}); // half a frame's length, then nothing
            ObjectNode stalled = pool.submit(engine::answer).get(20, java.util.concurrent.TimeUnit.SECONDS);
            assertThat(stalled.path("code").asText()).isEqualTo("bad_frame");
            assertThat(stalled.path("message").asText()).contains("a frame begun and not finished within 2000 ms");
            assertThat(pool.submit(engine::read).get(20, java.util.concurrent.TimeUnit.SECONDS)).as("the stalled engine's connection ends").isNull();
        } finally {
            pool.shutdownNow();
        }
    }

    /**
     * The engine's KV cache events reach orbitkv.kv-events in order, keyed by the engine, with its numbers; a bad one is
     * refused naming the field (nothing of the message written); a new instance of the engine is written as a clear of the
     * old one's blocks.
     */
    @Test
    void kvCacheEventsGoToTheirTopicInOrderAndANewInstanceClearsTheOld() throws Exception {
        int bs = G.blockSizeTokens();
        com.fasterxml.jackson.databind.node.ArrayNode tokens = ApiFrames.object().arrayNode();
        for (int i = 0; i < 2 * bs; i++) {
            tokens.add(100 + i);
        }
        try (Raw r = new Raw()) {
            EngineApiClient.Registration reg = reg(5);
            r.send(ApiProtocol.hello(reg.engineId(), 5, reg.role(), reg.model(), reg.httpUrl(), reg.layout(), reg.pool(), null,
                    new ApiProtocol.BlockHashing("sha256_cbor", "seed-7")));
            assertThat(r.answer().path("op").asText()).isEqualTo("welcome");
            ObjectNode bad = ApiFrames.object().put("op", "kv_events").put("id", 1);
            bad.putArray("events").addObject().put("seq", 1).put("type", "stored").put("block_size", bs + 1).set("token_ids", tokens);
            ((ObjectNode) bad.get("events").get(0)).putArray("block_hashes").add("aa").add("bb");
            r.send(bad);
            ObjectNode e = r.answer();
            assertThat(e.path("code").asText()).isEqualTo("bad_request");
            assertThat(e.path("field").asText()).isEqualTo("events[0].block_size");
            ObjectNode ok = ApiFrames.object().put("op", "kv_events").put("id", 2);
            com.fasterxml.jackson.databind.node.ArrayNode ev = ok.putArray("events");
            ObjectNode stored = ev.addObject().put("seq", 1).put("type", "stored").put("block_size", bs).put("lora_name", "lora-a");
            stored.putArray("block_hashes").add("0a0b").add("0c0d");
            stored.set("token_ids", tokens);
            ev.addObject().put("seq", 2).put("type", "removed").putArray("block_hashes").add("0c0d");
            ev.addObject().put("seq", 3).put("type", "cleared");
            r.send(ok);
            ObjectNode ack = r.answer();
            assertThat(ack.path("op").asText()).isEqualTo("ack");
            assertThat(ack.path("event_id").asText()).isEqualTo("kv/5/3");
        }
        try (Raw r = new Raw()) {
            assertThat(r.hello(6, null).path("op").asText()).isEqualTo("welcome"); // a new instance: the old one's blocks are gone
        }
        KafkaConsumer<byte[], byte[]> c = reader(topics.kvEvents().name());
        List<io.orbitkv.pd.events.KvCacheEvent> got = new ArrayList<>();
        await().atMost(Duration.ofSeconds(20)).until(() -> {
            for (ConsumerRecord<byte[], byte[]> rec : c.poll(Duration.ofMillis(200))) {
                assertThat(new String(rec.key(), StandardCharsets.UTF_8)).isEqualTo("decode-0");
                got.add(topics.kvEvents().valueSerde().deserializer().deserialize(rec.topic(), rec.value()));
            }
            return got.size() >= 4;
        });
        assertThat(got).extracting(k -> k.getInstanceEpoch() + "/" + k.getSeq() + "/" + k.getPayload().getClass().getSimpleName())
                .containsExactly("5/1/BlockStored", "5/2/BlockRemoved", "5/3/AllBlocksCleared", "5/0/AllBlocksCleared");
        io.orbitkv.pd.events.BlockStored s0 = (io.orbitkv.pd.events.BlockStored) got.get(0).getPayload();
        assertThat(s0.getBlockHashes()).containsExactly(ByteBuffer.wrap(new byte[] {0x0a, 0x0b}), ByteBuffer.wrap(new byte[] {0x0c, 0x0d}));
        assertThat(s0.getTokenIds()).hasSize(2 * bs).startsWith(100, 101);
        assertThat(s0.getLoraName()).isEqualTo("lora-a");
        assertThat(((io.orbitkv.pd.events.AllBlocksCleared) got.get(3).getPayload()).getReason()).isEqualTo("new_instance");
        // how the engine hashes its blocks is in its registration, for a router to hash prompts alike
        KafkaConsumer<byte[], byte[]> regs = reader(topics.engines().name());
        List<io.orbitkv.pd.events.EngineRegistration> seen = new ArrayList<>();
        await().atMost(Duration.ofSeconds(20)).until(() -> {
            for (ConsumerRecord<byte[], byte[]> rec : regs.poll(Duration.ofMillis(200))) {
                seen.add(topics.engines().valueSerde().deserializer().deserialize(rec.topic(), rec.value()));
            }
            return seen.stream().anyMatch(x -> x.getInstanceEpoch() == 5);
        });
        io.orbitkv.pd.events.EngineRegistration five = seen.stream().filter(x -> x.getInstanceEpoch() == 5).findFirst().orElseThrow();
        assertThat(five.getBlockHashAlgorithm()).isEqualTo("sha256_cbor");
        assertThat(five.getBlockHashSeed()).isEqualTo("seed-7");
    }

    @Test
    void badFramesUnknownOpsAndBadFieldsGetClearErrorsAndTheWorkerServesOn() throws Exception {
        try (Raw r = new Raw()) {
            r.bytes(frame(0, new byte[0]));
            ObjectNode e = r.answer();
            assertThat(e.path("code").asText()).isEqualTo("bad_frame");
            assertThat(r.read()).as("the connection ends after a broken frame").isNull();
        }
        try (Raw r = new Raw()) {
            r.bytes(frame(5, "{not ".getBytes(StandardCharsets.UTF_8)));
            ObjectNode e = r.answer();
            assertThat(e.path("code").asText()).isEqualTo("bad_frame");
            assertThat(e.path("message").asText()).startsWith("frame body is not JSON");
        }
        try (Raw r = new Raw()) {
            r.bytes(frame(2, "[]".getBytes(StandardCharsets.UTF_8)));
            assertThat(r.answer().path("message").asText()).contains("one JSON object");
        }
        try (Raw r = new Raw()) {
            r.bytes(frame(64 << 20, new byte[0]));
            ObjectNode e = r.answer();
            assertThat(e.path("code").asText()).isEqualTo("too_large");
            assertThat(e.path("message").asText()).isEqualTo("frame of 67108864 bytes: the limit is 1048576");
        }
        try (Raw r = new Raw()) {
            // Before a hello, facts are refused without ending the connection.
            r.send(ApiFrames.object().put("op", "prefill_completed").put("id", 1).put("request_id", "x"));
            ObjectNode e = r.answer();
            assertThat(e.path("code").asText()).isEqualTo("not_registered");
            assertThat(e.path("id").asLong()).isEqualTo(1);
            r.send(ApiFrames.object().put("op", "hello").put("version", 9));
            e = r.answer();
            assertThat(e.path("code").asText()).isEqualTo("unsupported_version");
            assertThat(e.path("field").asText()).isEqualTo("version");
        }
        try (Raw r = new Raw()) {
            ObjectNode hello = ApiProtocol.hello("decode-0", 5, EngineRole.DECODE, "m", "", G.toLayout(0, 1), null, null);
            ((ObjectNode) hello.get("layout")).put("dtype", "bf17");
            r.send(hello);
            ObjectNode e = r.answer();
            assertThat(e.path("field").asText()).isEqualTo("layout.dtype");
            assertThat(e.path("message").asText()).isEqualTo("layout.dtype: must be one of [fp16, bf16, fp32, fp8_e4m3, fp8_e5m2, int8], got 'bf17'");
            r.send(ApiProtocol.hello("prefill-9", 5, EngineRole.DECODE, "m", "", G.toLayout(0, 1), null, null));
            e = r.answer();
            assertThat(e.path("code").asText()).isEqualTo("wrong_engine");
        }
        try (Raw r = new Raw()) {
            ObjectNode w = r.hello(5, null);
            assertThat(w.path("op").asText()).isEqualTo("welcome");
            r.send(ApiFrames.object().put("op", "teleport").put("id", 2));
            ObjectNode e = r.answer();
            assertThat(e.path("code").asText()).isEqualTo("unknown_op");
            assertThat(e.path("message").asText()).contains("'teleport'");
            r.send(ApiFrames.object().put("op", "decode_ready").put("id", 3).put("request_id", "r2").put("lease_id", "L").put("lease_epoch", 1)
                    .put("lease_deadline_ms", 1).set("dest_blocks", ApiFrames.json().createArrayNode().add(1).add(64)));
            e = r.answer();
            assertThat(e.path("code").asText()).isEqualTo("bad_request");
            assertThat(e.path("field").asText()).isEqualTo("dest_blocks");
            assertThat(e.path("message").asText()).contains("0..63").contains("[1] is 64");
            r.send(ApiFrames.object().put("op", "heartbeat").put("id", 4).put("request_id", "r2").put("lease_id", "L").put("lease_epoch", "one")
                    .put("extend_to_ms", 1).put("seq", 0));
            e = r.answer();
            assertThat(e.path("field").asText()).isEqualTo("lease_epoch");
            assertThat(e.path("message").asText()).isEqualTo("lease_epoch: must be an integer, got \"one\"");
            r.send(ApiFrames.object().put("op", "cancel").put("id", 5).put("request_id", "r2").put("reason", "x").put("traceparent", "00-zz"));
            assertThat(r.answer().path("field").asText()).isEqualTo("traceparent");
            // Layer-by-layer progress is unanswered when right; when wrong, refused naming the field (an id, if it had one)
            r.send(ApiFrames.object().put("op", "prefill_progress").put("id", 7).put("request_id", "r3").put("num_tokens", 40)
                    .put("done_tokens", 0).put("chunk_end", 40).put("layers", 1_000_000));
            e = r.answer();
            assertThat(e.path("code").asText()).isEqualTo("bad_request");
            assertThat(e.path("field").asText()).isEqualTo("layers");
            r.send(ApiFrames.object().put("op", "prefill_progress").put("request_id", "r3").put("num_tokens", 40).put("done_tokens", 30)
                    .put("chunk_end", 20).put("layers", 1));
            assertThat(r.answer().path("field").asText()).isEqualTo("chunk_end");
            ObjectNode shortPages = ApiFrames.object().put("op", "prefill_progress").put("request_id", "r3").put("num_tokens", 40)
                    .put("done_tokens", 0).put("chunk_end", 40).put("layers", 1);
            shortPages.putArray("source_blocks").add(1);
            r.send(shortPages);
            e = r.answer();
            assertThat(e.path("field").asText()).isEqualTo("source_blocks");
            assertThat(e.path("message").asText()).contains("40 tokens need 3 blocks");
            // The same connection still works.
            r.send(ApiFrames.object().put("op", "cancel").put("id", 6).put("request_id", "r2").put("reason", "client gave up"));
            ObjectNode ack = r.answer();
            assertThat(ack.path("op").asText()).isEqualTo("ack");
            assertThat(ack.path("event_id").asText()).isEqualTo("r2/cancel/engine:decode-0");
        }
        assertThat(worker.apiRefusals()).containsKeys("bad_frame", "too_large", "not_registered", "unknown_op", "bad_request", "wrong_engine");
    }

    @Test
    void oneConnectionSpeaksForTheEngineAndANewerInstanceFencesTheOld() throws Exception {
        try (Raw first = new Raw(); Raw second = new Raw(); Raw older = new Raw(); Raw newer = new Raw()) {
            assertThat(first.hello(10, null).path("op").asText()).isEqualTo("welcome");
            ObjectNode taken = second.hello(10, null);
            assertThat(taken.path("code").asText()).isEqualTo("engine_taken");
            assertThat(taken.path("message").asText()).contains("already connected at instance epoch 10");
            assertThat(older.hello(9, null).path("code").asText()).isEqualTo("fenced");
            ObjectNode w = newer.hello(11, null);
            assertThat(w.path("new_instance").asBoolean()).isTrue();
            ObjectNode fenced = first.answer();
            assertThat(fenced.path("code").asText()).isEqualTo("fenced");
            assertThat(fenced.path("message").asText()).contains("instance epoch 11");
            assertThat(first.read()).isNull();
            newer.send(ApiFrames.object().put("op", "decode_rejected").put("id", 1).put("request_id", "r3").put("reason", "full"));
            assertThat(newer.answer().path("op").asText()).isEqualTo("ack");
        }
    }

    @Test
    void anEngineThatReconnectsAtTheSameEpochMissesNoDecision() throws Exception {
        String session;
        try (Raw a = new Raw()) {
            ObjectNode w = a.hello(20, null);
            session = w.path("session").asText();
            decide("r4", "r4/kv", KvReady.newBuilder().setDecodeEngineId("decode-0").setOrderId("r4/a1").setBytes(1).build(), Marks.empty());
            ObjectNode d = a.read();
            assertThat(d.path("op").asText()).isEqualTo("decision");
            assertThat(d.path("seq").asLong()).isEqualTo(1);
            assertThat(d.path("kind").asText()).isEqualTo("kv_ready");
        } // vanished
        decide("r5", "r5/kv", KvReady.newBuilder().setDecodeEngineId("decode-0").setOrderId("r5/a1").setBytes(2).build(), Marks.empty());
        decide("r4", "r4/rel", ReleaseDecided.newBuilder().setEngineId("decode-0").setSide(ReleaseSide.DECODE).setBlocks(List.of())
                .setReason("done").build(), Marks.empty());
        await().atMost(Duration.ofSeconds(20)).until(() -> worker.apiLastSeq() == 3);
        try (Raw b = new Raw()) {
            ObjectNode w = b.hello(20, new ApiProtocol.Resume(session, 1));
            assertThat(w.path("new_instance").asBoolean()).isFalse();
            assertThat(w.path("missed").asLong()).isZero();
            ObjectNode d2 = b.read();
            ObjectNode d3 = b.read();
            assertThat(d2.path("seq").asLong()).isEqualTo(2);
            assertThat(d2.path("request_id").asText()).isEqualTo("r5");
            assertThat(d3.path("seq").asLong()).isEqualTo(3);
            assertThat(d3.path("kind").asText()).isEqualTo("release");
        }
    }

    @Test
    void theJavaClientReconnectsByItselfAndResendsWhatWasNotAcknowledged() throws Exception {
        EngineApiClient c = client(30, null);
        var kv = c.awaitKv("r6");
        worker.dropEngineConnections(); // as if the socket broke
        decide("r6", "r6/kv", KvReady.newBuilder().setDecodeEngineId("decode-0").setOrderId("r6/a1").setBytes(3).build(), Marks.empty());
        assertThat(kv.get(20, TimeUnit.SECONDS)).isInstanceOf(KvSignal.Ready.class);
        c.decodeCompleted("r6", 8, false, null, null).get(20, TimeUnit.SECONDS);
        c.close();
        assertThat(worker.engineConnected()).isFalse();
        // After the goodbye the worker announced that the engine left.
        assertThatThrownBy(() -> c.ping().get(1, TimeUnit.SECONDS)).hasCauseInstanceOf(IllegalStateException.class);
        assertThat(worker.registration()).isNull();
    }

    @Test
    void aPoolTheWorkerCannotMapIsRefusedNamingIt() throws Exception {
        EngineApiClient.Registration r = new EngineApiClient.Registration("decode-0", 40, EngineRole.DECODE, "m", "", G.toLayout(0, 1),
                new ApiProtocol.PoolSpec(ApiProtocol.PoolSpec.SHM, "/dev/shm/orbitkv-no-such-pool", 0, List.of()));
        assertThatThrownBy(() -> EngineApiClient.connect(socket, r, null, Duration.ofSeconds(5))).isInstanceOf(ApiException.class)
                .hasMessageContaining("pool.path: /dev/shm/orbitkv-no-such-pool is not a file");
        KvGeometry bigger = G.withNumBlocks(128);
        EngineApiClient.Registration wrongSize = new EngineApiClient.Registration("decode-0", 41, EngineRole.DECODE, "m", "", bigger.toLayout(0, 1),
                new ApiProtocol.PoolSpec(ApiProtocol.PoolSpec.SHM, poolFile.toString(), 0, List.of()));
        assertThatThrownBy(() -> EngineApiClient.connect(socket, wrongSize, null, Duration.ofSeconds(5))).isInstanceOf(ApiException.class)
                .hasMessageContaining("but this layout needs");
        // Still serves a correct engine afterwards.
        client(42, null).ping().get(5, TimeUnit.SECONDS);
    }
}
