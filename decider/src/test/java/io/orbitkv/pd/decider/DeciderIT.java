package io.orbitkv.pd.decider;

import static io.orbitkv.pd.decider.Facts.*;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.testsupport.kafka.WithKafka;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.SerdeConfig;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The decider against a real KRaft broker: restarts (same and empty state directory), two instances with
 * rebalances, interactive queries across instances, and replay of the recorded log reproducing every decision.
 * Each test uses its own topic prefix and application id.
 */
@WithKafka
class DeciderIT {

    private static final AtomicInteger RUN = new AtomicInteger();
    private static KraftCluster cluster;
    private static Path work;

    @BeforeAll
    static void broker(KraftCluster kafka) throws Exception {
        cluster = kafka;
        work = Files.createDirectories(Path.of("target", "it", "DeciderIT-" + System.nanoTime()));
    }

    /** One isolated scenario: its own topics and application id. */
    private static final class Scenario implements AutoCloseable {
        final String prefix = "it" + RUN.incrementAndGet() + "-" + System.nanoTime() % 100000 + ".";
        final EventSerdes serdes = EventSerdes.embedded();
        final Topics topics = new Topics(new TopicsConfig(prefix, 4, (short) 1, Duration.ofHours(1)), serdes);
        final KafkaProducer<String, RequestEvent> producer;
        final KafkaConsumer<byte[], byte[]> consumer;
        final List<Decision> decisions = new ArrayList<>();
        final DeciderPolicy policy;
        final DeciderConfig.Guarantee guarantee;

        /** Default policy: timeouts far longer than a restart, so only the restart itself is under test. */
        Scenario() {
            this(policy());
        }

        Scenario(DeciderPolicy policy) {
            this(policy, DeciderConfig.Guarantee.EXACTLY_ONCE_V2);
        }

        Scenario(DeciderPolicy policy, DeciderConfig.Guarantee guarantee) {
            this.policy = policy;
            this.guarantee = guarantee;
            producer = new KafkaProducer<>(Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, cluster.bootstrapServers(),
                    ProducerConfig.ACKS_CONFIG, "all", ProducerConfig.LINGER_MS_CONFIG, 0), new StringSerializer(),
                    topics.requestEvents().valueSerde().serializer());
            consumer = new KafkaConsumer<>(Map.of(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, cluster.bootstrapServers(),
                    ConsumerConfig.GROUP_ID_CONFIG, prefix + "reader", ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest",
                    ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"), new ByteArrayDeserializer(), new ByteArrayDeserializer());
        }

        DeciderConfig config(String stateDir, int httpPort) {
            return new DeciderConfig(cluster.bootstrapServers(), prefix + "decider", topics.config(), SerdeConfig.embedded(),
                    guarantee, Duration.ofMillis(100), work.resolve(prefix + stateDir),
                    DeciderConfig.StoreKind.ROCKSDB, DeciderConfig.DEFAULT_STORE_WRITE_BEHIND, 1, policy, Duration.ofMillis(100), "127.0.0.1", "", httpPort,
                    Map.of("session.timeout.ms", 6000, "heartbeat.interval.ms", 1000));
        }

        DeciderApp startDecider(String stateDir, int httpPort) throws InterruptedException {
            DeciderApp app = new DeciderApp(config(stateDir, httpPort)).start();
            assertThat(app.awaitRunning(Duration.ofSeconds(60))).as("decider reaches RUNNING").isTrue();
            return app;
        }

        void send(RequestEvent e) {
            producer.send(new ProducerRecord<>(topics.requestEvents().name(), e.getRequestId(), e));
        }

        /** Every fact of a request that completes normally (order ids are deterministic: r/a1). */
        void happyPath(String r) {
            send(admitted(r));
            send(decodeReady(r, run(0, 8)));
            send(prefillCompleted(r, run(100, 8)));
            send(completed(r, 1));
            send(decodeCompleted(r));
        }

        void awaitOutcomes(int n) {
            producer.flush();
            if (consumer.subscription().isEmpty()) {
                consumer.subscribe(List.of(topics.decisions().name()));
            }
            await().atMost(Duration.ofSeconds(90)).until(() -> {
                for (ConsumerRecord<byte[], byte[]> rec : consumer.poll(Duration.ofMillis(200))) {
                    decisions.add(topics.decisions().valueSerde().deserializer().deserialize(rec.topic(), rec.value()));
                }
                return decisions.stream().filter(d -> d.getPayload() instanceof RequestOutcome).map(Decision::getRequestId).distinct().count() >= n;
            });
        }

        /**
         * Invariants over the decisions read with read_committed: nothing lost, nothing decided twice. Under
         * at-least-once a decision may be read twice after a restart, always with the same id and content (actors
         * dedupe by id), so copies are removed first, and only exact copies.
         */
        void assertEachCompletedOnce(int n) {
            Map<String, Decision> byId = new java.util.LinkedHashMap<>();
            for (Decision d : decisions) {
                Decision first = byId.putIfAbsent(d.getDecisionId(), d);
                if (first != null) {
                    assertThat(guarantee).as("a decision read twice: %s", d.getDecisionId()).isEqualTo(DeciderConfig.Guarantee.AT_LEAST_ONCE);
                    assertThat(d).as("a repeated decision is an exact copy").isEqualTo(first);
                }
            }
            Map<String, List<Decision>> byRequest = new TreeMap<>();
            byId.values().forEach(d -> byRequest.computeIfAbsent(d.getRequestId(), k -> new ArrayList<>()).add(d));
            assertThat(byRequest).hasSize(n);
            byRequest.forEach((r, ds) -> {
                assertThat(ds).extracting(Decision::getDecisionId).doesNotHaveDuplicates();
                assertThat(ds).extracting(Decision::getSeq).containsExactlyElementsOf(java.util.stream.IntStream.range(0, ds.size()).boxed().toList());
                // one attempt: its order, or (decider.order-ahead) its order ahead of the prefill and the copy with the source pages
                List<TransferOrder> orders = ds.stream().map(Decision::getPayload).filter(TransferOrder.class::isInstance)
                        .map(TransferOrder.class::cast).toList();
                assertThat(orders).as("orders of %s", r).extracting(TransferOrder::getAttempt).containsOnly(1);
                assertThat(orders).as("orders of %s", r).filteredOn(o -> !o.getAwaitPrefill()).hasSize(1);
                assertThat(orders).as("orders of %s", r).filteredOn(TransferOrder::getAwaitPrefill).hasSizeLessThanOrEqualTo(1);
                assertThat(ds.stream().filter(d -> d.getPayload() instanceof ReleaseDecided)).as("releases of %s", r).hasSize(2);
                List<RequestOutcome> outcomes = ds.stream().map(Decision::getPayload).filter(RequestOutcome.class::isInstance)
                        .map(RequestOutcome.class::cast).toList();
                assertThat(outcomes).as("outcomes of %s", r).hasSize(1);
                assertThat(outcomes.get(0).getKind()).isEqualTo(OutcomeKind.COMPLETED);
            });
        }

        @Override
        public void close() {
            producer.close();
            consumer.close();
            serdes.close();
        }
    }

