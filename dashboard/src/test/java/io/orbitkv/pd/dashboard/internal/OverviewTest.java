package io.orbitkv.pd.dashboard.internal;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.dashboard.stats.Aggregate;
import io.orbitkv.pd.dashboard.stats.StatsWindow;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

class OverviewTest {

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final long T0 = 1_700_000_040_000L;

    /** Random partials as 6 tasks would write them over 10 seconds. */
    private static List<Overview.Partial> tasks(long seed) {
        SplittableRandom rnd = new SplittableRandom(seed);
        List<Overview.Partial> out = new ArrayList<>();
        for (int task = 0; task < 6; task++) {
            for (int s = 0; s < 10; s++) {
                Aggregate outcomes = new Aggregate().add("COMPLETED", rnd.nextInt(50)).add("FAILED", rnd.nextInt(3)).add("kv_bytes", rnd.nextLong(1L << 30));
                Aggregate transfers = new Aggregate().add("completed", 10).add("bytes", rnd.nextLong(1L << 30));
                for (int i = 0; i < 20; i++) {
                    outcomes.record("handoff", rnd.nextLong(200, 90_000));
                    transfers.record("duration", rnd.nextLong(1_000, 50_000));
                }
                Aggregate engine = new Aggregate().add("as_prefill", 5).add("COMPLETED", 5).record("handoff", rnd.nextLong(200, 90_000));
                long start = T0 + s * 1000L;
                out.add(new Overview.Partial(start, "outcomes", outcomes));
                out.add(new Overview.Partial(start, "transfers", transfers));
                out.add(new Overview.Partial(start, "engine/prefill-" + task % 2, engine));
            }
        }
        return out;
    }

    @Test
    void mergingPartialsAcrossInstancesGivesTheSameAnswerAsOneInstance() {
        List<Overview.Partial> all = tasks(1);
        // instance A holds tasks 0-2, instance B tasks 3-5: the fan-out concatenates, in whatever order they answer
        List<Overview.Partial> fanOut = new ArrayList<>(all.subList(all.size() / 2, all.size()));
        fanOut.addAll(all.subList(0, all.size() / 2));
        // and the merged per-window aggregates (what one instance owning every task would hold)
        java.util.Map<String, Aggregate> merged = new java.util.TreeMap<>();
        for (Overview.Partial p : all) {
            merged.computeIfAbsent(p.start() + "|" + p.key(), k -> new Aggregate()).merge(p.aggregate());
        }
        List<Overview.Partial> single = new ArrayList<>();
        merged.forEach((k, a) -> single.add(new Overview.Partial(Long.parseLong(k.split("\\|")[0]), k.split("\\|")[1], a)));

        ObjectNode a = Overview.build(StatsWindow.ONE_SECOND, T0, T0 + 10_000, fanOut, Map.of("prefill-0", 3L), List.of(), "t {id}", 5);
        ObjectNode b = Overview.build(StatsWindow.ONE_SECOND, T0, T0 + 10_000, single, Map.of("prefill-0", 3L), List.of(), "t {id}", 5);
        assertThat(a).isEqualTo(b);

        long completed = all.stream().filter(p -> p.key().equals("outcomes")).mapToLong(p -> p.aggregate().counter("COMPLETED")).sum();
        assertThat(a.at("/totals/outcomes/COMPLETED").asLong()).isEqualTo(completed);
        long seriesSum = 0;
        for (JsonNode p : a.at("/series")) {
            seriesSum += p.path("outcomes").path("COMPLETED").asLong();
        }
        assertThat(seriesSum).isEqualTo(completed);
        assertThat(a.at("/totals/latency_ms/handoff/count").asLong()).isEqualTo(6 * 10 * 20);
        assertThat(a.at("/engines/prefill-0/in_flight").asLong()).isEqualTo(3);
        assertThat(a.at("/engines/prefill-1/in_flight").asLong()).isZero();
        assertThat(a.at("/engines/prefill-0/handoffs").asLong()).isEqualTo(3 * 10 * 5);
    }

    @Test
    void rangeSelectsWholeWindowsAndRatesUseTheSpan() {
        List<Overview.Partial> all = tasks(2);
        ObjectNode first = Overview.build(StatsWindow.ONE_SECOND, T0 + 500, T0 + 3_000, all, Map.of(), List.of(), "t {id}", 5);
        assertThat(first.path("from").asLong()).isEqualTo(T0); // aligned down
        assertThat(first.path("to").asLong()).isEqualTo(T0 + 3_000);
        assertThat(first.at("/series")).hasSize(3);
        long handoffs = first.at("/totals/handoffs").asLong();
        assertThat(first.at("/totals/handoffs_per_s").asDouble()).isEqualTo(Math.round(handoffs / 3.0 * 1000) / 1000.0);
        ObjectNode none = Overview.build(StatsWindow.ONE_SECOND, T0 + 60_000, T0 + 61_000, all, Map.of(), List.of(), "t {id}", 5);
        assertThat(none.at("/totals/handoffs").asLong()).isZero();
        assertThat(none.at("/totals/latency_ms/handoff/p99").isNull()).isTrue();
        assertThat(none.at("/engines")).isEmpty();
    }

    @Test
    void failuresAreTheNewestInRangeWithTheirTraceCommand() throws Exception {
        List<JsonNode> failures = new ArrayList<>();
        for (int i = 0; i < 10; i++) {
            failures.add(JSON.readTree("{\"time\":" + (T0 + i * 100) + ",\"request_id\":\"r" + i + "\",\"source\":\"outcome\"}"));
        }
        ObjectNode o = Overview.build(StatsWindow.ONE_SECOND, T0, T0 + 1_000, List.of(), Map.of(), failures, "./orbitkv-pd trace {id}", 3);
        assertThat(o.at("/failures")).hasSize(3);
        assertThat(o.at("/failures/0/request_id").asText()).isEqualTo("r9");
        assertThat(o.at("/failures/0/trace_command").asText()).isEqualTo("./orbitkv-pd trace r9");
        assertThat(o.at("/failures/2/request_id").asText()).isEqualTo("r7");
        assertThat(Overview.build(StatsWindow.ONE_SECOND, T0 + 5_000, T0 + 6_000, List.of(), Map.of(), failures, "{id}", 3).at("/failures")).isEmpty();
    }

    @Test
    void partsSurviveTheWireForm() {
        List<Overview.Partial> all = tasks(3);
        LocalView.Part part = new LocalView.Part(all, Map.of("decode-1", 4L), List.of(JSON.createObjectNode().put("time", T0)));
        LocalView.Part back = LocalView.fromJson(LocalView.toJson(part));
        assertThat(back.partials()).isEqualTo(all);
        assertThat(back.inflight()).isEqualTo(part.inflight());
        assertThat(back.failures()).isEqualTo(part.failures());
    }
}
