package io.orbitkv.pd.dashboard.stats;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.Arrays;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

class LogHistogramTest {

    @Test
    void bucketsTileTheLongRangeWithBoundedWidth() {
        assertThat(LogHistogram.bucketOf(0)).isZero();
        assertThat(LogHistogram.bucketOf(-5)).isZero();
        for (int i = 0; i < LogHistogram.MAX_INDEX; i++) {
            long lo = LogHistogram.lowerBound(i);
            long hi = LogHistogram.upperBound(i);
            assertThat(LogHistogram.lowerBound(i + 1)).as("bucket %d is followed without a gap", i).isEqualTo(hi + 1);
            assertThat(LogHistogram.bucketOf(lo)).isEqualTo(i);
            assertThat(LogHistogram.bucketOf(hi)).isEqualTo(i);
            if (lo >= 32) {
                assertThat((double) (hi - lo + 1) / lo).as("relative width of bucket %d", i).isLessThanOrEqualTo(1.0 / 16);
            } else {
                assertThat(hi).isEqualTo(lo); // exact below 32
            }
        }
        assertThat(LogHistogram.bucketOf(Long.MAX_VALUE)).isEqualTo(LogHistogram.MAX_INDEX);
        assertThat(LogHistogram.upperBound(LogHistogram.MAX_INDEX)).isEqualTo(Long.MAX_VALUE);
    }

    @Test
    void percentilesOfSmallValuesAreExact() {
        LogHistogram h = new LogHistogram();
        for (int v = 1; v <= 20; v++) {
            h.record(v);
        }
        assertThat(h.percentile(50)).isEqualTo(10);
        assertThat(h.percentile(90)).isEqualTo(18);
        assertThat(h.percentile(99)).isEqualTo(20);
        assertThat(h.percentile(100)).isEqualTo(20);
        assertThat(h.count()).isEqualTo(20);
        assertThat(h.sum()).isEqualTo(210);
        assertThat(h.min()).isEqualTo(1);
        assertThat(h.max()).isEqualTo(20);
        assertThat(new LogHistogram().percentile(50)).isEqualTo(-1);
        assertThatThrownBy(() -> h.percentile(0)).isInstanceOf(IllegalArgumentException.class);
    }

    @Test
    void percentilesOfLargeValuesAreWithinTheBucketError() {
        SplittableRandom rnd = new SplittableRandom(42);
        long[] values = new long[20_000];
        LogHistogram h = new LogHistogram();
        for (int i = 0; i < values.length; i++) {
            values[i] = (long) Math.exp(rnd.nextDouble(2, 18)); // 7 µs .. 65 s, log-uniform
            h.record(values[i]);
        }
        Arrays.sort(values);
        for (double p : new double[] {50, 90, 99, 99.9}) {
            long exact = values[(int) Math.ceil(p / 100 * values.length) - 1];
            assertThat((double) h.percentile(p)).as("p%s", p).isCloseTo(exact, org.assertj.core.data.Percentage.withPercentage(3.2));
        }
        assertThat(h.percentile(100)).isEqualTo(values[values.length - 1]); // clamped to the exact max
    }

    @Test
    void mergingEqualsRecordingEverythingInOne() {
        SplittableRandom rnd = new SplittableRandom(7);
        LogHistogram all = new LogHistogram();
        LogHistogram[] parts = {new LogHistogram(), new LogHistogram(), new LogHistogram()};
        for (int i = 0; i < 5_000; i++) {
            long v = rnd.nextLong(0, 5_000_000);
            all.record(v);
            parts[i % 3].record(v);
        }
        LogHistogram merged = new LogHistogram();
        for (LogHistogram p : parts) {
            merged.merge(p);
        }
        assertThat(merged).isEqualTo(all);
        for (double p : new double[] {50, 90, 99}) {
            assertThat(merged.percentile(p)).isEqualTo(all.percentile(p));
        }
        // merging is order-independent
        LogHistogram reversed = new LogHistogram();
        for (int i = parts.length - 1; i >= 0; i--) {
            reversed.merge(parts[i]);
        }
        assertThat(reversed).isEqualTo(all);
        merged.merge(new LogHistogram());
        assertThat(merged).isEqualTo(all);
    }

    @Test
    void sumSaturatesInsteadOfOverflowing() {
        LogHistogram h = new LogHistogram();
        h.record(Long.MAX_VALUE - 1);
        h.record(Long.MAX_VALUE - 1, 3);
        assertThat(h.sum()).isEqualTo(Long.MAX_VALUE);
        assertThat(h.count()).isEqualTo(4);
    }
}
