package io.orbitkv.pd.mooncake.internal;

import static io.orbitkv.pd.kv.BlockRuns.run;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvTestData;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.mooncake.te.RequestArray;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import java.lang.foreign.Arena;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** How a plan becomes batches of WRITE requests: one per span, long spans split, targets inside the receiver's regions. */
class WriteBatcherTest {

    private static final long SRC = 0x7000_0000_0000L;
    private static final long DST = 0x5000_0000_0000L;
    private static final long STRIDE = 1L << 32;

    private static long[] bases(long base, int n) {
        long[] b = new long[n];
        for (int i = 0; i < n; i++) {
            b[i] = base + i * STRIDE;
        }
        return b;
    }

    private static long[] lengths(KvGeometry g) {
        long[] l = new long[g.regionCount()];
        java.util.Arrays.fill(l, g.regionBytes());
        return l;
    }

    private record Req(long src, long dst, long len) { }

    private static List<Req> drain(WriteBatcher b, int batch, List<Integer> sizes) {
        List<Req> out = new ArrayList<>();
        try (Arena a = Arena.ofConfined()) {
            RequestArray r = new RequestArray(a, batch);
            for (int n = b.fill(r, batch); n > 0; n = b.fill(r, batch)) {
                sizes.add(n);
                for (int i = 0; i < n; i++) {
                    assertThat(r.opcode(i)).isEqualTo(1);
                    assertThat(r.target(i)).isEqualTo(9);
                    out.add(new Req(r.source(i), r.targetOffset(i), r.length(i)));
                }
            }
        }
        return out;
    }

    @Test
    void scatteredPagesBecomeOneRequestPerPagePerRegionInBatches() {
        KvGeometry g = KvTestData.small(2, 16); // 4 regions of 16 × 32 KiB pages
        List<BlockRun> dst = List.of(run(1, 1), run(3, 1), run(5, 1), run(7, 1), run(9, 1));
        TransferPlan plan = TransferPlan.build(g, List.of(run(0, 5)), g, dst);
        WriteBatcher b = new WriteBatcher(plan, bases(SRC, 4), bases(DST, 4), lengths(g), 9, 1 << 20);
        List<Integer> sizes = new ArrayList<>();
        List<Req> reqs = drain(b, 8, sizes);
        assertThat(reqs).hasSize(plan.spans());
        assertThat(plan.spans()).isEqualTo(4 * 5);
        assertThat(sizes).containsExactly(8, 8, 4);
        assertThat(b.issuedBytes()).isEqualTo(plan.totalBytes());
        assertThat(b.issuedRequests()).isEqualTo(20);
        assertThat(b.hasMore()).isFalse();
        // Every request: the plan's span, moved into each side's address space.
        for (int i = 0; i < plan.spans(); i++) {
            int region = plan.spanRegion(i);
            assertThat(reqs.get(i)).isEqualTo(new Req(SRC + region * STRIDE + plan.spanSourceOffset(i), DST + region * STRIDE + plan.spanDestOffset(i),
                    plan.spanLength(i)));
        }
    }

    @Test
    void contiguousRunsCoalesceAndLongOnesAreSplit() {
        KvGeometry g = KvTestData.small(1, 64); // 2 regions
        TransferPlan plan = TransferPlan.build(g, List.of(run(0, 40)), g, List.of(run(10, 40)));
        assertThat(plan.spans()).isEqualTo(2); // 40 pages contiguous on both sides: one span per region
        WriteBatcher b = new WriteBatcher(plan, bases(SRC, 2), bases(DST, 2), lengths(g), 9, 256 * 1024);
        List<Integer> sizes = new ArrayList<>();
        List<Req> reqs = drain(b, 1000, sizes);
        long span = 40L * 32768;
        assertThat(reqs).hasSize(2 * 5); // 1,280 KiB per region in pieces of at most 256 KiB
        assertThat(reqs.stream().mapToLong(Req::len).sum()).isEqualTo(plan.totalBytes());
        assertThat(reqs.get(0)).isEqualTo(new Req(SRC, DST + 10 * 32768, 256 * 1024));
        assertThat(reqs.get(4)).isEqualTo(new Req(SRC + 4 * 256 * 1024, DST + 10 * 32768 + 4 * 256 * 1024, span - 4 * 256 * 1024));
        assertThat(reqs.get(5).src()).isEqualTo(SRC + STRIDE);
        assertThat(sizes).containsExactly(10);
    }

