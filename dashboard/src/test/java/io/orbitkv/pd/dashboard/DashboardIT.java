package io.orbitkv.pd.dashboard;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.decider.DeciderApp;
import io.orbitkv.pd.decider.DeciderConfig;
import io.orbitkv.pd.decider.DeciderPolicy;
import io.orbitkv.pd.events.DeadLetter;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.schemas.SerdeConfig;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.schemas.config.ConfigProps;
import io.orbitkv.pd.testsupport.kafka.WithKafka;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KafkaStreams;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

/**
 * The dashboard during a real run: a real KRaft broker, the real decider deciding a workload of 1,000 handoffs with
 * every outcome kind, two dashboard instances sharing the partitions. Checks that the aggregates equal what the
 * workload did and the decider decided, that both instances answer the same (cross-instance queries), that a real
 * headless Chromium renders exactly the aggregates of the API, that Prometheus exposes the histograms, and that bad
 * input is dead-lettered without stopping anything. Writes {@code target/dashboard-it/dashboard.png} (and to the path
 * in {@code -Ddashboard.screenshot} if set: that is how {@code docs/dashboard.png} is made).
 */
@WithKafka
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class DashboardIT {

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final int REQUESTS = 1_000;
    private static final int RATE = 100;
    private static final HttpClient HTTP = HttpClient.newHttpClient();

    private static KraftCluster cluster;
    private static Path work;
    private static TopicsConfig topics;
    private static DeciderApp decider;
    private static DashboardApp a;
    private static DashboardApp b;
    private static Workload workload;
    private static long runStarted;

    @BeforeAll
    static void run(KraftCluster kafka) throws Exception {
        cluster = kafka;
        work = Files.createDirectories(Path.of("target", "dashboard-it").toAbsolutePath());
        topics = new TopicsConfig("dit" + System.nanoTime() % 100000 + ".", 6, (short) 1, Duration.ofHours(1));
        DeciderPolicy d = DeciderPolicy.defaults("dashboard-it-auth-key-0123456789".getBytes(StandardCharsets.UTF_8));
        DeciderPolicy policy = new DeciderPolicy(Duration.ofSeconds(2), d.decodeReadyTimeout(), d.transferTimeout(), d.leaseDuration(),
                d.admissionGrace(), d.drainGrace(), d.retention(), d.maxAttempts(), d.backoffBase(), d.backoffMax(), d.maxRuns(),
                d.historyLimit(), d.authKey());
        decider = new DeciderApp(new DeciderConfig(kafka.bootstrapServers(), "dit-decider", topics, SerdeConfig.embedded(),
                DeciderConfig.Guarantee.EXACTLY_ONCE_V2, Duration.ofMillis(100), Files.createDirectories(work.resolve("decider")),
                DeciderConfig.StoreKind.IN_MEMORY, DeciderConfig.DEFAULT_STORE_WRITE_BEHIND, 1, policy, Duration.ofMillis(200), "127.0.0.1", "", -1, Map.of())).start();
        a = new DashboardApp(dashboardConfig("a")).start();
        b = new DashboardApp(dashboardConfig("b")).start();
        assertThat(decider.awaitRunning(Duration.ofSeconds(90))).isTrue();
        assertThat(a.awaitRunning(Duration.ofSeconds(90))).isTrue();
        assertThat(b.awaitRunning(Duration.ofSeconds(90))).isTrue();

        workload = new Workload(kafka.bootstrapServers(), decider.topics());
        runStarted = System.currentTimeMillis();
        workload.run("req-", REQUESTS, RATE);
        await("every request reaches its outcome").atMost(Duration.ofSeconds(90)).pollInterval(Duration.ofMillis(200))
                .until(() -> workload.outcomes() == REQUESTS);
        // the numbers settle: both instances have consumed every outcome and every transfer report
        await("the dashboard has counted the whole run").atMost(Duration.ofSeconds(60)).pollInterval(Duration.ofMillis(300))
                .until(() -> {
                    JsonNode o = overview(a, "window=1m&span=10");
                    return o.at("/totals/handoffs").asLong() == REQUESTS && o.at("/totals/transfer/completed").asLong() == workload.transfersCompleted.get()
                            && o.at("/totals/transfer/failed").asLong() == workload.transfersFailed.get()
                            && o.at("/totals/latency_ms/decision/count").asLong() == workload.orders.get();
                });
    }

    private static DashboardConfig dashboardConfig(String instance) throws Exception {
        return DashboardConfig.from(ConfigProps.empty().with("bootstrap.servers", cluster.bootstrapServers())
                .with("dashboard.application.id", "dit-dashboard").with("topics.prefix", topics.prefix())
                .with("topics.partitions", "6").with("topics.retention", "1h")
                .with("dashboard.state.dir", Files.createDirectories(work.resolve("state-" + instance)).toString())
                .with("dashboard.http.port", "0").with("dashboard.poll.interval", "500ms"));
    }

    @AfterAll
    static void stop() throws Exception {
        for (AutoCloseable c : new AutoCloseable[] {workload, a, b, decider}) {
            if (c != null) {
                c.close();
            }
        }
    }

    static JsonNode overview(DashboardApp app, String query) throws Exception {
        HttpResponse<String> r = HTTP.send(HttpRequest.newBuilder(URI.create(app.url() + "api/overview?" + query)).build(),
                HttpResponse.BodyHandlers.ofString());
        assertThat(r.statusCode()).as(r.body()).isEqualTo(200);
        return JSON.readTree(r.body());
    }

    private static String get(String url) throws Exception {
        return HTTP.send(HttpRequest.newBuilder(URI.create(url)).build(), HttpResponse.BodyHandlers.ofString()).body();
    }

    @Test
    @Order(1)
    void aggregatesEqualWhatTheWorkloadDidAndTheDeciderDecided() throws Exception {
        // the workload itself reached the outcome each scenario must reach (the decider decided them)
        workload.outcomeOf.forEach((req, kind) -> assertThat(kind).as(req).isEqualTo(Workload.expected(workload.scenarios.get(req))));

        JsonNode o = overview(a, "window=1m&span=10");
        JsonNode t = o.path("totals");
        assertThat(t.path("admitted").asLong()).isEqualTo(REQUESTS);
        for (OutcomeKind k : List.of(OutcomeKind.COMPLETED, OutcomeKind.CANCELLED, OutcomeKind.TIMED_OUT, OutcomeKind.FAILED)) {
            assertThat(t.at("/outcomes/" + k).asLong()).as(k.name()).isEqualTo(workload.outcome(k));
        }
        assertThat(t.at("/outcomes/COMPLETED").asLong()).isEqualTo(REQUESTS * 16 / 20);
        assertThat(t.path("kv_bytes").asLong()).isEqualTo(workload.kvBytes.get());
        assertThat(t.at("/transfer/bytes").asLong()).isEqualTo(workload.transferBytes.get());
        assertThat(t.at("/transfer/failed_retriable").asLong()).isEqualTo(workload.transfersFailedRetriable.get());
        assertThat(t.path("orders").asLong()).isEqualTo(workload.orders.get());
        assertThat(t.path("retries").asLong()).isEqualTo(workload.retries.get()).isEqualTo(REQUESTS * 2 / 20);
        assertThat(t.at("/latency_ms/handoff/count").asLong()).isEqualTo(workload.outcome(OutcomeKind.COMPLETED));
        assertThat(t.at("/latency_ms/transfer/count").asLong()).isEqualTo(workload.transfersCompleted.get());
        assertThat(t.at("/latency_ms/end_to_end/count").asLong()).isEqualTo(workload.outcome(OutcomeKind.COMPLETED));
        // a handoff contains its transfer: its median is at least the transfer's
        assertThat(t.at("/latency_ms/handoff/p50").asDouble()).isGreaterThanOrEqualTo(t.at("/latency_ms/transfer/p50").asDouble() * 0.9);
        assertThat(t.at("/latency_ms/handoff/p99").asDouble()).isGreaterThanOrEqualTo(t.at("/latency_ms/handoff/p50").asDouble());
        assertThat(t.at("/transfer/gbps_while_transferring").asDouble()).isCloseTo(2.0, org.assertj.core.data.Offset.offset(0.2));
        List<String> reasons = new ArrayList<>();
        t.path("failures_by_reason").forEach(r -> reasons.add(r.path("source").asText() + "|" + r.path("kind").asText() + "|"
                + r.path("reason").asText() + "=" + r.path("count").asLong()));
        assertThat(reasons).contains("transfer|RETRIABLE|PEER_UNREACHABLE=" + REQUESTS * 2 / 20, "transfer|FATAL|STALE_EPOCH=" + REQUESTS / 20,
                "outcome|CANCELLED|client disconnected (by client)=" + REQUESTS / 20);
        long engineHandoffs = 0;
        long engineTransferFailures = 0;
        for (int i = 0; i < Workload.ENGINES; i++) {
            JsonNode e = o.at("/engines/prefill-" + i);
            assertThat(e.path("roles").asText()).isEqualTo("prefill");
            assertThat(e.path("in_flight").asLong()).isZero();
            engineHandoffs += e.path("handoffs").asLong();
            engineTransferFailures += e.path("transfer_failed").asLong();
        }
        assertThat(engineHandoffs).isEqualTo(REQUESTS);
        assertThat(engineTransferFailures).isEqualTo(workload.transfersFailed.get());
        assertThat(o.path("failures")).hasSize(25);
        assertThat(o.at("/failures/0/trace_command").asText()).startsWith("./orbitkv-pd trace req-");
        assertThat(o.path("instances")).hasSize(2);
        assertThat(o.path("partial").asBoolean()).isFalse();

        // measured, not asserted: CPU of the stream threads per handoff, the dashboard's (both instances) next to the decider's
        java.lang.management.ThreadMXBean mx = java.lang.management.ManagementFactory.getThreadMXBean();
        long dashboardNs = 0;
        long deciderNs = 0;
        for (java.lang.management.ThreadInfo ti : mx.getThreadInfo(mx.getAllThreadIds())) {
            if (ti != null && ti.getThreadName().contains("StreamThread")) {
                long cpu = mx.getThreadCpuTime(ti.getThreadId());
                if (ti.getThreadName().startsWith("dit-dashboard")) {
                    dashboardNs += cpu;
                } else if (ti.getThreadName().startsWith("dit-decider")) {
                    deciderNs += cpu;
                }
            }
        }
        String cpu = String.format("stream-thread CPU per handoff over the whole run (%d handoffs, ~%d records each): dashboard %.0f us "
                + "(two instances), decider %.0f us%n", REQUESTS, 12, dashboardNs / 1e3 / REQUESTS, deciderNs / 1e3 / REQUESTS);
        Files.writeString(work.resolve("cpu.txt"), cpu);
        System.out.print(cpu);

        // the other instance gives the same answer (each holds half the partitions; the query fans out to both)
        JsonNode fromB = overview(b, "window=1m&from=" + o.path("from").asLong() + "&to=" + o.path("to").asLong());
        for (String part : List.of("totals", "series", "engines", "failures")) {
            assertThat(fromB.path(part)).as(part).isEqualTo(o.path(part));
        }
        // and the 1 s windows add up to the 1 min windows
        JsonNode seconds = overview(a, "window=1s&from=" + (runStarted - 5_000) + "&to=" + System.currentTimeMillis());
        long sum = 0;
        for (JsonNode p : seconds.path("series")) {
            sum += p.path("handoffs").asLong();
        }
        assertThat(sum).isEqualTo(REQUESTS);
        assertThat(seconds.at("/totals/transfer/bytes").asLong()).isEqualTo(workload.transferBytes.get());
        assertThat(seconds.at("/totals/latency_ms/handoff")).isEqualTo(t.at("/latency_ms/handoff"));
    }

    @Test
    @Order(2)
    void headlessChromiumShowsExactlyTheAggregates() throws Exception {
        StringBuilder why = new StringBuilder();
        Optional<Path> browser = Chromium.locateOrInstall(why);
        Assumptions.assumeTrue(browser.isPresent(), "chromium is not on PATH and 'apt-get install -y chromium' failed (" + why
                + "): the page is not checked in a browser on this machine");
        try (Chromium chrome = new Chromium(browser.get(), work.resolve("chromium-profile"), work.resolve("chromium.log"))) {
            for (String view : List.of("window=1m&span=10", "window=1s&span=120")) {
                chrome.open(a.url() + "?" + view);
                await("the page rendered the API twice (" + view + ")").atMost(Duration.ofSeconds(60)).pollInterval(Duration.ofMillis(200))
                        .until(() -> chrome.eval("Number(document.body.dataset.updates || 0)").asInt() >= 2);
                JsonNode shown = chrome.eval("JSON.stringify({from: document.body.dataset.from, to: document.body.dataset.to, "
                        + "metrics: [...document.querySelectorAll('[data-metric]')].map(e => ({m: e.dataset.metric, v: e.dataset.value, "
                        + "s: e.dataset.scale, t: e.textContent}))})");
                JsonNode page = JSON.readTree(shown.asText());
                String window = view.substring("window=".length(), view.indexOf('&'));
                JsonNode api = overview(a, "window=" + window + "&from=" + page.path("from").asText() + "&to=" + page.path("to").asText());
                Files.writeString(work.resolve("page-" + window + ".json"), page.toPrettyString());
                int checked = checkPageAgainstApi(page.path("metrics"), api);
                assertThat(checked).as("numbers checked on the " + view + " page").isGreaterThan(150);
                if (window.equals("1s")) {
                    chrome.screenshot(work.resolve("dashboard.png"));
                    String copy = System.getProperty("dashboard.screenshot");
                    if (copy != null && !copy.isBlank()) {
                        Files.copy(work.resolve("dashboard.png"), Path.of(copy), java.nio.file.StandardCopyOption.REPLACE_EXISTING);
                    }
                }
            }
        }
        assertThat(Files.size(work.resolve("dashboard.png"))).isGreaterThan(20_000);
    }

    private static final Pattern NUMBER = Pattern.compile("-?[0-9][0-9,]*(\\.[0-9]+)?");

    /** Every number and text the page shows equals the API's value at the same JSON pointer; returns how many were checked. */
    private static int checkPageAgainstApi(JsonNode metrics, JsonNode api) {
        List<String> seen = new ArrayList<>();
        for (JsonNode m : metrics) {
            String pointer = "/" + m.path("m").asText();
            JsonNode expected = api.at(pointer);
            String value = m.path("v").asText();
            String text = m.path("t").asText();
            seen.add(pointer);
            assertThat(expected.isMissingNode()).as("page shows %s, which the API does not have", pointer).isFalse();
            if (expected.isNull()) {
                assertThat(value).as(pointer).isEqualTo("null");
                assertThat(text).as(pointer).isEqualTo("–");
            } else if (expected.isNumber()) {
                assertThat(Double.parseDouble(value)).as(pointer + " data-value").isEqualTo(expected.asDouble());
                Matcher n = NUMBER.matcher(text);
                assertThat(n.find()).as(pointer + " shows a number: '" + text + "'").isTrue();
                double shown = Double.parseDouble(n.group().replace(",", ""));
                double scale = Double.parseDouble(m.path("s").asText());
                int decimals = n.group(1) == null ? 0 : n.group(1).length() - 1;
                double tolerance = 0.5 * Math.pow(10, -decimals) * scale + 1e-9;
                assertThat(Math.abs(shown * scale - expected.asDouble())).as(pointer + " shown as '" + text + "'").isLessThanOrEqualTo(tolerance);
            } else {
                assertThat(value).as(pointer).isEqualTo(expected.asText());
                assertThat(text).as(pointer).isEqualTo(expected.asText());
            }
        }
        assertThat(seen).contains("/totals/outcomes/COMPLETED", "/totals/handoffs_per_s", "/totals/latency_ms/handoff/p99",
                "/totals/latency_ms/decision/p50", "/totals/transfer/gbps", "/engines/prefill-0/in_flight", "/engines/decode-2/handoff_p99");
        if (api.path("failures").size() > 0) {
            assertThat(seen).contains("/failures/0/trace_command", "/failures/0/request_id");
        }
        return seen.size();
    }

    @Test
    @Order(3)
    void prometheusExposesHistogramsWhoseCountsAddUpAcrossInstances() throws Exception {
        long handoffs = 0;
        long transfers = 0;
        for (DashboardApp app : List.of(a, b)) {
            String text = get(app.url() + "metrics");
            assertThat(text).contains("orbitkv_handoff_phase_seconds_bucket{component=\"dashboard\"", "orbitkv_decision_latency_seconds_bucket",
                    "orbitkv_transfer_size_bytes_bucket", "orbitkv_outcomes_total", "kafka_stream_");
            handoffs += sample(text, "orbitkv_handoff_phase_seconds_count", "phase=\"handoff\"");
            transfers += sample(text, "orbitkv_transfer_duration_seconds_count", "transport=\"tcp\"");
        }
        assertThat(handoffs).isEqualTo(workload.outcome(OutcomeKind.COMPLETED));
        assertThat(transfers).isEqualTo(workload.transfersCompleted.get());
    }

    private static long sample(String text, String name, String label) {
        return text.lines().filter(l -> l.startsWith(name + "{") && l.contains(label))
                .mapToLong(l -> (long) Double.parseDouble(l.substring(l.lastIndexOf(' ') + 1))).sum();
    }

    @Test
    @Order(4)
    void undecodableRecordsAreDeadLetteredAndNothingStops() throws Exception {
        try (KafkaProducer<String, byte[]> p = new KafkaProducer<>(Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, cluster.bootstrapServers()),
                new StringSerializer(), new ByteArraySerializer());
             KafkaConsumer<String, DeadLetter> dlq = new KafkaConsumer<>(Map.of(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, cluster.bootstrapServers(),
                     ConsumerConfig.GROUP_ID_CONFIG, "dit-dlq", ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest"),
                     new StringDeserializer(), a.topics().deadLetters().valueSerde().deserializer())) {
            p.send(new ProducerRecord<>(a.topics().decisions().name(), "garbage-1", "not an event".getBytes(StandardCharsets.UTF_8))).get();
            dlq.subscribe(List.of(a.topics().deadLetters().name()));
            List<DeadLetter> found = new ArrayList<>();
            await("the dashboard dead-letters the record").atMost(Duration.ofSeconds(30)).until(() -> {
                for (ConsumerRecord<String, DeadLetter> r : dlq.poll(Duration.ofMillis(200))) {
                    if (r.value().getComponent().equals("dashboard")) {
                        found.add(r.value());
                    }
                }
                return !found.isEmpty();
            });
            assertThat(found.getFirst().getErrorType()).isEqualTo("UNDECODABLE");
            assertThat(found.getFirst().getTopic()).isEqualTo(a.topics().decisions().name());
        }
        await().atMost(Duration.ofSeconds(10)).until(() -> sample(get(a.url() + "metrics") + get(b.url() + "metrics"),
                "orbitkv_dashboard_rejected_total", "UNDECODABLE") == 1);
        assertThat(a.streams().state()).isEqualTo(KafkaStreams.State.RUNNING);
        assertThat(b.streams().state()).isEqualTo(KafkaStreams.State.RUNNING);
        assertThat(overview(a, "window=1m&span=10").at("/totals/handoffs").asLong()).isEqualTo(REQUESTS);
    }
}
