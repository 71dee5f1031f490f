package io.orbitkv.pd.worker;

import static io.orbitkv.pd.kv.BlockRuns.run;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.events.AbortTransfer;
import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.DeadLetter;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferFailed;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.events.TransferStarted;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvTestData;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.OrderTokens;
import io.orbitkv.pd.schemas.TopicAdmin;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.schemas.config.ConfigProps;
import io.orbitkv.pd.testsupport.kafka.WithKafka;
import java.io.IOException;
import java.io.InputStream;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.Socket;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Two transfer workers as separate processes on a real KRaft broker, driven the way the decider drives them: signed
 * orders on {@code engine-commands}, facts read back from {@code request-events}. Each pool is a shared tmpfs file,
 * so this test fills the prefill engine's pages and checks every byte of the decode engine's pages itself, without
 * trusting the workers' word.
 */
@WithKafka
class WorkerProcessIT {

    private static final String KEY = "worker-it-auth-key-0123456789";
    private static final OrderTokens TOKENS = new OrderTokens(KEY.getBytes(StandardCharsets.UTF_8));
    private static final byte SENTINEL = (byte) 0xEE;
    private static final AtomicInteger RUN = new AtomicInteger();
    /** 32 layers × K,V of 32 KiB pages: 2 MiB per block, 128 blocks = 256 MiB (a ~2,000-token prompt of an 8B model). */
    private static final KvGeometry PREFILL = KvTestData.small(32, 128);
    private static final KvGeometry DECODE = KvTestData.small(32, 260);

    private static KraftCluster kafka;
    private static Path work;
    private final List<AutoCloseable> resources = new ArrayList<>();

    @BeforeAll
    static void setUp(KraftCluster cluster) throws IOException {
        kafka = cluster;
        work = Files.createDirectories(Path.of("target", "it", "WorkerProcessIT-" + System.nanoTime()).toAbsolutePath());
    }

