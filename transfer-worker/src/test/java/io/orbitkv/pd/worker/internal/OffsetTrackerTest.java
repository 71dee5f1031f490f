package io.orbitkv.pd.worker.internal;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

/** How the command loop decides which offsets may be committed. */
class OffsetTrackerTest {

    @Test
    void theCommittedOffsetNeverPassesARecordWhoseEffectIsNotDurable() {
        OffsetTracker t = new OffsetTracker();
        assertThat(t.committable()).isEqualTo(-1);
        t.track(10);
        t.track(11);
        t.track(12);
        t.done(11);
        assertThat(t.committable()).as("10 is still running").isEqualTo(10);
        t.committed(10);
        assertThat(t.committable()).as("nothing new to commit").isEqualTo(-1);
        t.done(10);
        assertThat(t.committable()).isEqualTo(12);
        t.done(12);
        assertThat(t.committable()).isEqualTo(13);
        t.committed(13);
        assertThat(t.committable()).isEqualTo(-1);
        assertThat(t.inFlight()).isZero();
    }
}