    @Test
    void restartWithTheSameStateDirLosesNothingAndDecidesNothingTwice() throws Exception {
        try (Scenario s = new Scenario()) {
            DeciderApp app = s.startDecider("state-a", -1);
            for (int i = 0; i < 150; i++) {
                s.happyPath("r" + i);
            }
            s.awaitOutcomes(40);
            app.close(); // mid-run: facts of the first half are still being processed
            for (int i = 150; i < 300; i++) {
                s.happyPath("r" + i);
            }
            try (DeciderApp again = s.startDecider("state-a", -1)) {
                s.awaitOutcomes(300);
                s.assertEachCompletedOnce(300);
            }
        }
    }

    /**
     * At-least-once with the default clients (the producer flushed once per commit, by the main consumer before it
     * commits offsets; states written behind between commits): stopped mid-run and restarted on an empty state dir,
     * it restores from the changelog and the committed offsets, and every request still ends exactly once.
     */
    @Test
    void atLeastOnceRestartMidRunOnAnEmptyStateDirLosesNothing() throws Exception {
        try (Scenario s = new Scenario(policy(), DeciderConfig.Guarantee.AT_LEAST_ONCE)) {
            DeciderApp app = s.startDecider("state-a", -1);
            for (int i = 0; i < 150; i++) {
                s.happyPath("r" + i);
            }
            s.awaitOutcomes(40);
            app.close();
            for (int i = 150; i < 300; i++) {
                s.happyPath("r" + i);
            }
            try (DeciderApp fresh = s.startDecider("state-b", -1)) {
                s.awaitOutcomes(300);
                s.assertEachCompletedOnce(300);
            }
        }
    }

    @Test
    void restartWithAnEmptyStateDirRestoresFromTheChangelog() throws Exception {
        try (Scenario s = new Scenario()) {
            DeciderApp app = s.startDecider("state-a", -1);
            for (int i = 0; i < 100; i++) {
                String r = "r" + i;
                s.send(admitted(r));
                s.send(decodeReady(r, run(0, 8)));
                s.send(prefillCompleted(r, run(100, 8)));
            }
            s.producer.flush();
            await().atMost(Duration.ofSeconds(60)).until(() -> {
                for (ConsumerRecord<byte[], byte[]> rec : pollDecisions(s)) {
                    s.decisions.add(s.topics.decisions().valueSerde().deserializer().deserialize(rec.topic(), rec.value()));
                }
                return s.decisions.stream().filter(d -> d.getPayload() instanceof TransferOrder).count() >= 100;
            });
            app.close();
            // A fresh instance on another machine: nothing local, everything from the changelog.
            try (DeciderApp fresh = s.startDecider("state-b", -1)) {
                for (int i = 0; i < 100; i++) {
                    s.send(completed("r" + i, 1));
                    s.send(decodeCompleted("r" + i));
                }
                s.awaitOutcomes(100);
                s.assertEachCompletedOnce(100);
            }
        }
    }

