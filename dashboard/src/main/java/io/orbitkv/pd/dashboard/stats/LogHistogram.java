package io.orbitkv.pd.dashboard.stats;

import java.util.Arrays;

/**
 * A mergeable histogram of non-negative longs (microseconds, bytes) in fixed log-linear buckets: values below 32 have a
 * bucket each, above that every power of two is split into 16 equal buckets, so a bucket is at most 1/16 (6.25 %) of
 * its lower bound wide. Bucket boundaries are a pure function of the bucket index, the same in every process and every
 * version, so histograms from different windows, tasks and instances merge by adding counts, and percentiles of the
 * merged histogram are as exact as those of one histogram fed every value: the reported value is the midpoint of the
 * bucket that holds the rank, clamped to the exact minimum and maximum (error ≤ 3.2 % of the value).
 *
 * <p>Sparse: only buckets that were hit are kept (sorted arrays), so a window's histogram costs a few dozen bytes.
 * Not thread-safe; one owner at a time.
 */
public final class LogHistogram {

    static final int SUB_BITS = 4;
    static final int SUB = 1 << SUB_BITS;
    /** Values below this have exact buckets. */
    static final int EXACT = 2 * SUB;
    /** Largest bucket index (for {@link Long#MAX_VALUE}). */
    public static final int MAX_INDEX = bucketOf(Long.MAX_VALUE);

    private int[] index = new int[4];
    private long[] counts = new long[4];
    private int size;
    private long count;
    private long sum;
    private long min = Long.MAX_VALUE;
    private long max = Long.MIN_VALUE;

    /** The bucket that holds {@code value} (negative values count as 0). */
    public static int bucketOf(long value) {
        long v = Math.max(0, value);
        if (v < EXACT) {
            return (int) v;
        }
        int msb = 63 - Long.numberOfLeadingZeros(v);
        return (msb - SUB_BITS + 1) * SUB + (int) ((v >>> (msb - SUB_BITS)) & (SUB - 1));
    }

    /** Smallest value of bucket {@code index}. */
    public static long lowerBound(int index) {
        if (index < 0 || index > MAX_INDEX) {
            throw new IllegalArgumentException("bucket index out of range: " + index);
        }
        if (index < EXACT) {
            return index;
        }
        int msb = index / SUB + SUB_BITS - 1;
        long sub = index % SUB;
        return (SUB + sub) << (msb - SUB_BITS);
    }

    /** Largest value of bucket {@code index} (inclusive). */
    public static long upperBound(int index) {
        return index == MAX_INDEX ? Long.MAX_VALUE : lowerBound(index + 1) - 1;
    }

    public void record(long value) {
        record(value, 1);
    }

    /** Records {@code value} {@code n} times. */
    public void record(long value, long n) {
        if (n <= 0) {
            return;
        }
        long v = Math.max(0, value);
        addBucket(bucketOf(v), n);
        count += n;
        sum = saturatedAdd(sum, saturatedMultiply(v, n));
        min = Math.min(min, v);
        max = Math.max(max, v);
    }

    /** Adds every count of {@code other} to this histogram. */
    public void merge(LogHistogram other) {
        if (other.count == 0) {
            return;
        }
        for (int i = 0; i < other.size; i++) {
            addBucket(other.index[i], other.counts[i]);
        }
        count += other.count;
        sum = saturatedAdd(sum, other.sum);
        min = Math.min(min, other.min);
        max = Math.max(max, other.max);
    }

    public LogHistogram copy() {
        LogHistogram c = new LogHistogram();
        c.merge(this);
        return c;
    }

    private void addBucket(int bucket, long n) {
        int at = Arrays.binarySearch(index, 0, size, bucket);
        if (at >= 0) {
            counts[at] += n;
            return;
        }
        int ins = -at - 1;
        if (size == index.length) {
            index = Arrays.copyOf(index, size * 2);
            counts = Arrays.copyOf(counts, size * 2);
        }
        System.arraycopy(index, ins, index, ins + 1, size - ins);
        System.arraycopy(counts, ins, counts, ins + 1, size - ins);
        index[ins] = bucket;
        counts[ins] = n;
        size++;
    }

