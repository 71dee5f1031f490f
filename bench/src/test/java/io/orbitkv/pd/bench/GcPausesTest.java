package io.orbitkv.pd.bench;

import static org.assertj.core.api.Assertions.assertThat;

import java.time.Duration;

import org.junit.jupiter.api.Test;

class GcPausesTest {

    @Test
    void countsTheFullCollectionThatSettlesTheHeapInsideItsWindowOnly() throws InterruptedException {
        try (GcPauses pauses = new GcPauses()) {
            long before = System.nanoTime();
            GcPauses.settleHeap();
            // The notification arrives on a JMX thread after the collection: wait for it, bounded.
            long deadline = System.nanoTime() + Duration.ofSeconds(10).toNanos();
            GcPauses.Summary seen = GcPauses.Summary.NONE;
            while (seen.count() == 0 && System.nanoTime() < deadline) {
                Thread.onSpinWait();
                seen = pauses.between(before, Long.MAX_VALUE);
            }
            assertThat(seen.count()).isGreaterThanOrEqualTo(1);
            assertThat(seen.maxMs()).isGreaterThanOrEqualTo(seen.meanMs());
            assertThat(pauses.between(Long.MIN_VALUE, before)).isEqualTo(GcPauses.Summary.NONE);
        }
    }

    @Test
    void settlesAFewSecondsBeforeTheWindowOrHalfwayThroughAShortWarmUpAndNeverWithoutOne() {
        long from = 100_000_000_000L;
        assertThat(DeciderBench.settleAt(from, Duration.ofSeconds(15))).isEqualTo(from - 3_000_000_000L);
        assertThat(DeciderBench.settleAt(from, Duration.ofSeconds(2))).isEqualTo(from - 1_000_000_000L);
        assertThat(DeciderBench.settleAt(from, Duration.ZERO)).isEqualTo(Long.MAX_VALUE);
    }
}
