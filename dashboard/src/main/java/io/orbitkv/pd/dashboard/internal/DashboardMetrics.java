package io.orbitkv.pd.dashboard.internal;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.Timer;
import io.orbitkv.pd.dashboard.stats.StatsWindow;
import io.orbitkv.pd.metrics.ComponentMetrics;
import io.orbitkv.pd.metrics.MetricNames;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The dashboard's Prometheus meters: what it reads from the log, as histograms (handoff phases, decision latency,
 * transfer durations and sizes per transport) and counters (outcomes, transfer failures, records, rejects, late
 * records), plus in-flight gauges per engine. Log-derived: the values describe the log as this instance consumed
 * it (its share of the partitions; sum over instances in Prometheus). Meters are created on first use and cached.
 */
public final class DashboardMetrics implements StatsObserver {

    /** Distinct label values per meter family: free text must not explode the registry. */
    private static final int MAX_LABEL_VALUES = 64;

    private final ComponentMetrics metrics;
    private final AtomicLong streamTime;
    private final Map<String, Object> meters = new ConcurrentHashMap<>();
    private final Map<String, AtomicLong> inflight = new ConcurrentHashMap<>();

    public DashboardMetrics(ComponentMetrics metrics, AtomicLong streamTime) {
        this.metrics = metrics;
        this.streamTime = streamTime;
    }

    public String scrape() {
        return metrics.scrape();
    }

    @Override
    public void streamTime(long streamTimeMs) {
        streamTime.accumulateAndGet(streamTimeMs, Math::max);
    }

    @Override
    public void consumed(String topic, String type) {
        counter(MetricNames.DASHBOARD_RECORDS, "topic", topic, "type", type).increment();
    }

    @Override
    public void rejected(String errorType) {
        counter(MetricNames.DASHBOARD_REJECTED, "error_type", errorType).increment();
    }

    @Override
    public void late(StatsWindow window) {
        counter(MetricNames.DASHBOARD_LATE, "window", window.label()).increment();
    }

    @Override
    public void outcome(String kind, long prefillUs, long decodeReadyUs, long handoffUs, long decodeUs, long endToEndUs) {
        counter(MetricNames.OUTCOMES, "kind", kind).increment();
        phase("prefill", prefillUs);
        phase("decode_ready", decodeReadyUs);
        phase("handoff", handoffUs);
        phase("decode", decodeUs);
        phase("end_to_end", endToEndUs);
    }

    private void phase(String phase, long us) {
        if (us >= 0) {
            timer(MetricNames.HANDOFF_PHASE, "one phase of a request, from its phase timings in the log", "phase", phase)
                    .record(us, TimeUnit.MICROSECONDS);
        }
    }

    @Override
    public void decisionLatency(long micros) {
        timer(MetricNames.DECISION_LATENCY, "last input fact of a transfer order to its worker's first report").record(micros, TimeUnit.MICROSECONDS);
    }

    @Override
    public void transferCompleted(String transport, long durationUs, long bytes) {
        String t = label(MetricNames.TRANSFER_DURATION, transport);
        timer(MetricNames.TRANSFER_DURATION, "one transfer as its worker reported it", "transport", t, "side", "log")
                .record(durationUs, TimeUnit.MICROSECONDS);
        DistributionSummary size = (DistributionSummary) meters.computeIfAbsent(MetricNames.TRANSFER_SIZE + "|" + t,
                k -> metrics.bytes(MetricNames.TRANSFER_SIZE, "bytes of one transfer", "transport", t));
        size.record(bytes);
    }

    @Override
    public void transferFailed(String transport, String reasonClass, boolean retriable) {
        counter(MetricNames.TRANSFER_FAILURES, "transport", label(MetricNames.TRANSFER_FAILURES + "t", transport),
                "reason", label(MetricNames.TRANSFER_FAILURES, reasonClass), "retriable", Boolean.toString(retriable)).increment();
    }

    @Override
    public void hop(String hop, long micros) {
        timer(MetricNames.HOP, "one hop of a handoff on the wall clock", "hop", hop).record(micros, TimeUnit.MICROSECONDS);
    }

    /** HTTP query latency by path. */
    public void query(String path, long nanos) {
        timer(MetricNames.DASHBOARD_QUERY, "dashboard HTTP queries", "path", label(MetricNames.DASHBOARD_QUERY, path))
                .record(nanos, TimeUnit.NANOSECONDS);
    }

    /** Sets the in-flight gauges from this instance's stores (called before each scrape). */
    public void inflight(Map<String, Long> perEngine) {
        inflight.forEach((engine, v) -> v.set(perEngine.getOrDefault(engine, 0L)));
        perEngine.forEach((engine, n) -> inflight.computeIfAbsent(engine, e -> {
            AtomicLong v = new AtomicLong();
            Gauge.builder(MetricNames.ENGINE_INFLIGHT, v, AtomicLong::get).description("requests admitted to the engine without an outcome yet")
                    .tag("engine", e).register(metrics.registry());
            return v;
        }).set(n));
    }

    private Timer timer(String name, String description, String... tags) {
        return (Timer) meters.computeIfAbsent(name + "|" + String.join("|", tags), k -> metrics.latency(name, description, tags));
    }

    private Counter counter(String name, String... tags) {
        return (Counter) meters.computeIfAbsent(name + "|" + String.join("|", tags),
                k -> Counter.builder(name).tags(tags).register(metrics.registry()));
    }

    private final Map<String, java.util.Set<String>> labelValues = new ConcurrentHashMap<>();

    /** {@code value}, or "other" once a family has {@link #MAX_LABEL_VALUES} distinct values. */
    private String label(String family, String value) {
        java.util.Set<String> seen = labelValues.computeIfAbsent(family, k -> ConcurrentHashMap.newKeySet());
        if (seen.contains(value) || seen.size() < MAX_LABEL_VALUES && seen.add(value)) {
            return value;
        }
        return "other";
    }
}
