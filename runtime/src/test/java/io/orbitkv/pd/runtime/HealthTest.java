package io.orbitkv.pd.runtime;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

class HealthTest {

    @Test
    void liveUntilStoppedOrFailedReadyOnlyWhileRunningAndAble() {
        Lifecycle l = new Lifecycle("worker w");
        assertThat(Health.live(l).status()).isEqualTo(200);
        assertThat(Health.probe(Health.READY, l, () -> null)).isEqualTo(new Health.Answer(503,
                "{\"status\":\"not ready\",\"lifecycle\":\"new\",\"reason\":\"it is new\"}"));
        l.starting();
        l.running();
        assertThat(Health.probe(Health.READY, l, () -> null)).isEqualTo(new Health.Answer(200, "{\"status\":\"ready\",\"lifecycle\":\"running\"}"));
        assertThat(Health.probe(Health.READY, l, () -> "no engine \"x\" yet").json())
                .isEqualTo("{\"status\":\"not ready\",\"lifecycle\":\"running\",\"reason\":\"no engine \\\"x\\\" yet\"}");
        l.stopping();
        assertThat(Health.probe(Health.READY, l, () -> null).status()).as("stopping: traffic goes elsewhere").isEqualTo(503);
        assertThat(Health.probe(Health.LIVE, l, () -> null).status()).as("stopping in order is still live").isEqualTo(200);
        l.stopped();
        assertThat(Health.probe(Health.LIVE, l, () -> null)).isEqualTo(new Health.Answer(503,
                "{\"status\":\"not live\",\"lifecycle\":\"stopped\",\"reason\":\"stopped\"}"));
        assertThat(Health.probe("/health", l, () -> null)).isNull();
    }

    @Test
    void aFailedStartIsNotLiveAndSaysWhy() {
        Lifecycle l = new Lifecycle("decider");
        l.starting();
        l.failed(new IllegalStateException("no broker"));
        assertThat(Health.live(l).status()).isEqualTo(503);
        assertThat(Health.live(l).json()).contains("its start failed: java.lang.IllegalStateException: no broker");
    }
}
