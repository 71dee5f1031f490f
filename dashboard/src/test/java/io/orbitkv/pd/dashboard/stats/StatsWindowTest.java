package io.orbitkv.pd.dashboard.stats;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import org.junit.jupiter.api.Test;

class StatsWindowTest {

    @Test
    void windowsAreEpochAlignedAndHalfOpen() {
        assertThat(StatsWindow.ONE_SECOND.start(1_700_000_000_999L)).isEqualTo(1_700_000_000_000L);
        assertThat(StatsWindow.ONE_SECOND.start(1_700_000_001_000L)).isEqualTo(1_700_000_001_000L);
        assertThat(StatsWindow.ONE_MINUTE.start(1_700_000_059_999L)).isEqualTo(1_700_000_040_000L);
        assertThat(StatsWindow.start(-1, 1000)).isEqualTo(-1000); // floor, not truncation
        assertThatThrownBy(() -> StatsWindow.start(5, 0)).isInstanceOf(IllegalArgumentException.class);
    }

    @Test
    void aWindowClosesAtItsEndPlusGraceInStreamTime() {
        long start = 10_000;
        assertThat(StatsWindow.ONE_SECOND.closed(start, 5_000, 15_999)).isFalse();
        assertThat(StatsWindow.ONE_SECOND.closed(start, 5_000, 16_000)).isTrue();
        assertThat(StatsWindow.ONE_SECOND.closed(start, 0, 11_000)).isTrue();
        assertThat(StatsWindow.ONE_MINUTE.closed(0, 5_000, 64_999)).isFalse();
    }

    @Test
    void startsCoverTheRange() {
        assertThat(StatsWindow.ONE_SECOND.starts(1_500, 4_000)).containsExactly(1_000L, 2_000L, 3_000L);
        assertThat(StatsWindow.ONE_MINUTE.starts(0, 60_000)).containsExactly(0L);
        assertThat(StatsWindow.ONE_MINUTE.starts(60_000, 60_000)).isEmpty();
    }

    @Test
    void parsesLabels() {
        assertThat(StatsWindow.parse("1s")).isEqualTo(StatsWindow.ONE_SECOND);
        assertThat(StatsWindow.parse("1m")).isEqualTo(StatsWindow.ONE_MINUTE);
        assertThatThrownBy(() -> StatsWindow.parse("5s")).hasMessageContaining("window: must be 1s or 1m");
    }
}
