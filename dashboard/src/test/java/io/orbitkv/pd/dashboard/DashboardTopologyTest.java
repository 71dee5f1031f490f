package io.orbitkv.pd.dashboard;

import static io.orbitkv.pd.dashboard.Logs.*;
import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.dashboard.internal.Overview;
import io.orbitkv.pd.dashboard.stats.Aggregate;
import io.orbitkv.pd.dashboard.stats.StatsWindow;
import io.orbitkv.pd.events.DeadLetter;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.WindowStore;
import org.apache.kafka.streams.test.TestRecord;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** Given/when/then scenarios of the dashboard topology in a TopologyTestDriver (one task: partition 0 of both topics). */
class DashboardTopologyTest {

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final long T0 = 1_700_000_040_000L; // a minute boundary: 1 s and 1 min windows start together

    private final EventSerdes serdes = EventSerdes.embedded();
    private final Topics topics = new Topics(TopicsConfig.defaults(), serdes);
    private final DashboardConfig config;
    private final TopologyTestDriver driver;
    private final TestInputTopic<String, Decision> decisions;
    private final TestInputTopic<String, RequestEvent> events;
    private final TestInputTopic<String, byte[]> rawDecisions;
    private final TestOutputTopic<String, DeadLetter> deadLetters;

    DashboardTopologyTest() throws Exception {
        Path state = Files.createTempDirectory("dashboard-ttd");
        config = DashboardConfig.from(ConfigProps.empty().with("bootstrap.servers", "127.0.0.1:9").with("dashboard.order.ttl", "1m")
                .with("dashboard.inflight.ttl", "2m").with("dashboard.failures.kept", "3")).with("dashboard-test", TopicsConfig.defaults(), state, 0);
        driver = new TopologyTestDriver(DashboardTopology.build(config, topics), DashboardApp.streamsProperties(config, "localhost:1"));
        decisions = driver.createInputTopic(topics.decisions().name(), new StringSerializer(), topics.decisions().valueSerde().serializer());
        events = driver.createInputTopic(topics.requestEvents().name(), new StringSerializer(), topics.requestEvents().valueSerde().serializer());
        rawDecisions = driver.createInputTopic(topics.decisions().name(), new StringSerializer(), new ByteArraySerializer());
        deadLetters = driver.createOutputTopic(topics.deadLetters().name(), new StringDeserializer(), topics.deadLetters().valueSerde().deserializer());
    }

    @AfterEach
    void close() {
        driver.close();
        serdes.close();
    }

    private DashboardTopologyTest event(long at, RequestEvent e) {
        events.pipeInput(e.getRequestId(), e, at);
        return this;
    }

    private DashboardTopologyTest decide(long at, Decision d) {
        decisions.pipeInput(d.getRequestId(), d, at);
        return this;
    }

    private Aggregate window(StatsWindow w, String key, long ts) {
        WindowStore<String, Aggregate> store = driver.getWindowStore(w.storeName());
        Aggregate a = store.fetch(key, w.start(ts));
        return a == null ? new Aggregate() : a;
    }

    private Map<String, String> store(String name) {
        KeyValueStore<String, String> s = driver.getKeyValueStore(name);
        Map<String, String> out = new TreeMap<>();
        try (KeyValueIterator<String, String> it = s.all()) {
            it.forEachRemaining(kv -> out.put(kv.key, kv.value));
        }
        return out;
    }

    private ObjectNode overview(StatsWindow w, long from, long to) throws Exception {
        WindowStore<String, Aggregate> store = driver.getWindowStore(w.storeName());
        List<Overview.Partial> partials = new ArrayList<>();
        try (KeyValueIterator<Windowed<String>, Aggregate> it = store.fetchAll(Instant.ofEpochMilli(from), Instant.ofEpochMilli(to - 1))) {
            it.forEachRemaining(kv -> partials.add(new Overview.Partial(kv.key.window().start(), kv.key.key(), kv.value)));
        }
        Map<String, Long> inflight = new TreeMap<>();
        store(DashboardTopology.INFLIGHT_STORE).forEach((k, v) -> {
            if (k.startsWith("engine/")) {
                inflight.put(k.substring("engine/".length()), Long.parseLong(v));
            }
        });
        List<JsonNode> failures = new ArrayList<>();
        for (String f : store(DashboardTopology.FAILURES_STORE).values()) {
            failures.add(JSON.readTree(f));
        }
        return Overview.build(w, from, to, partials, inflight, failures, config.traceCommand(), 10);
    }

