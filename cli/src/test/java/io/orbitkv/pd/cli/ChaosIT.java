package io.orbitkv.pd.cli;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.orbitkv.pd.bench.chaos.ChaosCommand;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import picocli.CommandLine;

/**
 * {@code orbitkv-pd chaos --schedule ci}: the decider, a decode engine and a decode worker each killed with SIGKILL
 * under load and restarted, on a pipeline of real processes (two engines per role, two proxies). Every request the
 * log knows ends in exactly one outcome, no page stays held, no request hangs, the audit is clean and the replay
 * identical (the command's exit code says all that), and no fault costs the clients more than the requests in flight
 * on the killed component at the moment of the kill. Times (ready again, failover) are the benchmark's
 * ({@code docs/bench/chaos.md}), not asserted here.
 */
class ChaosIT {

    @Test
    void theCiScheduleLosesNothingAndCostsNoMoreThanWhatWasInFlight() throws Exception {
        Path json = Files.createDirectories(Path.of("target", "it")).resolve("chaos-" + System.nanoTime() + ".json").toAbsolutePath();
        int exit = new CommandLine(new ChaosCommand()).execute("--schedule", "ci", "--warmup", "0s", "--json", json.toString());
        assertThat(Files.exists(json)).as("chaos wrote its results").isTrue();
        JsonNode r = new ObjectMapper().readTree(json.toFile());
        assertThat(exit).as("chaos exit code; results: %s", r).isZero();
        assertThat(r.path("audit_clean").asBoolean()).isTrue();
        assertThat(r.path("replay_identical").asBoolean()).isTrue();
        assertThat(r.path("faults")).hasSize(3);
        for (JsonNode f : r.path("faults")) {
            assertThat(f.path("requests").asInt()).as("requests during %s", f.path("fault")).isGreaterThan(20);
            assertThat(f.path("lost").asInt()).as("lost in %s", f).isZero();
            assertThat(f.path("doubled").asInt()).as("doubled in %s", f).isZero();
            assertThat(f.path("pages_held_after").asInt()).as("pages held after %s", f).isZero();
            assertThat(f.path("not_routed_to").asInt()).as("engines the proxies no longer route to after %s", f).isZero();
            assertThat(f.path("client_errors").asInt()).as("client errors of %s", f).isLessThanOrEqualTo(f.path("in_flight_at_fault").asInt());
            // came back at all (how fast is the benchmark's to say, docs/bench/chaos.md, not a test's)
            assertThat(f.path("ready_s").asDouble()).as("%s ready again", f.path("fault")).isNotNegative();
        }
    }
}
