package io.orbitkv.pd.kv;

import io.orbitkv.pd.events.BlockRun;
import java.util.Arrays;
import java.util.List;

/**
 * What one transfer order moves, as byte spans: page lists → coalesced runs → spans.
 *
 * <p>The i-th block of the source list moves into the i-th block of the destination list. Walking both run
 * lists together gives <em>pair runs</em> — maximal stretches where source and destination blocks are both
 * consecutive — and each pair run becomes one contiguous span per region (the same slot range in every layer's
 * K and V). So a 128-block request on a 64-region (32-layer) model is 64 spans of 4 MiB when both sides are
 * contiguous and 8,192 spans of 32 KiB when the destination is fully scattered. Spans are region-major (all of
 * layer 0 first), the order in which a layer-wise consumer would want them.
 *
 * <p>Immutable; offsets are relative to the region base, never raw addresses.
 */
public final class TransferPlan {

    private final KvGeometry source;
    private final KvGeometry dest;
    private final long blocks;
    private final int[] pairSrc;
    private final int[] pairDst;
    private final int[] pairCount;
    private final int[] spanRegion;
    private final long[] spanSrc;
    private final long[] spanDst;
    private final long[] spanLen;

    private TransferPlan(KvGeometry source, KvGeometry dest, long blocks, int[] pairSrc, int[] pairDst, int[] pairCount) {
        this.source = source;
        this.dest = dest;
        this.blocks = blocks;
        this.pairSrc = pairSrc;
        this.pairDst = pairDst;
        this.pairCount = pairCount;
        int regions = source.regionCount();
        int n = Math.multiplyExact(regions, pairSrc.length);
        spanRegion = new int[n];
        spanSrc = new long[n];
        spanDst = new long[n];
        spanLen = new long[n];
        long page = source.pageBytes();
        int k = 0;
        for (int r = 0; r < regions; r++) {
            for (int p = 0; p < pairSrc.length; p++) {
                spanRegion[k] = r;
                spanSrc[k] = pairSrc[p] * page;
                spanDst[k] = pairDst[p] * page;
                spanLen[k] = pairCount[p] * page;
                k++;
            }
        }
    }

    /**
     * Plans moving {@code sourceRuns} of a pool shaped {@code source} into {@code destRuns} of a pool shaped
     * {@code dest}.
     *
     * @throws IllegalArgumentException naming what is wrong: incompatible layouts, runs outside a pool or
     *                                  overlapping, or lists of different lengths
     */
    public static TransferPlan build(KvGeometry source, List<BlockRun> sourceRuns, KvGeometry dest, List<BlockRun> destRuns) {
        String mismatch = source.incompatibility(dest);
        if (mismatch != null) {
            throw new IllegalArgumentException("layout: pages cannot be copied page for page: " + mismatch);
        }
        String bad = BlockRuns.problem("source_blocks", sourceRuns, source.numBlocks(), Integer.MAX_VALUE);
        if (bad == null) {
            bad = BlockRuns.problem("dest_blocks", destRuns, dest.numBlocks(), Integer.MAX_VALUE);
        }
        if (bad != null) {
            throw new IllegalArgumentException(bad);
        }
        long srcBlocks = BlockRuns.totalBlocks(sourceRuns);
        long dstBlocks = BlockRuns.totalBlocks(destRuns);
        if (srcBlocks != dstBlocks) {
            throw new IllegalArgumentException("source_blocks hold " + srcBlocks + " blocks but dest_blocks " + dstBlocks);
        }
        int cap = sourceRuns.size() + destRuns.size();
        int[] ps = new int[cap];
        int[] pd = new int[cap];
        int[] pc = new int[cap];
        int n = 0;
        int si = 0;
        int di = 0;
        int sUsed = 0;
        int dUsed = 0;
        while (si < sourceRuns.size()) {
            BlockRun s = sourceRuns.get(si);
            BlockRun d = destRuns.get(di);
            int take = Math.min(s.getCount() - sUsed, d.getCount() - dUsed);
            int sStart = s.getStart() + sUsed;
            int dStart = d.getStart() + dUsed;
            if (n > 0 && ps[n - 1] + pc[n - 1] == sStart && pd[n - 1] + pc[n - 1] == dStart) {
                pc[n - 1] += take;
            } else {
                ps[n] = sStart;
                pd[n] = dStart;
                pc[n] = take;
                n++;
            }
            sUsed += take;
            dUsed += take;
            if (sUsed == s.getCount()) {
                si++;
                sUsed = 0;
            }
            if (dUsed == d.getCount()) {
                di++;
                dUsed = 0;
            }
        }
        return new TransferPlan(source, dest, srcBlocks, Arrays.copyOf(ps, n), Arrays.copyOf(pd, n), Arrays.copyOf(pc, n));
    }

    public KvGeometry source() {
        return source;
    }

    public KvGeometry dest() {
        return dest;
    }

    /** Blocks moved (per region). */
    public long blocks() {
        return blocks;
    }

    /** Pages moved: blocks × regions. */
    public long pages() {
        return blocks * source.regionCount();
    }

    public long totalBytes() {
        return pages() * source.pageBytes();
    }

    /** Coalesced pair runs: stretches where both sides are consecutive. */
    public int pairRuns() {
        return pairSrc.length;
    }

    public int pairSource(int i) {
        return pairSrc[i];
    }

    public int pairDest(int i) {
        return pairDst[i];
    }

    public int pairCount(int i) {
        return pairCount[i];
    }

    /** Contiguous byte spans: pair runs × regions. */
    public int spans() {
        return spanRegion.length;
    }

    public int spanRegion(int i) {
        return spanRegion[i];
    }

    public long spanSourceOffset(int i) {
        return spanSrc[i];
    }

    public long spanDestOffset(int i) {
        return spanDst[i];
    }

    public long spanLength(int i) {
        return spanLen[i];
    }

    @Override
    public String toString() {
        return "TransferPlan[" + blocks + " blocks, " + pages() + " pages, " + pairRuns() + " pair runs, " + spans() + " spans, "
                + totalBytes() + " bytes]";
    }
}