    @Test
    void aCompletedHandoffFillsBothWindowSizes() throws Exception {
        // given an admitted request with an order that its worker starts 3 ms later and completes in 20 ms
        event(T0, admitted("r1", PREFILL, DECODE, T0));
        assertThat(overview(StatsWindow.ONE_SECOND, T0, T0 + 1000).at("/engines/prefill-0/in_flight").asLong()).isEqualTo(1);
        decide(T0 + 10, order("r1", 1, PREFILL, DECODE, T0 + 10))
                .event(T0 + 13, started("r1", 1, T0 + 13))
                .event(T0 + 30, completed("r1", 1, 8L << 20, 15_000, T0 + 30))
                // when its outcome arrives in the next second
                .decide(T0 + 1500, outcome("r1", OutcomeKind.COMPLETED, "decode finished", PREFILL, DECODE, T0, 20L, T0 + 1500, 8L << 20));

        // then the 1 s windows hold each fact in the second it happened
        assertThat(window(StatsWindow.ONE_SECOND, "requests", T0).counter("admitted")).isEqualTo(1);
        assertThat(window(StatsWindow.ONE_SECOND, "orders", T0).histogram("decision").percentile(50)).isEqualTo(3_000);
        assertThat(window(StatsWindow.ONE_SECOND, "transfers", T0).counter("bytes")).isEqualTo(8L << 20);
        assertThat(window(StatsWindow.ONE_SECOND, "outcomes", T0).counter("COMPLETED")).isZero();
        Aggregate outcomes = window(StatsWindow.ONE_SECOND, "outcomes", T0 + 1500);
        assertThat(outcomes.counter("COMPLETED")).isEqualTo(1);
        assertThat(outcomes.histogram("handoff").percentile(50)).isEqualTo(20_000);
        assertThat(outcomes.histogram("end_to_end").percentile(50)).isEqualTo(1_500_000);
        assertThat(outcomes.histogram("decode").percentile(50)).isEqualTo(1_470_000);
        assertThat(window(StatsWindow.ONE_SECOND, "engine/decode-0", T0 + 1500).counter("as_decode")).isEqualTo(1);
        // and the 1 min window holds all of it
        Aggregate minute = window(StatsWindow.ONE_MINUTE, "outcomes", T0);
        assertThat(minute).isEqualTo(outcomes);
        // and the request is no longer in flight; its order entry is gone
        assertThat(store(DashboardTopology.INFLIGHT_STORE)).isEmpty();
        assertThat(store(DashboardTopology.ORDERS_STORE)).isEmpty();

        ObjectNode o = overview(StatsWindow.ONE_SECOND, T0, T0 + 2000);
        assertThat(o.at("/totals/outcomes/COMPLETED").asLong()).isEqualTo(1);
        assertThat(o.at("/totals/latency_ms/handoff/p50").asDouble()).isEqualTo(20.0);
        assertThat(o.at("/totals/latency_ms/decision/p99").asDouble()).isEqualTo(3.0);
        assertThat(o.at("/totals/latency_ms/transfer/p50").asDouble()).isCloseTo(15.0, org.assertj.core.data.Percentage.withPercentage(3.2));
        assertThat(o.at("/totals/transfer/gbps").asDouble()).isEqualTo(Math.round((8L << 20) / 2.0 / 1e9 * 1e4) / 1e4);
        assertThat(o.at("/series")).hasSize(2);
        assertThat(o.at("/series/1/handoffs").asLong()).isEqualTo(1);
        assertThat(o.at("/engines/prefill-0/roles").asText()).isEqualTo("prefill");
        assertThat(o.at("/engines/prefill-0/in_flight").asLong()).isZero();
        assertThat(o.at("/failures")).isEmpty();
    }

    @Test
    void anOutcomeReadBeforeItsAdmissionLeavesNothingInFlight() throws Exception {
        // given the decider's outcome processed before the proxy's admission (two topics, read as they arrive)
        decide(T0 + 50, outcome("r9", OutcomeKind.COMPLETED, "decode finished", PREFILL, DECODE, T0, 20L, T0 + 50, 8L << 20));
        event(T0 + 60, admitted("r9", PREFILL, DECODE, T0));
        // then the request is not counted in flight on either engine
        ObjectNode o = overview(StatsWindow.ONE_SECOND, T0, T0 + 1000);
        assertThat(o.at("/engines/prefill-0/in_flight").asLong()).isZero();
        assertThat(o.at("/engines/decode-0/in_flight").asLong()).isZero();
        assertThat(o.at("/totals/admitted").asLong()).isEqualTo(1);
        assertThat(o.at("/totals/outcomes/COMPLETED").asLong()).isEqualTo(1);
    }

