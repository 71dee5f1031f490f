package io.orbitkv.pd.kv;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.KvLayout;
import io.orbitkv.pd.events.KvSplit;
import org.junit.jupiter.api.Test;

class KvGeometryTest {

    @Test
    void separateLayoutHasKAndVRegionsPerLayer() {
        KvGeometry g = new KvGeometry(32, KvSplit.SEPARATE, 16, 8, 128, Dtype.BF16, 32 * 1024, 4096);
        assertThat(g.regionCount()).isEqualTo(64);
        assertThat(g.region(3, 1)).isEqualTo(7);
        assertThat(g.describeRegion(7)).isEqualTo("layer 3 V");
        assertThat(g.partName(6)).isEqualTo("K");
        assertThat(g.regionBytes()).isEqualTo(4096L * 32 * 1024);
        assertThat(g.bytesPerBlock()).isEqualTo(64L * 32 * 1024);
        // 128 blocks of an 8B model: the ~256 MiB of a 2,000-token prompt.
        assertThat(128 * g.bytesPerBlock()).isEqualTo(256L << 20);
    }

    @Test
    void fusedLayoutHasOneRegionPerLayerAndTakesPageBytesAsGiven() {
        KvGeometry g = new KvGeometry(4, KvSplit.FUSED, 64, 1, 576, Dtype.BF16, 64 * 576 * 2, 100);
        assertThat(g.regionCount()).isEqualTo(4);
        assertThat(g.partName(2)).isEqualTo("KV");
    }

    @Test
    void pageBytesMustMatchTheShapeForSeparateLayouts() {
        assertThatThrownBy(() -> new KvGeometry(2, KvSplit.SEPARATE, 16, 8, 128, Dtype.BF16, 1000, 10))
                .hasMessageStartingWith("layout.page_bytes: must be block_size_tokens × num_kv_heads × head_dim × dtype bytes = 16 × 8 × 128 × 2 = 32768")
                .hasMessageEndingWith("got 1000");
    }

    @Test
    void badFieldsAreNamed() {
        assertThatThrownBy(() -> new KvGeometry(0, KvSplit.SEPARATE, 16, 8, 128, Dtype.BF16, 32768, 10))
                .hasMessage("layout.num_layers: must be >= 1, got 0");
        assertThatThrownBy(() -> new KvGeometry(1, KvSplit.UNKNOWN, 16, 8, 128, Dtype.BF16, 32768, 10))
                .hasMessage("layout.kv_split: must be SEPARATE or FUSED, got UNKNOWN");
        assertThatThrownBy(() -> new KvGeometry(1, KvSplit.SEPARATE, 16, 8, 128, Dtype.BF16, 32768, 0))
                .hasMessage("layout.num_blocks: must be >= 1, got 0");
        assertThatThrownBy(() -> KvGeometry.of(null)).hasMessage("layout: required");
    }

    @Test
    void roundTripsThroughTheContract() {
        KvGeometry g = KvTestData.small(2, 10);
        KvLayout l = g.toLayout(1, 2);
        assertThat(l.getTpRank()).isEqualTo(1);
        assertThat(KvGeometry.of(l)).isEqualTo(g);
    }

    @Test
    void incompatibilityNamesEveryDifferingFieldButIgnoresPoolSize() {
        KvGeometry a = KvTestData.small(2, 10);
        assertThat(a.incompatibility(a.withNumBlocks(999))).isNull();
        KvGeometry b = new KvGeometry(3, KvSplit.SEPARATE, 16, 8, 64, Dtype.FP32, 32 * 1024, 10);
        // in the decider's order of fields (its reasons are replayed from old logs)
        assertThat(a.incompatibility(b)).isEqualTo("num_layers 2 (source) vs 3 (destination), dtype BF16 (source) vs FP32 (destination), "
                + "head_dim 128 (source) vs 64 (destination)");
    }

    @Test
    void layoutIncompatibilityAlsoNamesTheTensorParallelSizeButIgnoresRankAndPoolSize() {
        KvGeometry g = KvTestData.small(2, 10);
        assertThat(KvGeometry.incompatibility(g.toLayout(0, 2), "prefill", g.withNumBlocks(99).toLayout(1, 2), "decode")).isNull();
        KvLayout fp16 = KvLayout.newBuilder(g.toLayout(0, 4)).setDtype(Dtype.FP16).build();
        assertThat(KvGeometry.incompatibility(g.toLayout(0, 2), "prefill", fp16, "decode"))
                .isEqualTo("dtype BF16 (prefill) vs FP16 (decode), tp_size 2 (prefill) vs 4 (decode)");
    }
}