    private static List<ConsumerRecord<byte[], byte[]>> pollDecisions(Scenario s) {
        if (s.consumer.subscription().isEmpty()) {
            s.consumer.subscribe(List.of(s.topics.decisions().name()));
        }
        List<ConsumerRecord<byte[], byte[]>> out = new ArrayList<>();
        s.consumer.poll(Duration.ofMillis(200)).forEach(out::add);
        return out;
    }

    @Test
    void twoInstancesShareTheWorkAcrossRebalancesAndAnswerQueriesForEachOther() throws Exception {
        try (Scenario s = new Scenario()) {
            DeciderApp a = s.startDecider("state-a", 0);
            for (int i = 0; i < 100; i++) {
                s.happyPath("r" + i);
            }
            DeciderApp b = s.startDecider("state-b", 0); // rebalance while facts flow
            for (int i = 100; i < 200; i++) {
                s.happyPath("r" + i);
            }
            s.awaitOutcomes(200);
            await().atMost(Duration.ofSeconds(60)).until(() -> a.streams().metadataForAllStreamsClients().size() == 2
                    && a.streams().state() == org.apache.kafka.streams.KafkaStreams.State.RUNNING
                    && b.streams().state() == org.apache.kafka.streams.KafkaStreams.State.RUNNING);
            // Interactive queries: counts summed over both instances, any request answered by either.
            HttpClient http = HttpClient.newHttpClient();
            await().atMost(Duration.ofSeconds(30)).untilAsserted(() -> {
                String states = http.send(HttpRequest.newBuilder(URI.create(a.httpUrl() + "/states")).build(),
                        HttpResponse.BodyHandlers.ofString()).body();
                assertThat(states).contains("\"COMPLETED\":200");
            });
            for (String r : List.of("r1", "r57", "r123", "r199")) {
                HttpResponse<String> viaB = http.send(HttpRequest.newBuilder(URI.create(b.httpUrl() + "/requests/" + r)).build(),
                        HttpResponse.BodyHandlers.ofString());
                assertThat(viaB.statusCode()).isEqualTo(200);
                assertThat(viaB.body()).contains("\"request_id\": \"" + r + "\"").contains("COMPLETED");
            }
            a.close(); // and another rebalance: b takes everything
            for (int i = 200; i < 300; i++) {
                s.happyPath("r" + i);
            }
            s.awaitOutcomes(300);
            b.close();
            s.assertEachCompletedOnce(300);
        }
    }

    /**
     * One instance that takes connections and never answers (a hung host): the other's {@code /engines} answers within
     * the forward timeout with its own part (the silent one named in a header), and its liveness probe answers at once
     * while such queries are in flight. Both used to wait 5 s per call on the two threads that also answer health probes.
     */
    @Test
    void aSilentInstanceNeitherFailsTheSumsNorHoldsTheHealthProbes() throws Exception {
        try (Scenario s = new Scenario()) {
            DeciderApp a = s.startDecider("state-a", 0);
            DeciderApp b = s.startDecider("state-b", 0);
            for (int i = 0; i < 20; i++) {
                s.happyPath("s" + i);
            }
            s.awaitOutcomes(20);
            await().atMost(Duration.ofSeconds(60)).until(() -> a.streams().metadataForAllStreamsClients().size() == 2
                    && a.streams().state() == org.apache.kafka.streams.KafkaStreams.State.RUNNING
                    && b.streams().state() == org.apache.kafka.streams.KafkaStreams.State.RUNNING);
            URI bUrl = URI.create(b.httpUrl());
            b.httpEndpoint().close();
            try (java.net.ServerSocket silent = new java.net.ServerSocket()) {
                silent.setReuseAddress(true);
                silent.bind(new java.net.InetSocketAddress(bUrl.getHost(), bUrl.getPort()), 50);
                List<java.net.Socket> held = new java.util.concurrent.CopyOnWriteArrayList<>();
                Thread.ofVirtual().start(() -> {
                    try {
                        while (true) {
                            held.add(silent.accept()); // taken, never answered
                        }
                    } catch (java.io.IOException closed) {
                        // the test is over
                    }
                });
                HttpClient http = HttpClient.newHttpClient();
                List<java.util.concurrent.CompletableFuture<HttpResponse<String>>> sums = new java.util.ArrayList<>();
                long t0 = System.nanoTime();
                for (int i = 0; i < 4; i++) {
                    sums.add(http.sendAsync(HttpRequest.newBuilder(URI.create(a.httpUrl() + "/engines")).build(), HttpResponse.BodyHandlers.ofString()));
                }
                await().atMost(Duration.ofSeconds(2)).until(() -> held.size() >= 2); // fan-outs are waiting on the silent instance
                long p0 = System.nanoTime();
                HttpResponse<String> live = http.send(HttpRequest.newBuilder(URI.create(a.httpUrl() + "/health/live"))
                        .timeout(Duration.ofSeconds(4)).build(), HttpResponse.BodyHandlers.ofString());
                assertThat(live.statusCode()).isEqualTo(200);
                assertThat((System.nanoTime() - p0) / 1e9).as("the liveness probe waits behind no query").isLessThan(1.0);
                for (var f : sums) {
                    HttpResponse<String> r = f.get(10, java.util.concurrent.TimeUnit.SECONDS);
                    assertThat(r.statusCode()).isEqualTo(200);
                    assertThat(r.headers().firstValue("x-orbitkv-unreachable-instances")).hasValueSatisfying(v -> assertThat(v)
                            .contains(":" + bUrl.getPort()));
                }
                assertThat((System.nanoTime() - t0) / 1e9).as("every sum within the forward timeout, not 5 s each").isLessThan(4.0);
            }
        }
    }