    @Test
    void decisionLatencyIsMatchedWhicheverSideIsProcessedFirst() {
        // given the worker's report processed before the order (two partitions of one task)
        event(T0 + 40, started("r2", 1, T0 + 40));
        assertThat(store(DashboardTopology.ORDERS_STORE)).containsKey("r2/a1");
        // when the order arrives
        decide(T0 + 41, order("r2", 1, PREFILL, DECODE, T0 + 25));
        // then the latency is counted once, from the order's stream time to the report
        assertThat(window(StatsWindow.ONE_SECOND, "orders", T0).histogram("decision").count()).isEqualTo(1);
        assertThat(window(StatsWindow.ONE_SECOND, "orders", T0).histogram("decision").percentile(50)).isEqualTo(15_000);
        // and later reports do not count again; the terminal one clears the entry
        event(T0 + 60, completed("r2", 1, 1_000, 100, T0 + 60));
        assertThat(window(StatsWindow.ONE_SECOND, "orders", T0).histogram("decision").count()).isEqualTo(1);
        assertThat(store(DashboardTopology.ORDERS_STORE)).isEmpty();

        // given a worker that started and failed before its order is visible (decisions are read committed)
        event(T0 + 70, started("r7", 1, T0 + 70)).event(T0 + 75, failed("r7", 1, "BUSY: receiver full", true, T0 + 75));
        // when the order arrives
        decide(T0 + 80, order("r7", 1, "prefill-9", DECODE, T0 + 65));
        // then the latency is counted, the failure is put on the source engine, and the entry is gone
        assertThat(window(StatsWindow.ONE_SECOND, "orders", T0).histogram("decision").count()).isEqualTo(2);
        assertThat(window(StatsWindow.ONE_SECOND, "engine/prefill-9", T0).counter("transfer_failed")).isEqualTo(1);
        assertThat(window(StatsWindow.ONE_SECOND, "engine/prefill-9", T0).counter("fail|BUSY")).isEqualTo(1);
        assertThat(store(DashboardTopology.ORDERS_STORE)).isEmpty();
    }

    @Test
    void failuresAreCountedByReasonPerEngineAndListedNewestFirst() throws Exception {
        event(T0, admitted("r3", PREFILL, DECODE, T0));
        decide(T0 + 10, order("r3", 1, PREFILL, DECODE, T0 + 10));
        event(T0 + 20, failed("r3", 1, "PEER_UNREACHABLE: connect to 127.0.0.1:7001 refused", true, T0 + 20));
        decide(T0 + 100, order("r3", 2, PREFILL, DECODE, T0 + 100));
        event(T0 + 120, failed("r3", 2, "STALE_EPOCH: lease r3@1 released", false, T0 + 120));
        RecordHeaders headers = new RecordHeaders();
        headers.add("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".getBytes(StandardCharsets.UTF_8));
        Decision out = outcome("r3", OutcomeKind.FAILED, "transfer failed after 2 attempts: STALE_EPOCH", PREFILL, DECODE, T0, null, T0 + 130, 0);
        decisions.pipeInput(new TestRecord<>("r3", out, headers, T0 + 130));

        ObjectNode o = overview(StatsWindow.ONE_MINUTE, T0, T0 + 60_000);
        assertThat(o.at("/totals/outcomes/FAILED").asLong()).isEqualTo(1);
        assertThat(o.at("/totals/transfer/failed").asLong()).isEqualTo(2);
        assertThat(o.at("/totals/transfer/failed_retriable").asLong()).isEqualTo(1);
        assertThat(o.at("/totals/retries").asLong()).isEqualTo(1);
        assertThat(o.at("/totals/latency_ms/handoff/count").asLong()).isZero();
        assertThat(o.at("/totals/latency_ms/handoff/p50").isNull()).isTrue();
        List<String> reasons = new ArrayList<>();
        o.at("/totals/failures_by_reason").forEach(r -> reasons.add(r.path("source").asText() + "|" + r.path("kind").asText() + "|"
                + r.path("reason").asText() + "=" + r.path("count").asLong()));
        assertThat(reasons).containsExactly("outcome|FAILED|transfer failed after * attempts=1", "transfer|FATAL|STALE_EPOCH=1",
                "transfer|RETRIABLE|PEER_UNREACHABLE=1");
        assertThat(o.at("/engines/prefill-0/transfer_failed").asLong()).isEqualTo(2);
        assertThat(o.at("/engines/prefill-0/not_completed").asLong()).isEqualTo(1);
        assertThat(o.at("/engines/prefill-0/top_failure").asText()).isEqualTo("PEER_UNREACHABLE (1)");
        JsonNode failures = o.at("/failures");
        assertThat(failures).hasSize(3);
        assertThat(failures.get(0).path("source").asText()).isEqualTo("outcome");
        assertThat(failures.get(0).path("trace_id").asText()).isEqualTo("4bf92f3577b34da6a3ce929d0e0e4736");
        assertThat(failures.get(0).path("trace_command").asText()).isEqualTo("./orbitkv-pd trace r3");
        assertThat(failures.get(1).path("kind").asText()).isEqualTo("TRANSFER_FAILED");
        assertThat(failures.get(1).path("attempt").asInt()).isEqualTo(2);
        assertThat(failures.get(2).path("retriable").asBoolean()).isTrue();
    }

