package io.orbitkv.pd.proxy.internal;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.proxy.internal.EngineHealth.Probe;
import org.junit.jupiter.api.Test;

/**
 * The proxy's own view of engine health: a definite failure takes an engine out of routing at once, a late answer only
 * when it repeats. One /health check past its 1 s deadline used to take a healthy engine out (a GC pause, a busy core,
 * a slow link was enough).
 */
class EngineHealthTest {

    @Test
    void oneLateAnswerKeepsTheEngineInRoutingThreeInARowTakeItOut() {
        EngineHealth h = new EngineHealth();
        h.probed("decode-0", Probe.TIMED_OUT, "/health not answered within 1000 ms");
        assertThat(h.usable("decode-0")).isTrue();
        h.probed("decode-0", Probe.HEALTHY, "");
        h.probed("decode-0", Probe.TIMED_OUT, "late");
        h.probed("decode-0", Probe.TIMED_OUT, "late");
        assertThat(h.usable("decode-0")).as("two misses, not in a row with the first").isTrue();
        h.probed("decode-0", Probe.TIMED_OUT, "late");
        assertThat(h.usable("decode-0")).isFalse();
        assertThat(h.down().get("decode-0").reason()).contains("3 checks in a row");
        h.probed("decode-0", Probe.HEALTHY, "");
        assertThat(h.usable("decode-0")).isTrue();
    }

    @Test
    void aDefiniteFailureTakesTheEngineOutAtOnce() {
        EngineHealth h = new EngineHealth();
        h.probed("prefill-1", Probe.UNREACHABLE, "connection refused");
        assertThat(h.usable("prefill-1")).isFalse();
        h.probed("prefill-1", Probe.HEALTHY, "");
        h.probed("prefill-1", Probe.UNHEALTHY, "/health answered 503");
        assertThat(h.usable("prefill-1")).isFalse();
    }
}
