package io.orbitkv.pd.metrics;

import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.binder.jvm.JvmGcMetrics;
import io.micrometer.core.instrument.binder.jvm.JvmMemoryMetrics;
import io.micrometer.core.instrument.binder.jvm.JvmThreadMetrics;
import io.micrometer.core.instrument.binder.system.ProcessorMetrics;
import io.micrometer.core.instrument.binder.system.UptimeMetrics;
import io.micrometer.prometheusmetrics.PrometheusConfig;
import io.micrometer.prometheusmetrics.PrometheusMeterRegistry;
import java.time.Duration;
import java.util.Arrays;

/**
 * One Prometheus registry per process, owned by the component's main class: common tags {@code component} and
 * {@code instance} on every meter, JVM and process meters bound, and the product's bucket layouts, so the same metric
 * from two components (or two instances) can be aggregated by {@code histogram_quantile} over summed buckets.
 * Histograms are classic Prometheus histograms with fixed buckets ({@link #LATENCY_BUCKETS}, {@link #BYTE_BUCKETS}),
 * never client-side percentiles: those cannot be merged across instances. Close it when the process ends.
 */
public final class ComponentMetrics implements AutoCloseable {

    /** Content type of {@link #scrape()}: the Prometheus text format. */
    public static final String CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8";

    /** Latency buckets, 100 µs to 2 min: decisions sit at the low end, timeouts at the high end. */
    public static final Duration[] LATENCY_BUCKETS = Arrays.stream(new double[] {
            0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120})
            .mapToObj(s -> Duration.ofNanos(Math.round(s * 1e9))).toArray(Duration[]::new);

    /**
     * Token-time buckets (forward steps, inter-token latency, TPOT): 1 ms apart up to 20 ms, where a decode step's time
     * lives (an 8B model's is ~6.5 ms on an H100) and a 1.3× change must show, then coarser up to 2 s.
     */
    public static final Duration[] TOKEN_BUCKETS = java.util.stream.Stream.concat(
            java.util.stream.IntStream.rangeClosed(1, 20).mapToObj(ms -> Duration.ofMillis(ms)),
            java.util.stream.IntStream.of(25, 30, 40, 50, 75, 100, 150, 200, 300, 500, 1000, 2000).mapToObj(ms -> Duration.ofMillis(ms)))
            .toArray(Duration[]::new);

    /** Byte buckets, 32 KiB (one page) to 8 GiB in steps of 4×. */
    public static final double[] BYTE_BUCKETS = {32 << 10, 128 << 10, 512 << 10, 2 << 20, 8 << 20, 32 << 20, 128 << 20, 512 << 20,
            2.0 * (1L << 30), 8.0 * (1L << 30)};

    private final PrometheusMeterRegistry registry;
    private final JvmGcMetrics gc;

    private ComponentMetrics(PrometheusMeterRegistry registry, JvmGcMetrics gc) {
        this.registry = registry;
        this.gc = gc;
    }

    /**
     * @param component what runs in this process: decider, worker, proxy, engine, dashboard
     * @param instance  which one (engine id, host:port, application server), so two of a kind stay apart
     */
    public static ComponentMetrics create(String component, String instance) {
        if (component == null || !component.matches("[a-z][a-z0-9_-]*")) {
            throw new IllegalArgumentException("metrics component: lower-case letters, digits, '_' and '-', got " + component);
        }
        PrometheusMeterRegistry r = new PrometheusMeterRegistry(PrometheusConfig.DEFAULT);
        r.config().commonTags("component", component, "instance", instance == null || instance.isBlank() ? "unknown" : instance);
        new JvmMemoryMetrics().bindTo(r);
        new JvmThreadMetrics().bindTo(r);
        new ProcessorMetrics().bindTo(r);
        new UptimeMetrics().bindTo(r);
        JvmGcMetrics gc = new JvmGcMetrics();
        gc.bindTo(r);
        return new ComponentMetrics(r, gc);
    }

    public MeterRegistry registry() {
        return registry;
    }

    /** A latency histogram with the product's buckets; {@code tags} are key, value pairs. */
    public Timer latency(String name, String description, String... tags) {
        return latency(registry, name, description, tags);
    }

    /** A size histogram in bytes with the product's buckets; {@code tags} are key, value pairs. */
    public DistributionSummary bytes(String name, String description, String... tags) {
        return bytes(registry, name, description, tags);
    }

    /** {@link #latency(String, String, String...)} on any registry (tests use a simple one). */
    public static Timer latency(MeterRegistry registry, String name, String description, String... tags) {
        return Timer.builder(name).description(description).tags(tags).serviceLevelObjectives(LATENCY_BUCKETS)
                .maximumExpectedValue(LATENCY_BUCKETS[LATENCY_BUCKETS.length - 1]).register(registry);
    }

    /** A histogram of token times ({@link #TOKEN_BUCKETS}): steps, inter-token latency, time per output token. */
    public static Timer tokenTime(MeterRegistry registry, String name, String description, String... tags) {
        return Timer.builder(name).description(description).tags(tags).serviceLevelObjectives(TOKEN_BUCKETS)
                .maximumExpectedValue(TOKEN_BUCKETS[TOKEN_BUCKETS.length - 1]).register(registry);
    }

    /** {@link #bytes(String, String, String...)} on any registry. */
    public static DistributionSummary bytes(MeterRegistry registry, String name, String description, String... tags) {
        return DistributionSummary.builder(name).description(description).baseUnit("bytes").tags(tags).serviceLevelObjectives(BYTE_BUCKETS)
                .register(registry);
    }

    /** The Prometheus text exposition of every meter; serve it at {@code GET /metrics} with {@link #CONTENT_TYPE}. */
    public String scrape() {
        return registry.scrape();
    }

    @Override
    public void close() {
        gc.close();
        registry.close();
    }
}