    @AfterAll
    static void cleanShm() throws IOException {
        try (var files = Files.list(Path.of("/dev/shm"))) {
            for (Path p : files.filter(f -> f.getFileName().toString().startsWith("orbitkv-it-" + ProcessHandle.current().pid())).toList()) {
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

    /** One isolated deployment: its own topic prefix, pool files and workers. */
    private final class Deployment {
        final String prefix = "w" + RUN.incrementAndGet() + "-" + System.nanoTime() % 100_000 + ".";
        final Topics topics = new Topics(new TopicsConfig(prefix, 3, (short) 1, Duration.ofHours(1)), EventSerdes.embedded());
        final KafkaProducer<String, byte[]> producer = new KafkaProducer<>(Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG,
                kafka.bootstrapServers(), ProducerConfig.ACKS_CONFIG, "all", ProducerConfig.LINGER_MS_CONFIG, 0), new StringSerializer(),
                new ByteArraySerializer());
        final KafkaConsumer<byte[], byte[]> events = consumer();
        final KafkaConsumer<byte[], byte[]> deadLetters = consumer();
        final List<RequestEvent> facts = new ArrayList<>();
        final List<DeadLetter> dead = new ArrayList<>();
        final Path prefillFile = Path.of("/dev/shm", "orbitkv-it-" + ProcessHandle.current().pid() + "-" + prefix + "prefill.kv");
        final Path decodeFile = Path.of("/dev/shm", "orbitkv-it-" + ProcessHandle.current().pid() + "-" + prefix + "decode.kv");
        final HostKvPool prefillPool;
        final HostKvPool decodePool;
        int seq;

        Deployment() throws Exception {
            resources.add(producer);
            resources.add(events);
            resources.add(deadLetters);
            try (Admin admin = Admin.create(kafka.adminConfig())) {
                TopicAdmin.ensureTopics(admin, topics);
            }
            events.subscribe(List.of(topics.requestEvents().name()));
            deadLetters.subscribe(List.of(topics.deadLetters().name()));
            // The engine's side of the shared pools: the prefill KV is there before the worker starts.
            prefillPool = HostKvPool.mapFile(PREFILL, prefillFile);
            decodePool = HostKvPool.mapFile(DECODE, decodeFile);
            resources.add(prefillPool);
            resources.add(decodePool);
            KvTestData.fill(prefillPool, 42);
            KvTestData.sentinel(decodePool, SENTINEL);
        }

        KafkaConsumer<byte[], byte[]> consumer() {
            return new KafkaConsumer<>(Map.of(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, kafka.bootstrapServers(), ConsumerConfig.GROUP_ID_CONFIG,
                    "it-reader-" + System.nanoTime(), ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest"), new ByteArrayDeserializer(),
                    new ByteArrayDeserializer());
        }

        Map<String, String> settings(String engine, long epoch, KvGeometry g, Path pool) {
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
            s.put("transfer.tcp.io-timeout", "5s");
            s.put("topics.prefix", prefix);
            s.put("topics.partitions", "3");
            s.put("topics.retention", "1h");
            s.put("auth.key", KEY);
            return s;
        }

        WorkerProcess start(String name, Map<String, String> settings) throws Exception {
            WorkerProcess w = WorkerProcess.start(work, prefix + name, settings);
            resources.add(w);
            await().atMost(Duration.ofSeconds(90)).pollInterval(Duration.ofMillis(50)).until(w::isReady);
            return w;
        }

        TransferOrder order(String request, int attempt, List<BlockRun> src, long destEpoch, List<BlockRun> dst, String lease, long leaseEpoch) {
            String id = request + "/a" + attempt;
            return TransferOrder.newBuilder().setOrderId(id).setAttempt(attempt).setSourceEngineId("prefill-0").setSourceInstanceEpoch(101)
                    .setDestEngineId("decode-0").setDestInstanceEpoch(destEpoch).setSourceBlocks(src).setDestBlocks(dst)
                    .setLayout(PREFILL.toLayout(0, 1)).setLeaseId(lease).setLeaseEpoch(leaseEpoch)
                    .setAuthToken(ByteBuffer.wrap(TOKENS.sign(id, leaseEpoch, "decode-0", destEpoch, dst))).setDeadlineMs(System.currentTimeMillis() + 120_000)
                    .setTransport("auto").build();
        }

        RecordMetadata command(String engine, String request, Object payload) {
            Decision d = Decision.newBuilder().setRequestId(request).setDecisionId(request + "/" + seq).setSeq(seq++)
                    .setStreamTimeMs(System.currentTimeMillis()).setPayload(payload).build();
            return raw(engine, topics.engineCommands().valueSerde().serializer().serialize(topics.engineCommands().name(), d));
        }

        RecordMetadata raw(String key, byte[] value) {
            try {
                return producer.send(new ProducerRecord<>(topics.engineCommands().name(), key, value)).get();
            } catch (Exception e) {
                throw new AssertionError("cannot send a command", e);
            }
        }

        /** Waits until the engine's worker has acted on the command at {@code md} (its committed offset is past it). */
        void awaitActedOn(String engine, RecordMetadata md) {
            TopicPartition tp = new TopicPartition(md.topic(), md.partition());
            try (Admin admin = Admin.create(kafka.adminConfig())) {
                await().atMost(Duration.ofSeconds(30)).pollInterval(Duration.ofMillis(50)).until(() -> {
                    OffsetAndMetadata o = admin.listConsumerGroupOffsets("orbitkv-worker-" + engine).partitionsToOffsetAndMetadata().get().get(tp);
                    return o != null && o.offset() > md.offset();
                });
            }
        }

        void poll() {
            for (ConsumerRecord<byte[], byte[]> r : events.poll(Duration.ofMillis(100))) {
                facts.add(topics.requestEvents().valueSerde().deserializer().deserialize(r.topic(), r.value()));
            }
            for (ConsumerRecord<byte[], byte[]> r : deadLetters.poll(Duration.ofMillis(10))) {
                dead.add(topics.deadLetters().valueSerde().deserializer().deserialize(r.topic(), r.value()));
            }
        }

        <T> List<T> factsOf(Class<T> type, String orderId) {
            List<T> out = new ArrayList<>();
            for (RequestEvent e : facts) {
                Object p = e.getPayload();
                if (type.isInstance(p) && orderId.equals(orderIdOf(p))) {
                    out.add(type.cast(p));
                }
            }
            return out;
        }

        /** The terminal fact of an order attempt: TransferCompleted or TransferFailed. */
        Object awaitOutcome(String orderId) {
            Object[] found = new Object[1];
            await().atMost(Duration.ofSeconds(60)).pollInterval(Duration.ofMillis(20)).until(() -> {
                poll();
                List<TransferCompleted> c = factsOf(TransferCompleted.class, orderId);
                List<TransferFailed> f = factsOf(TransferFailed.class, orderId);
                found[0] = !c.isEmpty() ? c.get(0) : f.isEmpty() ? null : f.get(0);
                return found[0] != null;
            });
            return found[0];
        }

        TransferFailed awaitFailure(String orderId) {
            Object o = awaitOutcome(orderId);
            assertThat(o).as("outcome of %s", orderId).isInstanceOf(TransferFailed.class);
            return (TransferFailed) o;
        }

        TransferCompleted awaitCompletion(String orderId) {
            Object o = awaitOutcome(orderId);
            assertThat(o).as("outcome of %s", orderId).isInstanceOf(TransferCompleted.class);
            return (TransferCompleted) o;
        }
    }

    private static String orderIdOf(Object p) {
        return switch (p) {
            case TransferStarted s -> s.getOrderId();
            case TransferCompleted c -> c.getOrderId();
            case TransferFailed f -> f.getOrderId();
            default -> null;
        };
    }

    /** Every other destination block: 128 runs of one block, so 8,192 separate 32 KiB pages. */
    private static List<BlockRun> everyOther(int blocks) {
        List<BlockRun> out = new ArrayList<>();
        for (int i = 0; i < blocks; i++) {
            out.add(run(1 + 2 * i, 1));
        }
        return out;
    }

    @Test
    void aForgedOlderRegistrationOfItsEngineIsDeadLetteredAndTheWorkerAnnouncesItsEngineAgain() throws Exception {
        Deployment d = new Deployment();
        d.start("decode", d.settings("decode-0", 7, DECODE, d.decodeFile));
        // One record with an older instance epoch (and another engine's record under this key): neither may take the engine.
        io.orbitkv.pd.events.EngineRegistration forged = io.orbitkv.pd.events.EngineRegistration.newBuilder().setEngineId("decode-0")
                .setRole(io.orbitkv.pd.events.EngineRole.DECODE).setInstanceEpoch(-1).setModel("m").setHttpUrl("http://forged")
                .setEndpoints(List.of()).setRegions(List.of()).setRegisteredAtMs(0).setDeregistered(false).setLayout(DECODE.toLayout(0, 1)).build();
        d.producer.send(new ProducerRecord<>(d.topics.engines().name(), "decode-0",
                d.topics.engines().valueSerde().serializer().serialize(d.topics.engines().name(), forged))).get();
        await().atMost(Duration.ofSeconds(30)).pollInterval(Duration.ofMillis(100)).untilAsserted(() -> {
            d.poll();
            assertThat(d.dead).anySatisfy(x -> {
                assertThat(x.getErrorType()).isEqualTo("STALE_EPOCH");
                assertThat(x.getReason()).contains("instance epoch -1 is older than the one taken (7)");
            });
            // the table's latest record for the engine is the worker's own again
            assertThat(latestRegistration(d, "decode-0").getInstanceEpoch()).isEqualTo(7);
        });
    }

    private static io.orbitkv.pd.events.EngineRegistration latestRegistration(Deployment d, String engine) {
        io.orbitkv.pd.events.EngineRegistration last = null;
        try (KafkaConsumer<byte[], byte[]> c = d.consumer()) {
            List<TopicPartition> parts = c.partitionsFor(d.topics.engines().name()).stream()
                    .map(p -> new TopicPartition(p.topic(), p.partition())).toList();
            c.assign(parts);
            c.seekToBeginning(parts);
            Map<TopicPartition, Long> end = c.endOffsets(parts);
            while (parts.stream().anyMatch(p -> c.position(p) < end.get(p))) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    if (engine.equals(r.key() == null ? null : new String(r.key(), StandardCharsets.UTF_8))) {
                        last = d.topics.engines().valueSerde().deserializer().deserialize(r.topic(), r.value());
                    }
                }
            }
        }
        return last;
    }

    @Test
    void twoWorkerProcessesMove256MiBIn32KiBPagesAndRefuseWhatIsNotTheirs() throws Exception {
        Deployment d = new Deployment();
        d.start("decode", d.settings("decode-0", 201, DECODE, d.decodeFile));
        WorkerProcess prefill = d.start("prefill", d.settings("prefill-0", 101, PREFILL, d.prefillFile));

        // 256 MiB: the prefill's 128 contiguous blocks into 128 scattered decode blocks.
        List<BlockRun> src = List.of(run(0, 128));
        List<BlockRun> dst = everyOther(128);
        TransferOrder big = d.order("req-big", 1, src, 201, dst, "lease-big", 1);
        d.command("prefill-0", "req-big", big);
        TransferCompleted done = d.awaitCompletion("req-big/a1");
        assertThat(done.getBytes()).isEqualTo(256L << 20);
        assertThat(done.getWorkerId()).isEqualTo("worker-prefill-0");
        assertThat(d.factsOf(TransferStarted.class, "req-big/a1")).singleElement().satisfies(s -> assertThat(s.getTransport()).isEqualTo("tcp"));
        TransferPlan plan = TransferPlan.build(PREFILL, src, DECODE, dst);
        assertThat(plan.spans()).isEqualTo(8192);
        assertThat(KvTestData.verify(d.prefillPool, d.decodePool, plan, SENTINEL)).as("every byte, and nothing else").isNull();
        RequestEvent fact = d.facts.stream().filter(e -> e.getPayload() instanceof TransferCompleted).findFirst().orElseThrow();
        assertThat(fact.getRequestId()).isEqualTo("req-big");
        assertThat(fact.getEventId()).isEqualTo("req-big/a1/completed");
        assertThat(fact.getSource()).isEqualTo("worker:prefill-0");

        // A forged token: refused by the receiving worker before any byte lands.
        KvTestData.sentinel(d.decodePool, SENTINEL);
        List<BlockRun> small = List.of(run(200, 8));
        TransferOrder forged = TransferOrder.newBuilder(d.order("req-forged", 1, List.of(run(0, 8)), 201, small, "lease-f", 1))
                .setAuthToken(ByteBuffer.wrap(new OrderTokens("somebody-elses-key-123".getBytes(StandardCharsets.UTF_8))
                        .sign("req-forged/a1", 1, "decode-0", 201, small))).build();
        d.command("prefill-0", "req-forged", forged);
        TransferFailed f1 = d.awaitFailure("req-forged/a1");
        assertThat(f1.getRetriable()).isFalse();
        assertThat(f1.getReason()).startsWith("UNAUTHORIZED: refused by decode-0@201").contains("does not verify");

        // A released lease: the decode worker fences it; a late order under that epoch is refused.
        RecordMetadata release = d.command("decode-0", "req-late", ReleaseDecided.newBuilder().setEngineId("decode-0").setSide(ReleaseSide.DECODE)
                .setBlocks(small).setLeaseId("lease-late").setLeaseEpoch(3L).setReason("request finished").build());
        d.awaitActedOn("decode-0", release);
        d.command("prefill-0", "req-late", d.order("req-late", 1, List.of(run(0, 8)), 201, small, "lease-late", 3));
        TransferFailed f2 = d.awaitFailure("req-late/a1");
        assertThat(f2.getReason()).startsWith("STALE_EPOCH: refused by decode-0@201")
                .contains("lease lease-late epoch 3 was released (through epoch 3): its pages may belong to another request now");
        assertThat(KvTestData.untouched(d.decodePool, SENTINEL)).as("no byte of a refused push lands").isNull();

        // An order for a previous incarnation of the decode engine, and one for pages outside its pool.
        d.command("prefill-0", "req-old", d.order("req-old", 1, List.of(run(0, 8)), 200, small, "lease-o", 1));
        assertThat(d.awaitFailure("req-old/a1").getReason())
                .isEqualTo("STALE_EPOCH: destination engine decode-0 is registered at instance epoch 201, the order names 200");
        d.command("prefill-0", "req-oob", d.order("req-oob", 1, List.of(run(0, 8)), 201, List.of(run(255, 8)), "lease-x", 1));
        TransferFailed f4 = d.awaitFailure("req-oob/a1");
        assertThat(f4.getReason()).isEqualTo("OUT_OF_RANGE: cannot plan the order: dest_blocks: run 255+8 is outside the pool of 260 blocks");
        assertThat(f4.getRetriable()).isFalse();

        // Garbage on the decode worker's socket, and a record on the command topic that is not a decision.
        String[] hostPort = Files.readString(work.resolve(d.prefix + "decode.ready")).lines().filter(l -> l.startsWith("tcp="))
                .findFirst().orElseThrow().substring(4).split(":");
        try (Socket s = new Socket(hostPort[0], Integer.parseInt(hostPort[1]))) {
            byte[] junk = new byte[100_000];
            new Random(5).nextBytes(junk);
            s.setSoTimeout(10_000);
            s.getOutputStream().write(junk);
            InputStream in = s.getInputStream();
            assertThat(drainUntilClosed(in)).as("the receiver closes a connection that speaks garbage").isTrue();
        }
        d.raw("prefill-0", "definitely not avro".getBytes(StandardCharsets.UTF_8));
        // a release keyed to decode-0 that names another engine's pages: refused, not applied
        d.command("decode-0", "req-other", ReleaseDecided.newBuilder().setEngineId("decode-7").setSide(ReleaseSide.DECODE)
                .setBlocks(List.of(run(200, 8))).setLeaseId("lease-l").setLeaseEpoch(1L).setReason("forged").build());

        // Through all of it both workers keep serving: a last order, sent twice, completes once and lands intact.
        TransferOrder last = d.order("req-last", 1, List.of(run(64, 8)), 201, small, "lease-l", 1);
        d.command("prefill-0", "req-last", last);
        d.command("prefill-0", "req-last", last);
        d.command("prefill-0", "req-marker", d.order("req-marker", 1, List.of(run(80, 1)), 201, List.of(run(259, 1)), "lease-m", 1));
        d.awaitCompletion("req-last/a1");
        d.awaitCompletion("req-marker/a1");
        assertThat(d.factsOf(TransferCompleted.class, "req-last/a1")).as("a duplicate order is executed once").hasSize(1);
        assertThat(KvTestData.verify(d.prefillPool, d.decodePool, TransferPlan.build(PREFILL, List.of(run(64, 8), run(80, 1)), DECODE,
                List.of(run(200, 8), run(259, 1))), SENTINEL)).isNull();
        await().atMost(Duration.ofSeconds(30)).until(() -> {
            d.poll();
            return d.dead.size() >= 2;
        });
        assertThat(d.dead).filteredOn(dl -> dl.getComponent().equals("worker:decode-0")).singleElement().satisfies(dl -> {
            assertThat(dl.getErrorType()).isEqualTo("KEY_MISMATCH");
            assertThat(dl.getReason()).contains("names engine 'decode-7'");
        });
        assertThat(d.dead).filteredOn(dl -> dl.getComponent().equals("worker:prefill-0")).singleElement().satisfies(dl -> {
            assertThat(dl.getComponent()).isEqualTo("worker:prefill-0");
            assertThat(dl.getErrorType()).isEqualTo("UNDECODABLE");
            assertThat(dl.getTopic()).isEqualTo(d.topics.engineCommands().name());
            assertThat(StandardCharsets.UTF_8.decode(dl.getOriginalValue()).toString()).isEqualTo("definitely not avro");
        });
        assertThat(prefill.isAlive()).isTrue();
    }

    @Test
    void aReceiverKilledMidTransferFailsTheOrderRetriablyAndTheRetryAfterItsRestartSucceeds() throws Exception {
        Deployment d = new Deployment();
        Map<String, String> decodeSettings = d.settings("decode-0", 301, DECODE, d.decodeFile);
        WorkerProcess decode = d.start("decode", decodeSettings);
        Map<String, String> prefillSettings = d.settings("prefill-0", 101, PREFILL, d.prefillFile);
        // Slow the sender down (a bandwidth cap) so the kill lands mid-transfer: 128 MiB at 64 MiB/s.
        prefillSettings.put("transfer.tcp.max-bytes-per-second", Long.toString(64L << 20));
        prefillSettings.put("transfer.tcp.frame-bytes", Integer.toString(1 << 20));
        d.start("prefill", prefillSettings);

        List<BlockRun> src = List.of(run(0, 64));
        List<BlockRun> dst = everyOther(64);
        d.command("prefill-0", "req-kill", d.order("req-kill", 1, src, 301, dst, "lease-k", 1));
        MemorySegment clean = Arena.ofAuto().allocate(32 * 1024);
        clean.fill(SENTINEL);
        await().atMost(Duration.ofSeconds(60)).pollInterval(Duration.ofMillis(5)).until(() -> d.decodePool.page(0, 1).mismatch(clean) != -1);
        decode.kill();
        assertThat(d.decodePool.page(63, 127).mismatch(clean)).as("the last page had not arrived when the receiver died").isEqualTo(-1);

        TransferFailed failed = d.awaitFailure("req-kill/a1");
        assertThat(failed.getRetriable()).isTrue();
        assertThat(failed.getReason()).startsWith("CONNECTION_LOST: connection to decode-0@301 tcp://");

        // The decode worker comes back (same engine memory, same instance epoch, another port); the retry gets through.
        WorkerProcess restarted = d.start("decode2", decodeSettings);
        assertThat(restarted.tcpAddress()).isNotEqualTo(decode.tcpAddress());
        d.command("prefill-0", "req-kill", d.order("req-kill", 2, src, 301, dst, "lease-k", 1));
        TransferCompleted ok = d.awaitCompletion("req-kill/a2");
        assertThat(ok.getBytes()).isEqualTo(128L << 20);
        assertThat(KvTestData.verify(d.prefillPool, d.decodePool, TransferPlan.build(PREFILL, src, DECODE, dst), SENTINEL))
                .as("no page corrupted, none outside the order written").isNull();
    }

    /** In-process workers (same code, real broker and sockets) for the lifecycle cases: faster to start than child JVMs. */
    private WorkerApp app(Map<String, String> settings) throws Exception {
        ConfigProps props = ConfigProps.empty();
        settings.forEach(props::with);
        WorkerApp a = new WorkerApp(WorkerConfig.from(props)).start();
        resources.add(a);
        return a;
    }

    @Test
    void aCancelDecisionAbortsTheInFlightPushAndANewInstanceEpochOfThePeerIsPickedUp() throws Exception {
        Deployment d = new Deployment();
        Map<String, String> decodeSettings = d.settings("decode-0", 401, DECODE, d.decodeFile);
        WorkerApp decode = app(decodeSettings);
        Map<String, String> prefillSettings = d.settings("prefill-0", 101, PREFILL, d.prefillFile);
        prefillSettings.put("transfer.tcp.max-bytes-per-second", Long.toString(32L << 20));
        prefillSettings.put("transfer.tcp.frame-bytes", Integer.toString(1 << 20));
        app(prefillSettings);

        // 1. AbortTransfer to the source while it pushes (64 MiB at 32 MiB/s): the push stops, the order fails as aborted.
        List<BlockRun> src = List.of(run(0, 32));
        List<BlockRun> dst = List.of(run(100, 32));
        d.command("prefill-0", "req-cancel", d.order("req-cancel", 1, src, 401, dst, "lease-c", 1));
        await().atMost(Duration.ofSeconds(30)).until(() -> {
            d.poll();
            return !d.factsOf(TransferStarted.class, "req-cancel/a1").isEmpty();
        });
        d.command("prefill-0", "req-cancel", AbortTransfer.newBuilder().setOrderId("req-cancel/a1").setAttempt(1).setSourceEngineId("prefill-0")
                .setDestEngineId("decode-0").setReason("request cancelled").build());
        TransferFailed aborted = d.awaitFailure("req-cancel/a1");
        assertThat(aborted.getReason()).isEqualTo("ABORTED: aborted: request cancelled");
        assertThat(aborted.getRetriable()).isFalse();
        MemorySegment clean = Arena.ofAuto().allocate(32 * 1024);
        clean.fill(SENTINEL);
        assertThat(d.decodePool.page(63, 131).mismatch(clean)).as("the push stopped before its last page").isEqualTo(-1);
        assertThat(decode.gate().openSessions()).isZero();

        // 2. AbortTransfer to the destination fences the attempt there: the push is refused before any byte lands.
        KvTestData.sentinel(d.decodePool, SENTINEL);
        d.awaitActedOn("decode-0", d.command("decode-0", "req-fenced", AbortTransfer.newBuilder().setOrderId("req-fenced/a1").setAttempt(1)
                .setSourceEngineId("prefill-0").setDestEngineId("decode-0").setReason("lease expired").build()));
        d.command("prefill-0", "req-fenced", d.order("req-fenced", 1, List.of(run(0, 4)), 401, List.of(run(0, 4)), "lease-x", 1));
        assertThat(d.awaitFailure("req-fenced/a1").getReason()).startsWith("ABORTED: refused by decode-0@401")
                .contains("attempt 1 was aborted: lease expired");
        assertThat(KvTestData.untouched(d.decodePool, SENTINEL)).isNull();

        // 3. The decode engine restarts with a new instance epoch: old orders are refused, new ones reach the new instance.
        decode.close();
        decodeSettings.put("worker.engine.instance-epoch", "402");
        app(decodeSettings);
        d.command("prefill-0", "req-new", d.order("req-new", 1, List.of(run(40, 4)), 402, List.of(run(7, 4)), "lease-n", 1));
        d.awaitCompletion("req-new/a1");
        d.command("prefill-0", "req-stale", d.order("req-stale", 1, List.of(run(40, 4)), 401, List.of(run(7, 4)), "lease-s", 1));
        assertThat(d.awaitFailure("req-stale/a1").getReason())
                .isEqualTo("STALE_EPOCH: destination engine decode-0 is registered at instance epoch 402, the order names 401");
        assertThat(KvTestData.verify(d.prefillPool, d.decodePool, TransferPlan.build(PREFILL, List.of(run(40, 4)), DECODE, List.of(run(7, 4))),
                SENTINEL)).isNull();
    }

    private static boolean drainUntilClosed(InputStream in) throws IOException {
        byte[] buf = new byte[4096];
        try {
            while (in.read(buf) >= 0) {
                // ERROR frame, then end of stream
            }
            return true;
        } catch (java.net.SocketException e) {
            return true; // reset: closed with our junk unread
        } catch (java.net.SocketTimeoutException e) {
            return false;
        }
    }

}
