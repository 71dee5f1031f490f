package io.orbitkv.pd.kv;

import static io.orbitkv.pd.kv.BlockRuns.run;
import static org.assertj.core.api.Assertions.assertThat;

import java.util.List;
import org.junit.jupiter.api.Test;

class BlockRunsTest {

    @Test
    void pageListsCoalesceIntoMaximalRunsInOrder() {
        assertThat(BlockRuns.fromBlocks(4, 5, 6, 9, 10, 2, 3, 7)).containsExactly(run(4, 3), run(9, 2), run(2, 2), run(7, 1));
        assertThat(BlockRuns.fromBlocks()).isEmpty();
        assertThat(BlockRuns.toBlocks(List.of(run(9, 2), run(2, 2)))).containsExactly(9, 10, 2, 3);
    }

    @Test
    void problemsNameTheFieldAndTheRun() {
        assertThat(BlockRuns.problem("dest_blocks", List.of(run(0, 4), run(10, 2)), 16, 10)).isNull();
        assertThat(BlockRuns.problem("dest_blocks", List.of(), 16, 10)).isEqualTo("dest_blocks: no blocks");
        assertThat(BlockRuns.problem("dest_blocks", List.of(run(15, 2)), 16, 10))
                .isEqualTo("dest_blocks: run 15+2 is outside the pool of 16 blocks");
        assertThat(BlockRuns.problem("dest_blocks", List.of(run(-1, 2)), 16, 10)).contains("run -1+2 is outside");
        assertThat(BlockRuns.problem("dest_blocks", List.of(run(3, 0)), 16, 10)).contains("run 3+0 is outside");
        assertThat(BlockRuns.problem("dest_blocks", List.of(run(8, 4), run(2, 7)), 16, 10))
                .isEqualTo("dest_blocks: runs 2+7 and 8+4 overlap");
        assertThat(BlockRuns.problem("dest_blocks", List.of(run(0, 1), run(1, 1), run(2, 1)), 16, 2))
                .isEqualTo("dest_blocks: 3 runs, more than the limit of 2");
        // Start + count beyond int range must not wrap around.
        assertThat(BlockRuns.problem("b", List.of(run(Integer.MAX_VALUE, Integer.MAX_VALUE)), 16, 2)).contains("outside");
    }

    @Test
    void intervalsAnswerWhetherARangeIsAuthorized() {
        BlockRuns.Intervals iv = BlockRuns.intervals(List.of(run(10, 5), run(2, 3), run(5, 1)));
        // 2..5 and 5 merge into [2, 6); 10..14 stays apart.
        assertThat(iv.starts()).containsExactly(2, 10);
        assertThat(iv.ends()).containsExactly(6, 15);
        assertThat(iv.covers(2, 6)).isTrue();
        assertThat(iv.covers(3, 4)).isTrue();
        assertThat(iv.covers(10, 15)).isTrue();
        assertThat(iv.covers(5, 7)).isFalse();
        assertThat(iv.covers(0, 1)).isFalse();
        assertThat(iv.covers(14, 16)).isFalse();
        assertThat(iv.covers(6, 10)).isFalse();
        assertThat(iv.covers(4, 4)).isFalse();
    }
}
