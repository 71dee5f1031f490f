package io.orbitkv.pd.cli;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.broker.LogTail;
import io.orbitkv.pd.harness.Pipeline;
import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.DecodeCompleted;
import io.orbitkv.pd.events.DecodeReady;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.KvLayout;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.TopicAdmin;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.testsupport.kafka.WithKafka;
import java.io.IOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The decider killed with SIGKILL under load and started again, in its own JVM ({@code orbitkv-pd decider}): no
 * commit, no flush, no clean close. Whatever it had in flight is lost at the kill; what it decides after the
 * restart must still give every request exactly one outcome, one order and one release per held page set, with
 * every decision id meaning one decision (a decision seen twice is an exact copy, which actors dedupe). Run for
 * both guarantees: exactly-once read committed, and at-least-once read as it is written.
 */
@WithKafka
class DeciderCrashIT {

    private static final int PER_SECOND = 300;
    /** Requests decided before the kill (the decider is busy by then), and requests sent after it. */
    private static final int BEFORE_KILL = 400;
    private static final int AFTER_KILL = 600;

    @ParameterizedTest
    @ValueSource(strings = {"exactly_once_v2", "at_least_once"})
    void killedUnderLoadAndRestartedEveryRequestStillEndsOnce(String guarantee, KraftCluster kafka) throws Exception {
        Path dir = Files.createDirectories(Path.of("target", "it", "DeciderCrashIT-" + guarantee + "-" + System.nanoTime()).toAbsolutePath());
        String prefix = "crash" + System.nanoTime() % 100000 + ".";
        TopicsConfig tc = new TopicsConfig(prefix, 4, (short) 1, Duration.ofHours(1));
        try (EventSerdes serdes = EventSerdes.embedded(); Admin admin = Admin.create(Map.of("bootstrap.servers", kafka.bootstrapServers()))) {
            Topics topics = new Topics(tc, serdes);
            TopicAdmin.ensureTopics(admin, topics);
            Map<String, String> props = new LinkedHashMap<>();
            props.put("bootstrap.servers", kafka.bootstrapServers());
            props.put("decider.application.id", prefix + "decider");
            props.put("decider.guarantee", guarantee);
            props.put("decider.commit.interval", "100ms");
            props.put("decider.state.dir", dir.resolve("state").toString());
            props.put("decider.http.port", "-1");
            props.put("topics.prefix", prefix);
            props.put("topics.partitions", "4");
            props.put("auth.key", "crash-test-auth-key-0123456789");
            // The killed member never leaves the group: its partitions move once its session times out.
            props.put("kafka.session.timeout.ms", "6000");
            props.put("kafka.heartbeat.interval.ms", "1000");
            Path config = dir.resolve("decider.properties");
            Properties p = new Properties();
            p.putAll(props);
            try (Writer w = Files.newBufferedWriter(config, StandardCharsets.UTF_8)) {
                p.store(w, "DeciderCrashIT");
            }
            String isolation = guarantee.equals("exactly_once_v2") ? "read_committed" : "read_uncommitted";
            Map<String, Decision> byId = new HashMap<>();
            Map<String, List<Decision>> byRequest = new HashMap<>();
            AtomicInteger sent = new AtomicInteger();
            AtomicInteger total = new AtomicInteger(Integer.MAX_VALUE); // set at the kill: the load goes on across the restart
            int requests;
            Process first = launch(dir, config, "decider-1");
            Process second = null;
            try (KafkaProducer<String, RequestEvent> producer = new KafkaProducer<>(Map.of("bootstrap.servers", kafka.bootstrapServers(),
                    "acks", "all", "linger.ms", 5), new StringSerializer(), topics.requestEvents().valueSerde().serializer());
                 KafkaConsumer<byte[], byte[]> reader = new KafkaConsumer<>(Map.of("bootstrap.servers", kafka.bootstrapServers(),
                         "group.id", prefix + "reader", "auto.offset.reset", "earliest", "isolation.level", isolation),
                         new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                reader.subscribe(List.of(topics.decisions().name()));
                Thread load = Thread.ofPlatform().name("crash-load").start(() -> {
                    long start = System.nanoTime();
                    for (int i = 0; i < total.get(); i++) {
                        long due = start + i * 1_000_000_000L / PER_SECOND;
                        while (System.nanoTime() < due) {
                            java.util.concurrent.locks.LockSupport.parkNanos(due - System.nanoTime());
                        }
                        for (RequestEvent e : happyPath("r" + i)) {
                            producer.send(new ProducerRecord<>(topics.requestEvents().name(), e.getRequestId(), e));
                        }
                        sent.incrementAndGet();
                    }
                    producer.flush();
                });
                // Kill it while it is busy: requests decided, the load still coming (and going on after the kill).
                awaitOutcomes(reader, topics, byId, byRequest, BEFORE_KILL, Duration.ofSeconds(90), first, dir.resolve("decider-1.log"));
                first.destroyForcibly(); // SIGKILL
                total.set(sent.get() + AFTER_KILL);
                assertThat(first.waitFor(30, java.util.concurrent.TimeUnit.SECONDS)).isTrue();
                second = launch(dir, config, "decider-2");
                load.join();
                requests = sent.get();
                awaitOutcomes(reader, topics, byId, byRequest, requests, Duration.ofSeconds(120), second, dir.resolve("decider-2.log"));
                // A little longer: a decision that would be made twice may come after the last outcome.
                long until = System.nanoTime() + 2_000_000_000L;
                while (System.nanoTime() < until) {
                    read(reader, topics, byId, byRequest);
                }
            } finally {
                if (first.isAlive()) {
                    first.destroyForcibly();
                }
                if (second != null) {
                    second.destroy();
                    if (!second.waitFor(20, java.util.concurrent.TimeUnit.SECONDS)) {
                        second.destroyForcibly();
                    }
                }
            }
            assertThat(byRequest).hasSize(requests);
            byRequest.forEach((r, ds) -> {
                assertThat(ds).extracting(Decision::getSeq).as("decision seqs of %s", r)
                        .containsExactlyInAnyOrderElementsOf(java.util.stream.IntStream.range(0, ds.size()).boxed().toList());
                // one attempt: its order, or (decider.order-ahead) its order ahead of the prefill and the copy with the source pages
                List<TransferOrder> orders = ds.stream().map(Decision::getPayload).filter(TransferOrder.class::isInstance)
                        .map(TransferOrder.class::cast).toList();
                assertThat(orders).as("orders of %s", r).extracting(TransferOrder::getAttempt).containsOnly(1);
                assertThat(orders).as("orders of %s", r).filteredOn(o -> !o.getAwaitPrefill()).hasSize(1);
                assertThat(ds.stream().filter(d -> d.getPayload() instanceof ReleaseDecided)).as("releases of %s", r).hasSize(2);
                List<RequestOutcome> outcomes = ds.stream().map(Decision::getPayload).filter(RequestOutcome.class::isInstance)
                        .map(RequestOutcome.class::cast).toList();
                assertThat(outcomes).as("outcomes of %s", r).hasSize(1);
                assertThat(outcomes.get(0).getKind()).as("outcome of %s", r).isEqualTo(OutcomeKind.COMPLETED);
            });
        }
    }

    /** Reads decisions until {@code n} requests have an outcome, failing early (with its log) if the decider died. */
    private static void awaitOutcomes(KafkaConsumer<byte[], byte[]> reader, Topics topics, Map<String, Decision> byId,
                                      Map<String, List<Decision>> byRequest, int n, Duration timeout, Process decider, Path log) {
        Set<String> ended = new HashSet<>();
        await().atMost(timeout).pollDelay(Duration.ZERO).pollInterval(Duration.ofMillis(1)).until(() -> {
            assertThat(decider.isAlive()).as("decider alive; its log:\n%s", LogTail.of(log, 40)).isTrue();
            read(reader, topics, byId, byRequest);
            ended.clear();
            byRequest.forEach((r, ds) -> {
                if (ds.stream().anyMatch(d -> d.getPayload() instanceof RequestOutcome)) {
                    ended.add(r);
                }
            });
            return ended.size() >= n;
        });
    }

    /** One poll: each decision id kept once; a decision read again must be an exact copy. */
    private static void read(KafkaConsumer<byte[], byte[]> reader, Topics topics, Map<String, Decision> byId,
                             Map<String, List<Decision>> byRequest) {
        for (ConsumerRecord<byte[], byte[]> rec : reader.poll(Duration.ofMillis(200))) {
            Decision d = topics.decisions().valueSerde().deserializer().deserialize(rec.topic(), rec.value());
            Decision first = byId.putIfAbsent(d.getDecisionId(), d);
            if (first == null) {
                byRequest.computeIfAbsent(d.getRequestId(), k -> new ArrayList<>()).add(d);
            } else {
                assertThat(d).as("decision %s read again", d.getDecisionId()).isEqualTo(first);
            }
        }
    }

    /** Every fact of a request that completes normally (the first order's id is deterministic: r/a1). */
    private static List<RequestEvent> happyPath(String r) {
        KvLayout layout = KvLayout.newBuilder().setNumLayers(4).setKvSplit(KvSplit.SEPARATE).setBlockSizeTokens(16).setNumKvHeads(8)
                .setHeadDim(128).setDtype(Dtype.BF16).setTpRank(0).setTpSize(1).setPageBytes(16 * 8 * 128 * 2).setNumBlocks(1024).build();
        List<BlockRun> src = List.of(BlockRun.newBuilder().setStart(100).setCount(8).build());
        List<BlockRun> dst = List.of(BlockRun.newBuilder().setStart(0).setCount(8).build());
        return List.of(
                event(r, "adm", RequestAdmitted.newBuilder().setModel("m").setPromptTokens(100).setMaxTokens(8).setPrefillEngineId("prefill-0")
                        .setDecodeEngineId("decode-0").build()),
                event(r, "dr", DecodeReady.newBuilder().setEngineId("decode-0").setInstanceEpoch(1).setLeaseId("lease-" + r).setLeaseEpoch(1)
                        .setDestBlocks(dst).setLeaseDeadlineMs(0).setLayout(layout).build()),
                event(r, "pc", PrefillCompleted.newBuilder().setEngineId("prefill-0").setInstanceEpoch(1).setSourceBlocks(src).setNumTokens(100)
                        .setLayout(layout).build()),
                event(r, "tc", TransferCompleted.newBuilder().setOrderId(r + "/a1").setAttempt(1).setWorkerId("w").setBytes(1 << 20)
                        .setDurationUs(500).build()),
                event(r, "dc", DecodeCompleted.newBuilder().setEngineId("decode-0").setOutputTokens(8).build()));
    }

    private static RequestEvent event(String r, String kind, Object payload) {
        return RequestEvent.newBuilder().setRequestId(r).setEventId(r + "/" + kind).setSource("crash-test")
                .setEventTimeMs(System.currentTimeMillis()).setPayload(payload).build();
    }

    /** {@code orbitkv-pd decider --config …} in its own JVM, from this JVM's class path. */
    private static Process launch(Path dir, Path config, String name) throws IOException {
        return Pipeline.startComponent(name, "decider", config, dir.resolve(name + ".log"), dir.resolve("classpath.args"), "-Xmx384m");
    }
}
