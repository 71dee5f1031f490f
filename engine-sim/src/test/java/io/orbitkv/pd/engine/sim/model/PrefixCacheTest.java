package io.orbitkv.pd.engine.sim.model;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.List;
import org.junit.jupiter.api.Test;

/** The prefix cache: longest cached prefix, least recently used evicted first (a chain's tail before its head), the last prompt token always computed. */
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
    void theLeastRecentlyUsedGoFirstAndAChainLosesItsTailBeforeItsHead() {
        PrefixCache c = new PrefixCache(3);
        c.insert(List.of(h(1), h(2), h(3))); // oldest to newest: 3 2 1 (a chain's head is its most recent block)
        c.insert(List.of(h(4)));             // 3 evicted: the chain's tail, not its head
        assertThat(c.lookup(List.of(h(1), h(2), h(3)))).isEqualTo(2); // the prefix still serves; now 4 2 1
        c.insert(List.of(h(5)));             // 4 evicted: the least recently used
        assertThat(c.lookup(List.of(h(4)))).isZero();
        assertThat(c.lookup(List.of(h(1), h(2)))).isEqualTo(2);
        assertThat(c.lookup(List.of(h(5)))).isEqualTo(1);
        assertThat(c.size()).isEqualTo(3);
        // a chain longer than the cache keeps its head
        PrefixCache small = new PrefixCache(2);
        small.insert(List.of(h(1), h(2), h(3), h(4)));
        assertThat(small.lookup(List.of(h(1), h(2), h(3)))).isEqualTo(2);
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
