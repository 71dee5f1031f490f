package io.orbitkv.pd.gpu;

import static io.orbitkv.pd.kv.BlockRuns.run;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.kv.BlockRuns;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvPool;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.List;
import java.util.Optional;
import org.junit.jupiter.api.Test;

/** Plan → kernel arguments: addresses, coalescing, chunking, the byte encoding the kernel reads, and the bounds checks. */
class RunTableTest {

    private static final int PAGE = 32 * 1024;
    /** 2 layers × K/V = 4 regions of 64 blocks. */
    private final KvGeometry g = new KvGeometry(2, KvSplit.SEPARATE, 16, 8, 128, Dtype.BF16, PAGE, 64);

    /** A pool that is only addresses: region r at {@code base + r × stride}. */
    private record AddressPool(KvGeometry geometry, long base, long stride) implements KvPool {
        @Override
        public String location() {
            return "cuda:0";
        }

        @Override
        public long baseAddress(int region) {
            return base + region * stride;
        }

        @Override
        public Optional<MemorySegment> hostRegion(int region) {
            return Optional.empty();
        }

        @Override
        public void close() { }
    }

    private final AddressPool src = new AddressPool(g, 0x7000_0000_0000L, 1L << 30);
    private final AddressPool dst = new AddressPool(g, 0x7100_0000_0000L, 1L << 30);

    private RunTable table(List<BlockRun> s, List<BlockRun> d) {
        return RunTable.build(TransferPlan.build(g, s, g, d), src, dst, BlockRuns.intervals(d));
    }

    @Test
    void scatteredPagesBecomeOneEntryPerPageWithAbsoluteAddresses() {
        RunTable t = table(List.of(run(5, 1), run(9, 1), run(3, 1)), List.of(run(40, 1), run(2, 1), run(17, 1)));
        assertThat(t.size()).isEqualTo(3 * 4);
        assertThat(t.bytes()).isEqualTo(3L * 4 * PAGE);
        // region-major: region 0's three pages first, in token order
        assertThat(t.source(0)).isEqualTo(src.baseAddress(0) + 5L * PAGE);
        assertThat(t.dest(0)).isEqualTo(dst.baseAddress(0) + 40L * PAGE);
        assertThat(t.source(1)).isEqualTo(src.baseAddress(0) + 9L * PAGE);
        assertThat(t.dest(2)).isEqualTo(dst.baseAddress(0) + 17L * PAGE);
        assertThat(t.source(11)).isEqualTo(src.baseAddress(3) + 3L * PAGE);
        assertThat(t.dest(11)).isEqualTo(dst.baseAddress(3) + 17L * PAGE);
        for (int i = 0; i < t.size(); i++) {
            assertThat(t.length(i)).isEqualTo(PAGE);
        }
    }

    @Test
    void aRangeOfSpansIsThoseSpansCopiesInTheSameOrder() {
        List<BlockRun> s = List.of(run(5, 1), run(9, 1), run(3, 1));
        List<BlockRun> d = List.of(run(40, 1), run(2, 1), run(17, 1));
        TransferPlan plan = TransferPlan.build(g, s, g, d);
        RunTable whole = RunTable.build(plan, src, dst, BlockRuns.intervals(d));
        RunTable first = RunTable.build(plan, src, dst, BlockRuns.intervals(d), 0, 6); // regions 0 and 1: layer 0's K and V
        RunTable rest = RunTable.build(plan, src, dst, BlockRuns.intervals(d), 6, plan.spans());
        assertThat(first.size() + rest.size()).isEqualTo(whole.size());
        for (int i = 0; i < whole.size(); i++) {
            RunTable part = i < first.size() ? first : rest;
            int j = i < first.size() ? i : i - first.size();
            assertThat(part.source(j)).isEqualTo(whole.source(i));
            assertThat(part.dest(j)).isEqualTo(whole.dest(i));
            assertThat(part.length(j)).isEqualTo(whole.length(i));
        }
        assertThatThrownBy(() -> RunTable.build(plan, src, dst, null, 4, plan.spans() + 1)).isInstanceOf(IllegalArgumentException.class);
    }

    @Test
    void runsThatContinueOnBothSidesAreOneEntryPerRegion() {
        // 8 blocks contiguous on both sides, given as two runs on the source side: still one copy per region
        RunTable t = table(List.of(run(10, 3), run(13, 5)), List.of(run(30, 8)));
        assertThat(t.size()).isEqualTo(4);
        assertThat(t.length(0)).isEqualTo(8L * PAGE);
        assertThat(t.dest(3)).isEqualTo(dst.baseAddress(3) + 30L * PAGE);
    }

    @Test
    void regionsLaidOutBackToBackCoalesceIntoOneCopy() {
        AddressPool a = new AddressPool(g, 0x10_0000_0000L, g.regionBytes());
        AddressPool b = new AddressPool(g, 0x20_0000_0000L, g.regionBytes());
        List<BlockRun> all = List.of(run(0, 64));
        RunTable t = RunTable.build(TransferPlan.build(g, all, g, all), a, b, BlockRuns.intervals(all));
        assertThat(t.size()).isEqualTo(1);
        assertThat(t.bytes()).isEqualTo(g.poolBytes());
        assertThat(t.source(0)).isEqualTo(a.baseAddress(0));
    }

