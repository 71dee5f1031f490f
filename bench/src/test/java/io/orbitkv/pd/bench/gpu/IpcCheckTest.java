package io.orbitkv.pd.bench.gpu;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.kv.BlockRuns;
import io.orbitkv.pd.kv.KvGeometry;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

/** The GPU suite's host-side pieces, checked here so that a GPU run is not spent on them. */
class IpcCheckTest {

    @Test
    void geometriesOfTheSuiteAreValidLayouts() {
        KvGeometry a = IpcCheck.geometry("SEPARATE:4:16:256");
        assertThat(a.pageBytes()).isEqualTo(32 * 1024);
        assertThat(a.regionCount()).isEqualTo(8);
        KvGeometry b = IpcCheck.geometry("FUSED:3:4100:300");
        assertThat(b.pageBytes()).isEqualTo(4100);
        assertThat(b.regionCount()).isEqualTo(3);
        assertThat(GpuBench.geometry(16).poolBytes()).isEqualTo(GpuBench.geometry(128).poolBytes()).isEqualTo(4 * GpuBench.MOVED);
    }

    @Test
    void runsSurviveTheLineProtocol() {
        var runs = List.of(BlockRuns.run(3, 2), BlockRuns.run(90, 1));
        assertThat(IpcCheck.runs(IpcCheck.runs(runs))).isEqualTo(runs);
        assertThat(IpcCheck.runs("-")).isEmpty();
        assertThat(IpcCheck.runs(List.of())).isEqualTo("-");
    }

    @Test
    void randomPageTablesAreDistinctBlocksWithSomeStretches() {
        SplittableRandom rnd = new SplittableRandom(9);
        for (int n : new int[] {1, 17, 192}) {
            int[] b = IpcCheck.randomBlocks(rnd, 192, n);
            assertThat(Arrays.stream(b).distinct().count()).isEqualTo(n);
            assertThat(Arrays.stream(b).allMatch(x -> x >= 0 && x < 192)).isTrue();
        }
        int[] all = IpcCheck.randomBlocks(rnd, 192, 192);
        int runs = BlockRuns.fromBlocks(all).size();
        assertThat(runs).isBetween(192 / 8, 191);
        int[] scattered = GpuBench.scattered(rnd, 512, 128);
        assertThat(Arrays.stream(scattered).distinct().count()).isEqualTo(128);
    }

    @Test
    void pagePatternsDependOnSeedRegionAndBlockAndCoverOddSizes() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment p1 = a.allocate(4100);
            MemorySegment p2 = a.allocate(4100);
            PagePattern.fill(p1, 5, 1, 2);
            PagePattern.fill(p2, 5, 1, 2);
            assertThat(p1.mismatch(p2)).isEqualTo(-1);
            PagePattern.fill(p2, 5, 1, 3);
            assertThat(p1.mismatch(p2)).isBetween(0L, 7L);
            PagePattern.fill(p2, 5, 2, 2);
            assertThat(p1.mismatch(p2)).isNotEqualTo(-1);
            PagePattern.fill(p2, 6, 1, 2);
            assertThat(p1.mismatch(p2)).isNotEqualTo(-1);
            // the tail bytes past the last whole word are written too
            MemorySegment tail = a.allocate(4100);
            tail.fill((byte) 0);
            PagePattern.fill(tail, 5, 1, 2);
            assertThat(tail.asSlice(4096, 4).mismatch(p1.asSlice(4096, 4))).isEqualTo(-1);
            assertThat(tail.asSlice(4096, 4).toArray(java.lang.foreign.ValueLayout.JAVA_BYTE)).isNotEqualTo(new byte[4]);
        }
    }

    @Test
    void resultFilesAreJson() throws Exception {
        String s = Json.write(Map.of("a", List.of(1, 2.5, "x\"y", Double.NaN), "b", Map.of()));
        var tree = new com.fasterxml.jackson.databind.ObjectMapper().readTree(s);
        assertThat(tree.get("a").toString()).isEqualTo("[1,2.5,\"x\\\"y\",null]");
        assertThat(tree.get("b").isEmpty()).isTrue();
    }
}
