package io.orbitkv.pd.cli.bench;

import org.HdrHistogram.Histogram;

/** p50/p99/max of a latency histogram recorded in microseconds. */
record LatencyStats(long count, double p50ms, double p90ms, double p99ms, double maxMs) {
    static LatencyStats of(Histogram h) {
        return new LatencyStats(h.getTotalCount(), h.getValueAtPercentile(50) / 1000.0, h.getValueAtPercentile(90) / 1000.0,
                h.getValueAtPercentile(99) / 1000.0, h.getMaxValue() / 1000.0);
    }

    static Histogram histogram() {
        return new Histogram(60_000_000L, 3);
    }
}
