package io.orbitkv.pd.gpu;

import io.orbitkv.pd.kv.BlockRuns;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvPool;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.ByteOrder;
import java.util.Arrays;

/**
 * A transfer order as device copies: entries of (source address, destination address, length), what one kernel
 * launch or one {@code cuMemcpyBatchAsync} executes. Built from a {@link TransferPlan} and the two pools' region
 * base addresses; entries whose source and destination both continue where the previous one ended are merged, so a
 * contiguous order is a few large entries and a scattered one is one entry per page.
 *
 * <p>Kernel encoding ({@link #writeTo}): {@link #ENTRY_BYTES} per entry, three little-endian 64-bit words, the
 * layout of {@code struct KvRun} in {@code kv_copy.cu}. {@link #chunked} cuts entries into pieces of at most
 * {@code maxChunk} bytes so that a long run spreads over many thread blocks.
 *
 * <p>Immutable.
 */
public final class RunTable {

    /** Bytes per encoded entry: {@code {u64 src, u64 dst, u64 len}}. */
    public static final int ENTRY_BYTES = 24;
    /** Largest chunk: the kernel indexes within an entry with 32-bit counters. */
    public static final long MAX_CHUNK = 1L << 30;

    private static final ValueLayout.OfLong LE_LONG = ValueLayout.JAVA_LONG_UNALIGNED.withOrder(ByteOrder.LITTLE_ENDIAN);

    private final long[] src;
    private final long[] dst;
    private final long[] len;
    private final long bytes;

    private RunTable(long[] src, long[] dst, long[] len) {
        this.src = src;
        this.dst = dst;
        this.len = len;
        long b = 0;
        for (long l : len) {
            b += l;
        }
        this.bytes = b;
    }

    /** A table of the given entries, merged where they continue each other (tests, benchmarks). */
    public static RunTable of(long[] src, long[] dst, long[] len) {
        if (src.length != dst.length || src.length != len.length) {
            throw new IllegalArgumentException("src, dst and len differ in length");
        }
        Builder b = new Builder(src.length);
        for (int i = 0; i < src.length; i++) {
            b.add(src[i], dst[i], len[i]);
        }
        return b.build();
    }

    /**
     * The copies of {@code plan} from {@code source} into {@code dest} (region-major, like the plan's spans), after
     * checking that every pair run lies inside both pools and, when {@code authorized} is given, only inside those
     * destination blocks.
     *
     * @throws TransferException {@link TransferError#OUT_OF_RANGE} naming the pair run, or
     *                           {@link TransferError#LAYOUT_MISMATCH} when the pools' page shapes differ from the plan's
     */
    public static RunTable build(TransferPlan plan, KvPool source, KvPool dest, BlockRuns.Intervals authorized) {
        return build(plan, source, dest, authorized, 0, plan.spans());
    }

