package io.orbitkv.pd.engine.sim.model;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.List;
import org.junit.jupiter.api.Test;

/** The prefix cache: longest cached prefix, least recently used evicted first, the last prompt token always computed. */
class PrefixCacheTest {

    private static byte[] h(int i) {
        return new byte[] {(byte) i, 7};
    }

    @Test
    void aLookupCountsTheCachedPrefixUpToTheFirstMiss() {
        PrefixCache c = new PrefixCache(10);
        c.insert(List.of(h(1), h(2), h(3)));
        assertThat(c.lookup(List.of(h(1), h(2), h(9), h(3)))).isEqualTo(2);
        assertThat(c.lookup(List.of(h(9), h(1)))).isZero();
        assertThat(c.size()).isEqualTo(3);
    }

    @Test
    void theLeastRecentlyUsedBlocksGoFirst() {
        PrefixCache c = new PrefixCache(3);
        c.insert(List.of(h(1), h(2), h(3)));
        assertThat(c.lookup(List.of(h(1)))).isEqualTo(1); // 1 is now the most recent: 2 is the oldest
        c.insert(List.of(h(4)));
        assertThat(c.lookup(List.of(h(2)))).isZero();
        assertThat(c.lookup(List.of(h(1)))).isEqualTo(1);
        assertThat(c.lookup(List.of(h(3)))).isEqualTo(1);
        assertThat(c.lookup(List.of(h(4)))).isEqualTo(1);
        assertThat(c.size()).isEqualTo(3);
    }

    @Test
    void aWhollyCachedPromptStillComputesItsLastToken() {
        assertThat(PrefixCache.cachedTokens(2, 16, 40)).isEqualTo(32);
        assertThat(PrefixCache.cachedTokens(2, 16, 32)).isEqualTo(31);
        assertThat(PrefixCache.cachedTokens(0, 16, 1)).isZero();
    }

    @Test
    void theLegacyPerTokenKnobsAreAStepModel() {
        CostModel c = CostModels.perToken(0.05, 2.0);
        assertThat(c).isEqualTo(new CostModel(2_000_000_000L, 50_000_000L, 0, 0, 0));
    }
}
