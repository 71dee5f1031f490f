package io.orbitkv.pd.engine.client;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import org.junit.jupiter.api.Test;

class BlockAllocatorTest {

    @Test
    void allocatesContiguousRunsAndFreesByOwner() {
        BlockAllocator a = new BlockAllocator(10);
        assertThat(a.allocate("r1", 3)).hasValueSatisfying(b -> assertThat(b).containsExactly(0, 1, 2));
        assertThat(a.allocate("r2", 4)).hasValueSatisfying(b -> assertThat(b).containsExactly(3, 4, 5, 6));
        assertThat(a.free("r1")).containsExactly(0, 1, 2);
        // 3 free at the front, 3 at the back: a run of 3 fits at 0; a request of 5 gets scattered blocks.
        assertThat(a.allocate("r3", 5)).hasValueSatisfying(b -> assertThat(b).containsExactly(0, 1, 2, 7, 8));
        assertThat(a.usedBlocks()).isEqualTo(9);
        assertThat(a.allocate("r4", 2)).isEmpty();
        assertThat(a.free("nobody")).isEmpty();
        assertThat(a.free("r2")).hasSize(4);
        assertThat(a.free("r3")).hasSize(5);
        assertThat(a.usedBlocks()).isZero();
        assertThat(a.holders()).isZero();
    }

    @Test
    void oneHoldingPerOwner() {
        BlockAllocator a = new BlockAllocator(4);
        a.allocate("r", 1);
        assertThatThrownBy(() -> a.allocate("r", 1)).isInstanceOf(IllegalStateException.class);
    }
}