    @Test
    void replayingTheRecordedLogIntoAFreshDeciderReproducesEveryDecision() throws Exception {
        try (Scenario s = new Scenario(fastPolicy()); DeciderApp app = s.startDecider("state-a", -1)) {
            for (int i = 0; i < 60; i++) {
                s.happyPath("ok" + i);
            }
            for (int i = 0; i < 20; i++) { // cancelled during the transfer
                String r = "cx" + i;
                s.send(admitted(r));
                s.send(decodeReady(r, run(0, 4)));
                s.send(prefillCompleted(r, run(10, 4)));
                s.send(cancel(r));
                s.send(failed(r, 1, false));
            }
            for (int i = 0; i < 20; i++) { // prefill never comes: times out by stream time carried by the live ticks
                String r = "to" + i;
                s.send(admitted(r));
                s.send(decodeReady(r, run(0, 4)));
            }
            s.awaitOutcomes(100);
            // Let the tail of decisions (releases after drains) settle, then read the recorded log.
            await().atMost(Duration.ofSeconds(30)).until(() -> {
                int before = s.decisions.size();
                pollDecisions(s).forEach(rec -> s.decisions.add(s.topics.decisions().valueSerde().deserializer().deserialize(rec.topic(), rec.value())));
                return s.decisions.size() == before && s.decisions.stream().filter(d -> d.getPayload() instanceof ReleaseDecided).count() >= 60 * 2 + 20 * 2 + 20;
            });
            Map<Integer, List<ConsumerRecord<byte[], byte[]>>> log = readAll(s.topics.requestEvents().name(), 4);
            Map<Integer, List<ConsumerRecord<byte[], byte[]>>> recorded = readAll(s.topics.decisions().name(), 4);
            int compared = 0;
            for (int p = 0; p < 4; p++) {
                List<Decision> replayed = DeciderReplay.replayPartition(s.policy, s.topics, log.get(p));
                List<Decision> live = recorded.get(p).stream()
                        .map(r -> s.topics.decisions().valueSerde().deserializer().deserialize(r.topic(), r.value())).toList();
                // The live run may have decided a little further than the records replayed (timers after the last read).
                assertThat(replayed).as("partition %d", p).startsWith(live.toArray(Decision[]::new));
                compared += live.size();
            }
            assertThat(compared).isEqualTo(s.decisions.size());
        }
    }

    private static Map<Integer, List<ConsumerRecord<byte[], byte[]>>> readAll(String topic, int partitions) {
        Map<Integer, List<ConsumerRecord<byte[], byte[]>>> out = new HashMap<>();
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(Map.of(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, cluster.bootstrapServers(),
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"), new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> tps = java.util.stream.IntStream.range(0, partitions).mapToObj(p -> new TopicPartition(topic, p)).toList();
            c.assign(tps);
            c.seekToBeginning(tps);
            Map<TopicPartition, Long> end = c.endOffsets(tps);
            tps.forEach(tp -> out.put(tp.partition(), new ArrayList<>()));
            await().atMost(Duration.ofSeconds(30)).until(() -> {
                c.poll(Duration.ofMillis(200)).forEach(r -> out.get(r.partition()).add(r));
                return tps.stream().allMatch(tp -> c.position(tp) >= end.get(tp));
            });
        }
        out.values().forEach(l -> l.sort(Comparator.comparingLong(ConsumerRecord::offset)));
        return out;
    }
}