    @Test
    void chunkingCutsLongRunsForTheKernelAndKeepsEveryByte() {
        RunTable t = table(List.of(run(0, 5)), List.of(run(20, 5))); // 4 entries of 160 KiB
        RunTable c = t.chunked(64 * 1024);
        assertThat(c.size()).isEqualTo(4 * 3);
        assertThat(c.bytes()).isEqualTo(t.bytes());
        assertThat(c.length(0)).isEqualTo(64 * 1024);
        assertThat(c.length(2)).isEqualTo(32 * 1024);
        assertThat(c.source(1)).isEqualTo(t.source(0) + 64 * 1024);
        assertThat(c.dest(2)).isEqualTo(t.dest(0) + 128 * 1024);
        assertThat(t.chunked(1L << 20)).isSameAs(t);
        assertThatThrownBy(() -> t.chunked(8)).hasMessageContaining("chunk-bytes");
    }

    @Test
    void theEncodingIsThreeLittleEndianWordsPerEntryAndReadsBack() {
        RunTable t = table(List.of(run(1, 2)), List.of(run(7, 1), run(3, 1)));
        try (Arena a = Arena.ofConfined()) {
            MemorySegment out = a.allocate(t.encodedBytes());
            t.writeTo(out);
            ByteBuffer bb = out.asByteBuffer().order(ByteOrder.LITTLE_ENDIAN);
            assertThat(t.encodedBytes()).isEqualTo(t.size() * 24L);
            assertThat(bb.getLong(0)).isEqualTo(src.baseAddress(0) + PAGE);
            assertThat(bb.getLong(8)).isEqualTo(dst.baseAddress(0) + 7L * PAGE);
            assertThat(bb.getLong(16)).isEqualTo(PAGE);
            assertThat(bb.getLong(24 + 8)).isEqualTo(dst.baseAddress(0) + 3L * PAGE);
            RunTable back = RunTable.readFrom(out, t.size());
            for (int i = 0; i < t.size(); i++) {
                assertThat(new long[] {back.source(i), back.dest(i), back.length(i)}).containsExactly(t.source(i), t.dest(i), t.length(i));
            }
            assertThatThrownBy(() -> t.writeTo(out.asSlice(0, 24))).hasMessageContaining("needs " + t.encodedBytes());
        }
    }

    @Test
    void batchArraysCarryTheSameCopies() {
        RunTable t = table(List.of(run(1, 1), run(9, 1)), List.of(run(4, 2)));
        try (Arena a = Arena.ofConfined()) {
            MemorySegment d = a.allocate(ValueLayout.JAVA_LONG, 3);
            MemorySegment s = a.allocate(ValueLayout.JAVA_LONG, 3);
            MemorySegment n = a.allocate(ValueLayout.JAVA_LONG, 3);
            t.writeBatchArrays(1, 3, d, s, n);
            for (int i = 0; i < 3; i++) {
                assertThat(d.getAtIndex(ValueLayout.JAVA_LONG, i)).isEqualTo(t.dest(1 + i));
                assertThat(s.getAtIndex(ValueLayout.JAVA_LONG, i)).isEqualTo(t.source(1 + i));
                assertThat(n.getAtIndex(ValueLayout.JAVA_LONG, i)).isEqualTo(PAGE);
            }
        }
    }

    @Test
    void aPlanForALargerPoolIsRefusedBeforeAnyAddressIsMade() {
        KvGeometry bigger = g.withNumBlocks(128);
        TransferPlan plan = TransferPlan.build(g, List.of(run(0, 2)), bigger, List.of(run(100, 2)));
        assertThatThrownBy(() -> RunTable.build(plan, src, dst, null))
                .isInstanceOfSatisfying(TransferException.class, e -> assertThat(e.kind()).isEqualTo(TransferError.OUT_OF_RANGE))
                .hasMessageContaining("destination blocks 100..101 are outside the destination pool of 64 blocks");
    }

    @Test
    void writesOutsideTheAuthorizedPagesAreRefused() {
        TransferPlan plan = TransferPlan.build(g, List.of(run(0, 4)), g, List.of(run(10, 4)));
        assertThatThrownBy(() -> RunTable.build(plan, src, dst, BlockRuns.intervals(List.of(run(10, 3)))))
                .isInstanceOfSatisfying(TransferException.class, e -> assertThat(e.kind()).isEqualTo(TransferError.OUT_OF_RANGE))
                .hasMessageContaining("not among the order's destination pages");
    }

    @Test
    void poolsOfAnotherPageShapeAreRefused() {
        KvGeometry other = new KvGeometry(2, KvSplit.SEPARATE, 8, 8, 128, Dtype.BF16, PAGE / 2, 64);
        TransferPlan plan = TransferPlan.build(g, List.of(run(0, 1)), g, List.of(run(0, 1)));
        assertThatThrownBy(() -> RunTable.build(plan, src, new AddressPool(other, 0x7200_0000_0000L, 1L << 30), null))
                .isInstanceOfSatisfying(TransferException.class, e -> assertThat(e.kind()).isEqualTo(TransferError.LAYOUT_MISMATCH));
    }

    @Test
    void copiesWithinOnePoolMustNotReadWhatTheyWrite() {
        TransferPlan overlapping = TransferPlan.build(g, List.of(run(0, 4)), g, List.of(run(2, 4)));
        assertThatThrownBy(() -> RunTable.build(overlapping, src, src, null)).hasMessageContaining("blocks 2..3 are both read and written");
        TransferPlan disjoint = TransferPlan.build(g, List.of(run(0, 4)), g, List.of(run(4, 4)));
        assertThat(RunTable.build(disjoint, src, src, null).bytes()).isEqualTo(4L * 4 * PAGE);
    }
}