    /**
     * The copies of the plan's spans {@code [fromSpan, toSpan)} only (a push sent layer by layer copies each group of
     * layers once computed: spans are region-major, so a range of them is a range of layers), after the same checks of
     * the whole plan as {@link #build(TransferPlan, KvPool, KvPool, BlockRuns.Intervals)}.
     */
    public static RunTable build(TransferPlan plan, KvPool source, KvPool dest, BlockRuns.Intervals authorized, int fromSpan, int toSpan) {
        if (fromSpan < 0 || toSpan > plan.spans() || fromSpan > toSpan) {
            throw new IllegalArgumentException("spans " + fromSpan + ".." + toSpan + " of a plan of " + plan.spans());
        }
        KvGeometry sg = source.geometry();
        KvGeometry dg = dest.geometry();
        String mismatch = plan.source().incompatibility(sg);
        if (mismatch == null) {
            mismatch = plan.dest().incompatibility(dg);
        }
        if (mismatch != null) {
            throw new TransferException(TransferError.LAYOUT_MISMATCH, "plan and pools differ in page shape: " + mismatch);
        }
        // Every span of a pair run covers the same blocks in every region, so the bounds and the authorization are
        // checked once per pair run (a few hundred), not once per span (one per page and region: thousands).
        for (int p = 0; p < plan.pairRuns(); p++) {
            long s = plan.pairSource(p);
            long d = plan.pairDest(p);
            long n = plan.pairCount(p);
            if (s < 0 || n < 1 || s + n > sg.numBlocks()) {
                throw new TransferException(TransferError.OUT_OF_RANGE, "pair run " + p + ": source blocks " + s + ".." + (s + n - 1)
                        + " are outside the source pool of " + sg.numBlocks() + " blocks");
            }
            if (d < 0 || d + n > dg.numBlocks()) {
                throw new TransferException(TransferError.OUT_OF_RANGE, "pair run " + p + ": destination blocks " + d + ".." + (d + n - 1)
                        + " are outside the destination pool of " + dg.numBlocks() + " blocks");
            }
            if (authorized != null && !authorized.covers(d, d + n)) {
                throw new TransferException(TransferError.OUT_OF_RANGE, "pair run " + p + ": write to blocks " + d + ".." + (d + n - 1)
                        + ", which are not among the order's destination pages");
            }
        }
        if (sg.regionCount() != dg.regionCount()) {
            throw new TransferException(TransferError.LAYOUT_MISMATCH, "source has " + sg.regionCount() + " regions, destination " + dg.regionCount());
        }
        boolean samePool = source == dest || sg.regionCount() > 0 && source.baseAddress(0) == dest.baseAddress(0);
        if (samePool) {
            checkNoOverlap(plan);
        }
        Builder b = new Builder(toSpan - fromSpan);
        for (int k = fromSpan; k < toSpan; k++) { // span k: region k / pairRuns, pair run k % pairRuns (TransferPlan's order)
            int r = plan.spanRegion(k);
            b.add(source.baseAddress(r) + plan.spanSourceOffset(k), dest.baseAddress(r) + plan.spanDestOffset(k), plan.spanLength(k));
        }
        return b.build();
    }

    private static void checkNoOverlap(TransferPlan plan) {
        // Source runs are disjoint (the plan checked): sort them by start, then look each destination run up.
        int n = plan.pairRuns();
        long[] packed = new long[n];
        for (int p = 0; p < n; p++) {
            packed[p] = ((long) plan.pairSource(p) << 32) | p;
        }
        Arrays.sort(packed);
        for (int p = 0; p < n; p++) {
            long ds = plan.pairDest(p);
            long de = ds + plan.pairCount(p);
            // the last source run starting before de is the only one that can overlap [ds, de)
            int lo = 0;
            int hi = n - 1;
            while (lo <= hi) {
                int mid = (lo + hi) >>> 1;
                if ((packed[mid] >>> 32) < de) {
                    lo = mid + 1;
                } else {
                    hi = mid - 1;
                }
            }
            if (hi >= 0) {
                int q = (int) packed[hi];
                long ss = plan.pairSource(q);
                long se = ss + plan.pairCount(q);
                if (se > ds) {
                    throw new TransferException(TransferError.OUT_OF_RANGE, "source and destination are the same pool and blocks "
                            + Math.max(ds, ss) + ".." + (Math.min(de, se) - 1) + " are both read and written");
                }
            }
        }
    }

    /** The same copies cut into entries of at most {@code maxChunk} bytes (every entry but each run's last is exactly that). */
    public RunTable chunked(long maxChunk) {
        if (maxChunk < 16 || maxChunk > MAX_CHUNK) {
            throw new IllegalArgumentException("transfer.cuda.chunk-bytes: must be 16.." + MAX_CHUNK + ", got " + maxChunk);
        }
        int n = 0;
        for (long l : len) {
            // most entries are one page, shorter than a chunk: no division for them
            n = Math.addExact(n, l <= maxChunk ? 1 : Math.toIntExact((l + maxChunk - 1) / maxChunk));
        }
        if (n == len.length) {
            return this;
        }
        long[] s = new long[n];
        long[] d = new long[n];
        long[] l = new long[n];
        int k = 0;
        for (int i = 0; i < len.length; i++) {
            for (long off = 0; off < len[i]; off += maxChunk) {
                s[k] = src[i] + off;
                d[k] = dst[i] + off;
                l[k] = Math.min(maxChunk, len[i] - off);
                k++;
            }
        }
        return new RunTable(s, d, l);
    }

