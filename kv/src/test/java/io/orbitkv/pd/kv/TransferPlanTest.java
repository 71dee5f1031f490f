package io.orbitkv.pd.kv;

import static io.orbitkv.pd.kv.BlockRuns.run;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.events.BlockRun;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

class TransferPlanTest {

    private final KvGeometry g = KvTestData.small(2, 64); // 4 regions of 32 KiB pages

    @Test
    void contiguousOnBothSidesIsOneSpanPerRegion() {
        TransferPlan p = TransferPlan.build(g, List.of(run(0, 16)), g, List.of(run(32, 16)));
        assertThat(p.pairRuns()).isEqualTo(1);
        assertThat(p.spans()).isEqualTo(4);
        assertThat(p.totalBytes()).isEqualTo(16L * 4 * 32 * 1024);
        assertThat(p.spanRegion(3)).isEqualTo(3);
        assertThat(p.spanSourceOffset(3)).isZero();
        assertThat(p.spanDestOffset(3)).isEqualTo(32L * 32 * 1024);
        assertThat(p.spanLength(3)).isEqualTo(16L * 32 * 1024);
    }

    @Test
    void runBoundariesOfEitherSideSplitPairRunsAndAdjacentRunsMerge() {
        // source 0..5, 10..12 ; destination 20..22, 23..24 (adjacent: merges), 40..42
        TransferPlan p = TransferPlan.build(g, List.of(run(0, 6), run(10, 3)), g, List.of(run(20, 3), run(23, 2), run(40, 4)));
        assertThat(pairs(p)).containsExactly(List.of(0, 20, 5), List.of(5, 40, 1), List.of(10, 41, 3));
        assertThat(p.spans()).isEqualTo(3 * 4);
        assertThat(p.blocks()).isEqualTo(9);
        // region-major: the first three spans are all of region 0
        assertThat(List.of(p.spanRegion(0), p.spanRegion(2), p.spanRegion(3))).containsExactly(0, 0, 1);
    }

    @Test
    void scatteredDestinationCostsOneSpanPerPage() {
        List<BlockRun> dst = new ArrayList<>();
        for (int i = 0; i < 16; i++) {
            dst.add(run(2 * i + 1, 1));
        }
        TransferPlan p = TransferPlan.build(g, List.of(run(0, 16)), g, dst);
        assertThat(p.pairRuns()).isEqualTo(16);
        assertThat(p.spans()).isEqualTo(64);
        assertThat(p.pages()).isEqualTo(64);
    }

    @Test
    void refusesWhatCannotBeCopiedWithAReason() {
        assertThatThrownBy(() -> TransferPlan.build(g, List.of(run(0, 4)), g, List.of(run(0, 5))))
                .hasMessage("source_blocks hold 4 blocks but dest_blocks 5");
        assertThatThrownBy(() -> TransferPlan.build(g, List.of(run(60, 5)), g, List.of(run(0, 5))))
                .hasMessage("source_blocks: run 60+5 is outside the pool of 64 blocks");
        assertThatThrownBy(() -> TransferPlan.build(g, List.of(run(0, 5)), g, List.of(run(0, 3), run(2, 2))))
                .hasMessage("dest_blocks: runs 0+3 and 2+2 overlap");
        KvGeometry other = KvTestData.small(3, 64);
        assertThatThrownBy(() -> TransferPlan.build(g, List.of(run(0, 1)), other, List.of(run(0, 1))))
                .hasMessage("layout: pages cannot be copied page for page: num_layers 2 (source) vs 3 (destination)");
    }

    @Test
    void applyingAPlanPutsTheIthSourceBlockIntoTheIthDestinationBlock() {
        Random rnd = new Random(42);
        KvGeometry small = KvTestData.pages(256, 200, 3);
        try (HostKvPool src = HostKvPool.allocate(small); HostKvPool dst = HostKvPool.allocate(small.withNumBlocks(150))) {
            KvTestData.fill(src, 7);
            KvTestData.sentinel(dst, (byte) 0x5A);
            for (int round = 0; round < 50; round++) {
                KvTestData.sentinel(dst, (byte) 0x5A);
                int n = 1 + rnd.nextInt(100);
                List<Integer> s = shuffledPrefix(200, n, rnd, rnd.nextBoolean());
                List<Integer> d = shuffledPrefix(150, n, rnd, rnd.nextBoolean());
                TransferPlan p = TransferPlan.build(small, BlockRuns.fromBlocks(toArray(s)), dst.geometry(), BlockRuns.fromBlocks(toArray(d)));
                assertThat(p.blocks()).isEqualTo(n);
                for (int i = 0; i < p.spans(); i++) {
                    MemorySegment.copy(src.region(p.spanRegion(i)), p.spanSourceOffset(i), dst.region(p.spanRegion(i)), p.spanDestOffset(i),
                            p.spanLength(i));
                }
                for (int i = 0; i < n; i++) {
                    for (int r = 0; r < small.regionCount(); r++) {
                        assertThat(dst.page(r, d.get(i)).mismatch(src.page(r, s.get(i)))).as("block %d of the list", i).isEqualTo(-1);
                    }
                }
                assertThat(KvTestData.verify(src, dst, p, (byte) 0x5A)).isNull();
            }
        }
    }

    private static List<Integer> shuffledPrefix(int pool, int n, Random rnd, boolean sorted) {
        List<Integer> all = new ArrayList<>();
        for (int i = 0; i < pool; i++) {
            all.add(i);
        }
        Collections.shuffle(all, rnd);
        List<Integer> out = new ArrayList<>(all.subList(0, n));
        if (sorted) {
            Collections.sort(out);
        }
        return out;
    }

    private static int[] toArray(List<Integer> l) {
        return l.stream().mapToInt(Integer::intValue).toArray();
    }

    private static List<List<Integer>> pairs(TransferPlan p) {
        List<List<Integer>> out = new ArrayList<>();
        for (int i = 0; i < p.pairRuns(); i++) {
            out.add(List.of(p.pairSource(i), p.pairDest(i), p.pairCount(i)));
        }
        return out;
    }
}