    @Test
    void undecodableRecordsAreDeadLetteredAndCountNothing() {
        // given garbage and a tombstone on the decisions topic
        rawDecisions.pipeInput("bad-1", new byte[] {1, 2, 3}, T0);
        rawDecisions.pipeInput("bad-2", (byte[]) null, T0);
        // when a good record follows
        decide(T0 + 1, rejected("r4", T0 + 1));
        // then both bad records are dead letters with their reason, and the good one is counted
        List<KeyValue<String, DeadLetter>> dls = deadLetters.readKeyValuesToList();
        assertThat(dls).extracting(kv -> kv.key).containsExactly("bad-1", "bad-2");
        assertThat(dls).allSatisfy(kv -> {
            assertThat(kv.value.getComponent()).isEqualTo("dashboard");
            assertThat(kv.value.getErrorType()).isEqualTo("UNDECODABLE");
            assertThat(kv.value.getTopic()).isEqualTo(topics.decisions().name());
        });
        assertThat(dls.get(0).value.getReason()).contains("cannot decode record from orbitkv.decisions-0@0");
        assertThat(dls.get(1).value.getReason()).contains("EMPTY");
        assertThat(window(StatsWindow.ONE_SECOND, "inputs", T0 + 1).counter("rejected_inputs")).isEqualTo(1);
    }

    @Test
    void recordsPastTheGraceAreDropped() {
        // given stream time far ahead (both windows of T0 closed: end + 5 s grace passed)
        event(T0 + 120_000, admitted("late-clock", PREFILL, DECODE, T0 + 120_000));
        // when a record of T0 arrives
        event(T0, admitted("r5", PREFILL, DECODE, T0));
        // then no window counts it
        assertThat(window(StatsWindow.ONE_SECOND, "requests", T0).counter("admitted")).isZero();
        assertThat(window(StatsWindow.ONE_MINUTE, "requests", T0).counter("admitted")).isZero();
        // but a record within the grace of an open window is still counted
        event(T0 + 117_000, admitted("r6", PREFILL, DECODE, T0 + 117_000));
        assertThat(window(StatsWindow.ONE_SECOND, "requests", T0 + 117_000).counter("admitted")).isEqualTo(1);
    }

    @Test
    void housekeepingPurgesUnmatchedOrdersStaleInflightAndOldFailures() {
        event(T0, admitted("lost", PREFILL, DECODE, T0));
        decide(T0 + 10, order("never-started", 1, PREFILL, DECODE, T0 + 10));
        for (int i = 0; i < 5; i++) {
            event(T0 + 20 + i, failed("f" + i, 1, "BUSY: try later", true, T0 + 20 + i));
        }
        assertThat(store(DashboardTopology.ORDERS_STORE)).containsKey("never-started/a1");
        // when stream time passes the order and in-flight TTLs (1 and 2 minutes), punctuations run
        event(T0 + 200_000, admitted("fresh", "prefill-1", "decode-1", T0 + 200_000));
        assertThat(store(DashboardTopology.ORDERS_STORE)).doesNotContainKey("never-started/a1");
        assertThat(store(DashboardTopology.INFLIGHT_STORE)).containsOnlyKeys("req/fresh", "engine/prefill-1", "engine/decode-1");
        assertThat(store(DashboardTopology.FAILURES_STORE)).hasSize(3); // dashboard.failures.kept
        assertThat(store(DashboardTopology.FAILURES_STORE).keySet().iterator().next()).contains("/f2/");
    }
}
