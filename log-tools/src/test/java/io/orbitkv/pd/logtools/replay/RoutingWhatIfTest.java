package io.orbitkv.pd.logtools.replay;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

class RoutingWhatIfTest {

    private static final List<RoutingWhatIf.Engine> ENGINES = List.of(new RoutingWhatIf.Engine("p0", "PREFILL", 100, 2048),
            new RoutingWhatIf.Engine("p1", "PREFILL", 100, 2048), new RoutingWhatIf.Engine("d0", "DECODE", 100, 2048));

    /** A prompt of {@code group}'s 40 shared blocks and one block of its own. */
    private static long[] prompt(int group, int i) {
        long[] k = new long[41];
        for (int b = 0; b < 40; b++) {
            k[b] = group * 1_000L + b;
        }
        k[40] = 1_000_000L + i;
        return k;
    }

    /** Two groups alternating, each request 1 s apart and 100 ms long; recorded round robin over the prefill engines. */
    private static List<RoutingWhatIf.Request> log() {
        List<RoutingWhatIf.Request> out = new ArrayList<>();
        for (int i = 0; i < 8; i++) {
            int group = (i / 2) % 2; // a, a, b, b, a, a, b, b: round robin sends each group to both engines
            out.add(new RoutingWhatIf.Request("r" + i, 1_000L * i, 100, 41 * 16, 16, prompt(group, i), i % 2 == 0 ? "p0" : "p1", "d0"));
        }
        return out;
    }

    @Test
    void prefixAwareSendsAGroupBackToTheEngineThatHoldsItAndTheReplayIsDeterministic() {
        RoutingWhatIf.Outcome recorded = RoutingWhatIf.recorded(log(), ENGINES);
        RoutingWhatIf.Outcome aware = RoutingWhatIf.whatIf("prefix_aware", null, log(), ENGINES);
        // recorded: every group computed once on each prefill engine (4 first sights); prefix-aware: once in all (2)
        assertThat(recorded.total().computed).isEqualTo(4L * 40 * 16 + 8 * 16);
        assertThat(aware.total().computed).isEqualTo(2L * 40 * 16 + 8 * 16);
        assertThat(aware.total().hitRate()).isGreaterThan(recorded.total().hitRate());
        assertThat(aware.total().kvBytes).as("P/D always: every prompt moves whole").isEqualTo(8L * 41 * 16 * 2048);
        RoutingWhatIf.Outcome again = RoutingWhatIf.whatIf("prefix_aware", null, log(), ENGINES);
        assertThat(again.total().computed).isEqualTo(aware.total().computed);
        assertThat(again.engines().get("p0").hits).isEqualTo(aware.engines().get("p0").hits);
    }

    @Test
    void conditionalDisaggregationPrefillsOnTheDecodeEngineThatHoldsThePromptAndMovesNothingThen() {
        RoutingWhatIf.Outcome local = RoutingWhatIf.whatIf("prefix_aware", new RoutingWhatIf.Local(256, 0.7), log(), ENGINES);
        // the first of each group goes P/D (the decode engine holds nothing), every later one finds it on d0
        assertThat(local.localPrefills()).isEqualTo(6);
        assertThat(local.total().kvBytes).isEqualTo(2L * 41 * 16 * 2048);
        assertThat(local.engines().get("d0").requests).isEqualTo(6);
    }

    @Test
    void theTableNamesEveryEngineAndAnUnknownPolicyIsRefused() {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        RoutingWhatIf.print(new PrintStream(b, true, StandardCharsets.UTF_8), RoutingWhatIf.recorded(log(), ENGINES),
                RoutingWhatIf.whatIf("round_robin", null, log(), ENGINES), 8);
        assertThat(b.toString(StandardCharsets.UTF_8)).contains("What-if routing over 8 recorded requests").contains("p0").contains("p1")
                .contains("d0").contains("all").contains("round_robin");
        assertThatThrownBy(() -> RoutingWhatIf.whatIf("random", null, log(), ENGINES)).hasMessageContaining("--routing: must be");
    }
}
