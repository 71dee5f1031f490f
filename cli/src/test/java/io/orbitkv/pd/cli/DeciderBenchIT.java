package io.orbitkv.pd.cli;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@code bench decider} end to end, briefly, against the embedded broker it starts: checks that the run completes
 * every handoff, that its outputs agree with each other (a latency breakdown of the measured decisions, records per
 * handoff from the broker's offsets, the options written into the command line of the result), not how fast it is.
 */
class DeciderBenchIT {

    @Test
    void benchDeciderRunsEveryHandoffAndReportsAConsistentBreakdown(@TempDir Path dir) throws Exception {
        Path md = dir.resolve("decider.md");
        java.util.Set<Path> before = benchWorkDirs();
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        PrintStream original = System.out;
        int exit;
        try {
            System.setOut(new PrintStream(buf, true, StandardCharsets.UTF_8));
            exit = Main.commandLine().execute("bench", "decider", "--modes", "3,4,5", "--rate", "100", "--warmup", "1", "--measure", "2",
                    "--burst", "300", "--partitions", "2", "--store", "in_memory", "--broker", "num.io.threads=1", "--out", md.toString());
        } finally {
            System.setOut(original);
        }
        String out = buf.toString(StandardCharsets.UTF_8);
        assertThat(exit).as(out).isZero();
        // A successful run removes its work directory (state stores and broker data, 100-200 MB at full length).
        assertThat(benchWorkDirs()).as("work directories left behind").isSubsetOf(before);

        String table = Files.readString(md);
        assertThat(table).contains("--partitions 2").contains("--store IN_MEMORY").contains("--broker num.io.threads=1")
                .contains("| at-least-once (ALOS, read_uncommitted) |").contains("| floor: same state machine on plain clients").contains("Where the time goes")
                .contains("| reference: DESIGN.md's minimal Streams match");

        JsonNode json = new ObjectMapper().readTree(dir.resolve("decider.json").toFile());
        assertThat(json.get("modes")).hasSize(3);
        for (JsonNode mode : json.get("modes")) {
            if (mode.get("mode").asText().startsWith("reference")) {
                checkReference(mode);
            } else {
                checkMode(mode, mode.get("mode").asText().startsWith("floor"));
            }
        }
    }

    /** The minimal match: one measured pair per "handoff", two halves in, one pair out, each half put then deleted. */
    private static void checkReference(JsonNode mode) {
        long pairs = mode.get("decision").get("count").asLong();
        assertThat(pairs).isBetween(150L, 250L);
        for (String part : new String[] {"hop_in", "decider_work", "hop_out"}) {
            assertThat(mode.get(part).get("count").asLong()).as(part).isEqualTo(pairs);
        }
        JsonNode records = mode.get("records_per_handoff");
        assertThat(records.get("halves").asDouble()).isEqualTo(2.0);
        assertThat(records.get("pairs").asDouble()).isEqualTo(1.0);
        assertThat(records.get("halves-changelog").asDouble()).isEqualTo(2.0);
    }

    /** One mode's results agree with the load it carried; the plain-clients floor has no changelog. */
    private static void checkMode(JsonNode mode, boolean floor) {
        long decisions = mode.get("decision").get("count").asLong();
        // Two measured decisions per handoff (the order and KV ready), about rate x measure handoffs.
        assertThat(decisions).isBetween(300L, 500L);
        for (String part : new String[] {"hop_in", "decider_work", "hop_out"}) {
            long n = mode.get(part).get("count").asLong();
            assertThat(n).as(part).isPositive().isLessThanOrEqualTo(decisions);
            // Each part of a decision is shorter than the whole decision's worst case.
            assertThat(mode.get(part).get("p50_ms").asDouble()).as(part).isLessThanOrEqualTo(mode.get("decision").get("max_ms").asDouble());
        }
        JsonNode records = mode.get("records_per_handoff");
        // Five facts per handoff (admitted, decode ready, prefill completed, transfer completed, decode completed), plus
        // any ticks; five decisions (order, KV ready, two releases, outcome); six engine copies (the outcome goes to both).
        assertThat(records.get("request-events").asDouble()).isBetween(5.0, 5.5);
        assertThat(records.get("decisions").asDouble()).isBetween(5.0, 5.5);
        assertThat(records.get("engine-commands").asDouble()).isBetween(6.0, 6.5);
        assertThat(mode.get("handoffs_per_s").asDouble()).isPositive();
        assertThat(mode.get("cores_busy_at_rate").asDouble()).isPositive();
        assertThat(records.has("decider-requests-changelog")).as("changelog").isEqualTo(!floor);
        // Broker requests the clients sent per handoff in the measured window, counted from their metrics: every client
        // sent some; in all at least one produce and one fetch per side and round trip (3 rounds), and at most about
        // one produce per record written (16 without the changelog) plus one fetch per fact and decision (measured at
        // 100/s, where little batches: 14.1-14.5).
        JsonNode requests = mode.get("requests_per_handoff");
        for (String client : new String[] {"decider producer", "decider consumer", "actors producer", "actors consumer"}) {
            assertThat(requests.get(client).asDouble()).as(client).isPositive();
        }
        double total = 0;
        for (JsonNode n : requests) {
            total += n.asDouble();
        }
        assertThat(total).isBetween(6.0, 30.0);
    }

    /** The bench's temporary work directories (state stores, broker data) that exist right now. */
    private static java.util.Set<Path> benchWorkDirs() throws java.io.IOException {
        try (var s = Files.list(Path.of(System.getProperty("java.io.tmpdir")))) {
            return s.filter(p -> p.getFileName().toString().matches("orbitkv-bench-\\d+")).collect(java.util.stream.Collectors.toSet());
        }
    }
}
