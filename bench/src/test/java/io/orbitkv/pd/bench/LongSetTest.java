package io.orbitkv.pd.bench;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

class LongSetTest {

    @Test
    void remembersEveryKeyAcrossGrowthAndReportsRepeats() {
        LongSet set = new LongSet();
        for (int i = 0; i < 200_000; i++) {
            assertThat(set.add("decode-" + (i % 7) + "|r" + i + "/" + (i % 5))).isTrue();
        }
        assertThat(set.size()).isEqualTo(200_000);
        for (int i = 0; i < 200_000; i += 997) {
            assertThat(set.add("decode-" + (i % 7) + "|r" + i + "/" + (i % 5))).isFalse();
        }
        assertThat(set.size()).isEqualTo(200_000);
    }

    @Test
    void theEmptySlotMarkerIsAValueToo() {
        LongSet set = new LongSet();
        assertThat(set.add(0L)).isTrue();
        assertThat(set.add(0L)).isFalse();
        assertThat(set.add(1L)).isTrue();
        assertThat(set.size()).isEqualTo(2);
    }
}
