package io.orbitkv.pd.proxy.routing;

import static io.orbitkv.pd.proxy.routing.KvEvents.ev;
import static io.orbitkv.pd.proxy.routing.KvEvents.h;
import static io.orbitkv.pd.proxy.routing.KvEvents.removed;
import static io.orbitkv.pd.proxy.routing.KvEvents.stored;
import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.events.AllBlocksCleared;
import io.orbitkv.pd.events.KvCacheEvent;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

/** The index's rules: stored, removed, cleared; stale instances, repeats and gaps; the same log gives the same index. */
class KvIndexTest {

    @Test
    void theLongestCachedPrefixPerEngine() {
        KvIndex x = new KvIndex();
        x.apply(ev("p-0", 1, 1, stored(1, 2, 3)));
        x.apply(ev("p-1", 1, 1, stored(1, 2)));
        x.apply(ev("p-1", 1, 2, stored(4)));
        assertThat(x.matches(List.of(h(1), h(2), h(3), h(4)))).containsExactly(java.util.Map.entry("p-0", 3), java.util.Map.entry("p-1", 2));
        x.apply(ev("p-0", 1, 2, removed(2)));
        assertThat(x.matches(List.of(h(1), h(2), h(3))).get("p-0")).as("a prefix stops at the first block not cached").isEqualTo(1);
        x.apply(ev("p-0", 1, 3, AllBlocksCleared.newBuilder().setReason("reset").build()));
        assertThat(x.blocks("p-0")).isZero();
    }

    @Test
    void aNewInstanceStartsEmptyAnOlderOneIsStaleRepeatsAreDroppedAndGapsCounted() {
        KvIndex x = new KvIndex();
        x.apply(ev("d-0", 5, 1, stored(1, 2)));
        assertThat(x.apply(ev("d-0", 5, 1, stored(1, 2)))).as("a report sent again").isFalse();
        assertThat(x.apply(ev("d-0", 6, 1, stored(7)))).isTrue();
        assertThat(x.matches(List.of(h(1))).get("d-0")).as("the old instance's blocks are gone").isZero();
        assertThat(x.apply(ev("d-0", 5, 2, stored(3)))).as("an event of the old instance, late").isFalse();
        x.apply(ev("d-0", 6, 4, stored(8)));
        assertThat(x.gaps("d-0")).isEqualTo(2);
        x.apply(ev("d-0", 6, 0, AllBlocksCleared.newBuilder().setReason("deregistered").build()));
        assertThat(x.blocks("d-0")).isZero();
        assertThat(x.dropped()).isEqualTo(2);
    }

    @Test
    void theSameLogGivesTheSameIndexAndEntriesStaySmall() {
        Random rnd = new Random(3);
        List<KvCacheEvent> log = new ArrayList<>();
        long[] seq = new long[4];
        for (int i = 0; i < 20_000; i++) {
            int e = rnd.nextInt(4);
            int b = rnd.nextInt(50_000);
            log.add(ev("e-" + e, 1, ++seq[e], rnd.nextInt(4) == 0 ? removed(b) : stored(b, b + 1)));
        }
        KvIndex a = new KvIndex();
        KvIndex b = new KvIndex();
        log.forEach(a::apply);
        log.forEach(b::apply);
        List<byte[]> probe = List.of(h(10), h(11), h(12));
        assertThat(a.matches(probe)).isEqualTo(b.matches(probe));
        assertThat(a.entries()).isEqualTo(b.entries()).isPositive();
        assertThat((double) a.bytes() / a.entries()).as("bytes per (engine, block) entry").isLessThanOrEqualTo(32.0);
    }

    @Test
    void theBlockSetSurvivesChurn() {
        BlockSet s = new BlockSet();
        java.util.Set<Long> ref = new java.util.HashSet<>();
        Random rnd = new Random(9);
        for (int i = 0; i < 200_000; i++) {
            long k = rnd.nextInt(5_000) * 0x9E3779B97F4A7C15L;
            if (rnd.nextBoolean()) {
                assertThat(s.add(k)).isEqualTo(ref.add(k));
            } else {
                assertThat(s.remove(k)).isEqualTo(ref.remove(k));
            }
        }
        assertThat(s.size()).isEqualTo(ref.size());
        for (long k : ref) {
            assertThat(s.contains(k)).isTrue();
        }
    }
}