    public int size() {
        return len.length;
    }

    public long source(int i) {
        return src[i];
    }

    public long dest(int i) {
        return dst[i];
    }

    public long length(int i) {
        return len[i];
    }

    /** Bytes copied by the whole table. */
    public long bytes() {
        return bytes;
    }

    /** Bytes of the kernel encoding. */
    public long encodedBytes() {
        return (long) len.length * ENTRY_BYTES;
    }

    /** Writes the kernel encoding at the start of {@code out} (which must hold {@link #encodedBytes()}). */
    public void writeTo(MemorySegment out) {
        if (out.byteSize() < encodedBytes()) {
            throw new IllegalArgumentException("run table needs " + encodedBytes() + " bytes, buffer has " + out.byteSize());
        }
        long o = 0;
        for (int i = 0; i < len.length; i++) {
            out.set(LE_LONG, o, src[i]);
            out.set(LE_LONG, o + 8, dst[i]);
            out.set(LE_LONG, o + 16, len[i]);
            o += ENTRY_BYTES;
        }
    }

    /** Writes the three arrays {@code cuMemcpyBatchAsync} takes, entries {@code [from, from + count)}, as native 64-bit values. */
    public void writeBatchArrays(int from, int count, MemorySegment dsts, MemorySegment srcs, MemorySegment sizes) {
        for (int i = 0; i < count; i++) {
            dsts.setAtIndex(ValueLayout.JAVA_LONG, i, dst[from + i]);
            srcs.setAtIndex(ValueLayout.JAVA_LONG, i, src[from + i]);
            sizes.setAtIndex(ValueLayout.JAVA_LONG, i, len[from + i]);
        }
    }

    /** Reads back a kernel encoding (tests, and a reference for what the kernel sees). */
    public static RunTable readFrom(MemorySegment in, int entries) {
        long[] s = new long[entries];
        long[] d = new long[entries];
        long[] l = new long[entries];
        for (int i = 0; i < entries; i++) {
            long o = (long) i * ENTRY_BYTES;
            s[i] = in.get(LE_LONG, o);
            d[i] = in.get(LE_LONG, o + 8);
            l[i] = in.get(LE_LONG, o + 16);
        }
        return new RunTable(s, d, l);
    }

    @Override
    public String toString() {
        return "RunTable[" + len.length + " entries, " + bytes + " bytes]";
    }

    /** Accumulates entries, merging one that continues the previous on both sides. */
    private static final class Builder {
        private long[] s;
        private long[] d;
        private long[] l;
        private int n;

        Builder(int capacity) {
            int c = Math.max(1, capacity);
            s = new long[c];
            d = new long[c];
            l = new long[c];
        }

        void add(long src, long dst, long len) {
            if (len < 1) {
                throw new IllegalArgumentException("copy of " + len + " bytes");
            }
            if (n > 0 && s[n - 1] + l[n - 1] == src && d[n - 1] + l[n - 1] == dst) {
                l[n - 1] += len;
                return;
            }
            if (n == s.length) {
                s = Arrays.copyOf(s, n * 2);
                d = Arrays.copyOf(d, n * 2);
                l = Arrays.copyOf(l, n * 2);
            }
            s[n] = src;
            d[n] = dst;
            l[n] = len;
            n++;
        }

        RunTable build() {
            // a scattered plan fills the arrays exactly (one entry per span): no copy then
            return n == s.length ? new RunTable(s, d, l) : new RunTable(Arrays.copyOf(s, n), Arrays.copyOf(d, n), Arrays.copyOf(l, n));
        }
    }
}
