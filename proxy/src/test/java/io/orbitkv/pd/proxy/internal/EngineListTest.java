package io.orbitkv.pd.proxy.internal;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.proxy.routing.EngineInfo;
import java.net.URI;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The engines the proxy routes to, from the decider's {@code /engines}: with the model each serves. */
class EngineListTest {

    @Test
    void theDecidersEnginesCarryTheirModelAndOnlyThoseServingARequestedModelServeIt() throws Exception {
        EngineList list = new EngineList(List.of(new EngineInfo("static-0", EngineRole.BOTH, "http://s", 0)), List.of(URI.create("http://127.0.0.1:1")));
        List<EngineInfo> engines = list.merge(new ObjectMapper().readTree("""
                {"decode-0": {"role": "DECODE", "http_url": "http://d", "in_flight": 2, "model": "m-a"},
                 "prefill-0": {"role": "PREFILL", "http_url": "http://p", "in_flight": 0, "model": "m-a"},
                 "bad-0": {"in_flight": 0, "error": "registration keyed 'bad-0' names engine 'x'"}}"""));
        assertThat(engines).extracting(EngineInfo::engineId).containsExactly("decode-0", "prefill-0", "static-0");
        assertThat(engines.get(0).model()).isEqualTo("m-a");
        assertThat(engines).filteredOn(e -> e.serves("m-a")).hasSize(3); // the static engine's model is unknown: it may serve any
        assertThat(engines).filteredOn(e -> e.serves("m-b")).extracting(EngineInfo::engineId).containsExactly("static-0");
        assertThat(engines).filteredOn(e -> e.serves(null)).hasSize(3);
    }
}
