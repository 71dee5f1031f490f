package io.orbitkv.pd.proxy;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.proxy.routing.EngineInfo;
import io.orbitkv.pd.proxy.routing.RoutingPolicy;
import io.orbitkv.pd.proxy.routing.RoutingPolicy.Side;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class RoutingPolicyTest {

    private static final List<EngineInfo> ENGINES = List.of(
            new EngineInfo("p1", EngineRole.PREFILL, "http://p1", 0),
            new EngineInfo("p0", EngineRole.PREFILL, "http://p0", 0),
            new EngineInfo("d0", EngineRole.DECODE, "http://d0", 0),
            new EngineInfo("b0", EngineRole.BOTH, "http://b0", 0));

    @Test
    void candidatesPerSideInIdOrder() {
        assertThat(RoutingPolicy.candidates(ENGINES, Side.PREFILL)).extracting(EngineInfo::engineId).containsExactly("b0", "p0", "p1");
        assertThat(RoutingPolicy.candidates(ENGINES, Side.DECODE)).extracting(EngineInfo::engineId).containsExactly("b0", "d0");
        assertThat(RoutingPolicy.named("round_robin").pick(Side.DECODE, List.of(ENGINES.get(0)), id -> 0)).isEmpty();
    }

    @Test
    void roundRobinTakesEachEngineInTurnPerSide() {
        RoutingPolicy rr = RoutingPolicy.named("round-robin");
        List<String> prefill = new ArrayList<>();
        List<String> decode = new ArrayList<>();
        for (int i = 0; i < 6; i++) {
            prefill.add(rr.pick(Side.PREFILL, ENGINES, id -> 0).orElseThrow().engineId());
            decode.add(rr.pick(Side.DECODE, ENGINES, id -> 0).orElseThrow().engineId());
        }
        assertThat(prefill).containsExactly("b0", "p0", "p1", "b0", "p0", "p1");
        assertThat(decode).containsExactly("b0", "d0", "b0", "d0", "b0", "d0");
    }

    @Test
    void leastInFlightUsesTheLargerOfTheDecidersAndTheProxysCount() {
        RoutingPolicy lif = RoutingPolicy.named("least_in_flight");
        List<EngineInfo> engines = List.of(new EngineInfo("d0", EngineRole.DECODE, "u", 5), new EngineInfo("d1", EngineRole.DECODE, "u", 1),
                new EngineInfo("d2", EngineRole.DECODE, "u", 0));
        // d2 is idle by the decider's last poll, but this proxy just sent it 3 requests
        Map<String, Long> local = Map.of("d0", 0L, "d1", 1L, "d2", 3L);
        assertThat(lif.pick(Side.DECODE, engines, local::get).orElseThrow().engineId()).isEqualTo("d1");
        // ties rotate
        List<EngineInfo> equal = List.of(new EngineInfo("a", EngineRole.DECODE, "u", 2), new EngineInfo("b", EngineRole.DECODE, "u", 2));
        assertThat(List.of(lif.pick(Side.DECODE, equal, id -> 0).orElseThrow().engineId(), lif.pick(Side.DECODE, equal, id -> 0).orElseThrow().engineId()))
                .containsExactlyInAnyOrder("a", "b");
    }

    @Test
    void unknownPolicyIsRefusedByName() {
        assertThatThrownBy(() -> RoutingPolicy.named("random")).hasMessageContaining("proxy.routing");
    }
}