    /** A source still computing: the first {@code readyPerRegion[r]} bytes of region {@code r} are done. */
    private static io.orbitkv.pd.transport.SourceReadiness computed(KvGeometry g, long[] readyPerRegion) {
        return new io.orbitkv.pd.transport.SourceReadiness() {
            @Override
            public long readyBytes(int region, long offset, long length) {
                return Math.max(0, Math.min(length, readyPerRegion[region] - offset));
            }

            @Override
            public long version() {
                return 0;
            }

            @Override
            public boolean awaitChange(long version, long timeoutMs) {
                return false;
            }

            @Override
            public boolean complete() {
                return false;
            }

            @Override
            public boolean awaitComplete(long timeoutMs) {
                return false;
            }

            @Override
            public Integer firstToken() {
                return null;
            }

            @Override
            public String failure() {
                return null;
            }
        };
    }

    @Test
    void withASourceStillComputingEachFillTakesWhatIsComputedLowestLayerFirstAndAPartCoversItsSpansOnly() {
        KvGeometry g = KvTestData.small(3, 64); // 6 regions (3 layers × K, V)
        TransferPlan plan = TransferPlan.build(g, List.of(run(0, 20)), g, List.of(run(30, 20)));
        assertThat(plan.spans()).isEqualTo(6);
        long page = g.pageBytes();
        long[] ready = new long[6];
        // a chunked prefill: its first chunk (pages 0..9) done in layers 0 and 1, nothing of layer 2 yet
        java.util.Arrays.fill(ready, 0, 4, 10 * page);
        WriteBatcher body = new WriteBatcher(plan, 0, 4, bases(SRC, 6), bases(DST, 6), lengths(g), 9, 1 << 20); // layers 0 and 1
        assertThat(body.bytes()).isEqualTo(4 * 20 * page);
        try (Arena a = Arena.ofConfined()) {
            RequestArray r = new RequestArray(a, 32);
            assertThat(body.fill(r, 32, computed(g, ready))).isEqualTo(4); // the first chunk of each of the 4 regions
            for (int i = 0; i < 4; i++) {
                assertThat(r.source(i)).isEqualTo(SRC + i * STRIDE);
                assertThat(r.length(i)).isEqualTo(10 * page);
            }
            assertThat(body.fill(r, 32, computed(g, ready))).as("nothing more computed").isZero();
            assertThat(body.hasMore()).isTrue();
            java.util.Arrays.fill(ready, 20 * page); // the second chunk, every layer
            assertThat(body.fill(r, 32, computed(g, ready))).isEqualTo(4);
            assertThat(r.source(0)).isEqualTo(SRC + 10 * page);
            assertThat(body.hasMore()).isFalse();
            assertThat(body.issuedBytes()).isEqualTo(body.bytes());
            WriteBatcher tail = new WriteBatcher(plan, 4, 6, bases(SRC, 6), bases(DST, 6), lengths(g), 9, 1 << 20);
            assertThat(tail.fill(r, 32)).isEqualTo(2);
            assertThat(r.source(0)).isEqualTo(SRC + 4 * STRIDE);
            assertThat(r.source(1)).isEqualTo(SRC + 5 * STRIDE);
        }
    }

    @Test
    void aTargetOutsideTheReceiversRegionIsRefusedBeforeTheEngineSeesIt() {
        KvGeometry g = KvTestData.small(1, 64);
        TransferPlan plan = TransferPlan.build(g, List.of(run(0, 4)), g, List.of(run(60, 4)));
        long[] shortRegions = {32768L * 62, 32768L * 62};
        WriteBatcher b = new WriteBatcher(plan, bases(SRC, 2), bases(DST, 2), shortRegions, 9, 1 << 20);
        try (Arena a = Arena.ofConfined()) {
            assertThatThrownBy(() -> b.fill(new RequestArray(a, 4), 4)).isInstanceOfSatisfying(TransferException.class,
                    e -> assertThat(e.kind()).isEqualTo(TransferError.OUT_OF_RANGE)).hasMessageContaining("would leave the receiver's registered region");
        }
        assertThatThrownBy(() -> new WriteBatcher(plan, bases(SRC, 2), bases(DST, 1), new long[1], 9, 1 << 20))
                .isInstanceOfSatisfying(TransferException.class, e -> assertThat(e.kind()).isEqualTo(TransferError.LAYOUT_MISMATCH));
    }
}