    /**
     * The value at percentile {@code p} (0 < p ≤ 100): the smallest bucket whose cumulative count reaches
     * {@code ceil(p/100 × count)}, reported as that bucket's midpoint clamped to [min, max]. -1 when empty.
     */
    public long percentile(double p) {
        if (!(p > 0 && p <= 100)) {
            throw new IllegalArgumentException("percentile must be in (0, 100], got " + p);
        }
        if (count == 0) {
            return -1;
        }
        long rank = Math.max(1, (long) Math.ceil(p / 100.0 * count));
        long cumulative = 0;
        for (int i = 0; i < size; i++) {
            cumulative += counts[i];
            if (cumulative >= rank) {
                long lo = lowerBound(index[i]);
                long hi = upperBound(index[i]);
                long mid = lo + (hi - lo) / 2;
                return Math.min(max, Math.max(min, mid));
            }
        }
        return max; // unreachable while counts add up
    }

    public long count() {
        return count;
    }

    /** Sum of the recorded values (saturating). */
    public long sum() {
        return sum;
    }

    /** Exact smallest value; -1 when empty. */
    public long min() {
        return count == 0 ? -1 : min;
    }

    /** Exact largest value; -1 when empty. */
    public long max() {
        return count == 0 ? -1 : max;
    }

    public double mean() {
        return count == 0 ? Double.NaN : (double) sum / count;
    }

    /** Number of non-empty buckets. */
    public int buckets() {
        return size;
    }

    /** Bucket index of the i-th non-empty bucket, in increasing order. */
    public int bucketIndex(int i) {
        return index[i];
    }

    /** Count of the i-th non-empty bucket. */
    public long bucketCount(int i) {
        return counts[i];
    }

    /** Rebuilds a histogram from its parts (decoding); validates what a decoder cannot trust. */
    static LogHistogram of(int[] bucketIndexes, long[] bucketCounts, long sum, long min, long max) {
        LogHistogram h = new LogHistogram();
        long total = 0;
        for (int i = 0; i < bucketIndexes.length; i++) {
            if (bucketIndexes[i] < 0 || bucketIndexes[i] > MAX_INDEX || bucketCounts[i] <= 0
                    || i > 0 && bucketIndexes[i] <= bucketIndexes[i - 1]) {
                throw new IllegalArgumentException("histogram buckets must be increasing indexes with positive counts");
            }
            h.addBucket(bucketIndexes[i], bucketCounts[i]);
            total += bucketCounts[i];
        }
        h.count = total;
        if (total > 0) {
            if (min < 0 || max < min) {
                throw new IllegalArgumentException("histogram min/max out of order: " + min + ", " + max);
            }
            h.sum = sum;
            h.min = min;
            h.max = max;
        }
        return h;
    }

    private static long saturatedAdd(long a, long b) {
        long r = a + b;
        return ((a ^ r) & (b ^ r)) < 0 ? Long.MAX_VALUE : r;
    }

    private static long saturatedMultiply(long a, long b) {
        long hi = Math.multiplyHigh(a, b);
        long lo = a * b;
        return hi != 0 || lo < 0 ? Long.MAX_VALUE : lo;
    }

    @Override
    public boolean equals(Object o) {
        if (!(o instanceof LogHistogram h) || h.count != count || h.size != size || h.sum != sum || h.min() != min() || h.max() != max()) {
            return false;
        }
        return Arrays.equals(index, 0, size, h.index, 0, size) && Arrays.equals(counts, 0, size, h.counts, 0, size);
    }

    @Override
    public int hashCode() {
        return Long.hashCode(count) * 31 + Long.hashCode(sum) * 17 + size;
    }

    @Override
    public String toString() {
        return "LogHistogram{count=" + count + ", min=" + min() + ", max=" + max() + ", p50=" + (count == 0 ? -1 : percentile(50)) + "}";
    }
}
