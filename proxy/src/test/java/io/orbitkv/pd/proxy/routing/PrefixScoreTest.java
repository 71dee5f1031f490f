package io.orbitkv.pd.proxy.routing;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.events.EngineRole;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The prefill engine with the prompt cached wins unless it is much busier; with nothing cached, the least loaded. */
class PrefixScoreTest {

    private static EngineInfo e(String id, long inFlight) {
        return new EngineInfo(id, EngineRole.PREFILL, "http://" + id, inFlight, null);
    }

    private static final PrefixScore.Weights W = new PrefixScore.Weights(1, 1);

    @Test
    void theEngineHoldingThePromptWinsOverAnIdleOne() {
        List<EngineInfo> c = List.of(e("p-0", 0), e("p-1", 2));
        PrefixScore.Choice ch = PrefixScore.choose(c, Map.of("p-1", 60), 64, id -> 0, W);
        // p-1: 60/64 − 2/3 = 0.27; p-0: 0 − 0 = 0
        assertThat(ch.engine().engineId()).isEqualTo("p-1");
        assertThat(ch.matchedBlocks()).isEqualTo(60);
    }

    @Test
    void aShortMatchDoesNotOutweighAQueue() {
        List<EngineInfo> c = List.of(e("p-0", 0), e("p-1", 8));
        assertThat(PrefixScore.choose(c, Map.of("p-1", 8), 64, id -> 0, W).engine().engineId()).isEqualTo("p-0");
    }

    @Test
    void withNothingCachedTheLeastLoadedWinsAndTheProxysOwnCountCounts() {
        List<EngineInfo> c = List.of(e("p-0", 1), e("p-1", 1));
        assertThat(PrefixScore.choose(c, Map.of(), 64, id -> id.equals("p-0") ? 3 : 0, W).engine().engineId()).isEqualTo("p-1");
        assertThat(PrefixScore.choose(c, Map.of(), 64, id -> 0, W).engine().engineId()).as("a tie: the first").isEqualTo("p-0");
    }
}
