package io.orbitkv.pd.kv;

import io.orbitkv.pd.events.BlockRun;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Page lists and their runs. An engine's block table is a list of block ids; the contracts carry it as runs
 * ({@code BlockRun}: blocks {@code [start, start + count)}) so that a 2,000-token prompt costs a handful of runs,
 * not 128 ids. The order of runs is the order of the request's tokens: the i-th block of the source list moves
 * into the i-th block of the destination list.
 */
public final class BlockRuns {

    private BlockRuns() { }

    public static BlockRun run(int start, int count) {
        return BlockRun.newBuilder().setStart(start).setCount(count).build();
    }

    /** Coalesces a page list (block ids in token order) into maximal runs of consecutive ids. */
    public static List<BlockRun> fromBlocks(int... blocks) {
        List<BlockRun> out = new ArrayList<>();
        int i = 0;
        while (i < blocks.length) {
            int start = blocks[i];
            int n = 1;
            while (i + n < blocks.length && blocks[i + n] == start + n) {
                n++;
            }
            out.add(run(start, n));
            i += n;
        }
        return out;
    }

    /** The page list of {@code runs}, in order. */
    public static int[] toBlocks(List<BlockRun> runs) {
        int[] out = new int[Math.toIntExact(totalBlocks(runs))];
        int k = 0;
        for (BlockRun r : runs) {
            for (int j = 0; j < r.getCount(); j++) {
                out[k++] = r.getStart() + j;
            }
        }
        return out;
    }

    /** {@code runs} without their first {@code skip} blocks (the prompt's blocks after a cached prefix). */
    public static List<BlockRun> skip(List<BlockRun> runs, int skip) {
        if (skip <= 0) {
            return runs;
        }
        java.util.ArrayList<BlockRun> out = new java.util.ArrayList<>();
        int left = skip;
        for (BlockRun r : runs) {
            if (left >= r.getCount()) {
                left -= r.getCount();
            } else {
                out.add(run(r.getStart() + left, r.getCount() - left));
                left = 0;
            }
        }
        return out;
    }

    public static long totalBlocks(List<BlockRun> runs) {
        long n = 0;
        for (BlockRun r : runs) {
            n += r.getCount();
        }
        return n;
    }

    /**
     * Null when {@code runs} are usable in a pool of {@code numBlocks} blocks: at least one run, at most
     * {@code maxRuns}, each with {@code start >= 0}, {@code count >= 1} and inside the pool, none overlapping
     * another. Otherwise the reason, naming {@code field} and the offending run.
     */
    public static String problem(String field, List<BlockRun> runs, int numBlocks, int maxRuns) {
        if (runs == null || runs.isEmpty()) {
            return field + ": no blocks";
        }
        if (runs.size() > maxRuns) {
            return field + ": " + runs.size() + " runs, more than the limit of " + maxRuns;
        }
        long[] spans = new long[runs.size()];
        for (int i = 0; i < runs.size(); i++) {
            BlockRun r = runs.get(i);
            if (r.getStart() < 0 || r.getCount() < 1 || (long) r.getStart() + r.getCount() > numBlocks) {
                return field + ": run " + r.getStart() + "+" + r.getCount() + " is outside the pool of " + numBlocks + " blocks";
            }
            spans[i] = ((long) r.getStart() << 32) | i;
        }
        Arrays.sort(spans);
        for (int i = 1; i < spans.length; i++) {
            BlockRun prev = runs.get((int) spans[i - 1]);
            BlockRun cur = runs.get((int) spans[i]);
            if (prev.getStart() + prev.getCount() > cur.getStart()) {
                return field + ": runs " + prev.getStart() + "+" + prev.getCount() + " and " + cur.getStart() + "+" + cur.getCount() + " overlap";
            }
        }
        return null;
    }

    /**
     * The runs as sorted, merged, disjoint block intervals {@code [starts[i], ends[i])}: a compact index that answers
     * "is this block range authorized" by binary search. Callers validate first ({@link #problem}).
     */
    public static Intervals intervals(List<BlockRun> runs) {
        long[] packed = new long[runs.size()];
        for (int i = 0; i < runs.size(); i++) {
            packed[i] = ((long) runs.get(i).getStart() << 32) | (runs.get(i).getCount() & 0xFFFF_FFFFL);
        }
        Arrays.sort(packed);
        long[] starts = new long[packed.length];
        long[] ends = new long[packed.length];
        int n = 0;
        for (long p : packed) {
            long s = p >>> 32;
            long e = s + (p & 0xFFFF_FFFFL);
            if (n > 0 && ends[n - 1] >= s) {
                ends[n - 1] = Math.max(ends[n - 1], e);
            } else {
                starts[n] = s;
                ends[n] = e;
                n++;
            }
        }
        return new Intervals(Arrays.copyOf(starts, n), Arrays.copyOf(ends, n));
    }

    /** Sorted disjoint block intervals. */
    public record Intervals(long[] starts, long[] ends) {
        /** True when every block of {@code [from, to)} lies inside one interval. */
        public boolean covers(long from, long to) {
            int lo = 0;
            int hi = starts.length - 1;
            while (lo <= hi) {
                int mid = (lo + hi) >>> 1;
                if (starts[mid] <= from) {
                    lo = mid + 1;
                } else {
                    hi = mid - 1;
                }
            }
            return hi >= 0 && to <= ends[hi] && from < to;
        }
    }
}
