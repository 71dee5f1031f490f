package io.orbitkv.pd.bench;

import java.util.LinkedHashMap;
import java.util.Map;
import org.HdrHistogram.Histogram;

/** p50/p99/max of a latency histogram recorded in microseconds. */
record LatencyStats(long count, double p50ms, double p90ms, double p99ms, double maxMs) {
    static LatencyStats of(Histogram h) {
        return new LatencyStats(h.getTotalCount(), h.getValueAtPercentile(50) / 1000.0, h.getValueAtPercentile(90) / 1000.0,
                h.getValueAtPercentile(99) / 1000.0, h.getMaxValue() / 1000.0);
    }

    /** count, p50/p90/p99/max in ms, for a benchmark's JSON. */
    Map<String, Object> json() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("count", count);
        m.put("p50_ms", p50ms);
        m.put("p90_ms", p90ms);
        m.put("p99_ms", p99ms);
        m.put("max_ms", maxMs);
        return m;
    }

    static Histogram histogram() {
        return new Histogram(60_000_000L, 3);
    }
}
