package io.orbitkv.pd.engine.sim;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

/** How many layer-progress reports a prefill step makes: once a layer at most, never closer than the interval, at least one. */
class StepperReportsTest {

    private static final long MS = 1_000_000;

    @Test
    void aLongStepReportsEveryLayerAShortOneFewerLargerGroups() {
        assertThat(Stepper.reportGroups(32, 32, 60 * MS, MS)).as("60 ms, 32 layers: every layer").isEqualTo(32);
        assertThat(Stepper.reportGroups(32, 32, 15 * MS, MS)).as("15 ms: one report a millisecond").isEqualTo(15);
        assertThat(Stepper.reportGroups(32, 32, MS / 2, MS)).as("shorter than the interval: one report, at the step's end").isEqualTo(1);
        assertThat(Stepper.reportGroups(8, 32, 60 * MS, MS)).as("at most reports-per-step").isEqualTo(8);
        assertThat(Stepper.reportGroups(32, 4, 60 * MS, MS)).as("never more than the layers").isEqualTo(4);
        assertThat(Stepper.reportGroups(32, 32, 5 * MS, 0)).as("no interval: every layer").isEqualTo(32);
    }
}
