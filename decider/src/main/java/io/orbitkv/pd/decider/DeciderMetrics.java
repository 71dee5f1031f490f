package io.orbitkv.pd.decider;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.orbitkv.pd.metrics.ComponentMetrics;
import io.orbitkv.pd.metrics.MetricNames;
import io.orbitkv.pd.state.Phase;
import io.orbitkv.pd.tracing.Hop;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The decider's meters, shared by every task of the process. Per-fact cost is a map lookup keyed by the payload's
 * class and a counter increment (meters are registered once per payload type, never per record), plus one timer
 * record; the per-phase and per-engine gauges are refreshed from the local stores when {@code /metrics} is scraped,
 * not on the decision path. Thread-safe.
 */
public final class DeciderMetrics {

    private static final org.slf4j.Logger log = org.slf4j.LoggerFactory.getLogger(DeciderMetrics.class);

    private final MeterRegistry registry;
    private final Timer process;
    private final Map<Class<?>, Counter> facts = new ConcurrentHashMap<>();
    private final Map<Class<?>, Counter> decisions = new ConcurrentHashMap<>();
    private final Map<String, Counter> deadLetters = new ConcurrentHashMap<>();
    private final Map<Phase, AtomicLong> phases = new ConcurrentHashMap<>();
    private final Map<String, AtomicLong> engines = new ConcurrentHashMap<>();
    private volatile FactTimings factTimings;
    private final Hop.Meters hops;

    /**
     * Sees when each fact's processing started and ended (System.nanoTime), by event id: lets a benchmark running the
     * decider in its own JVM split a decision's latency into the hop in, the decider's own work and the hop out.
     * Called on the stream thread; must be cheap. One that throws is removed (and logged), never failing the thread.
     */
    @FunctionalInterface
    public interface FactTimings {
        void fact(String eventId, long startNanos, long endNanos);
    }

    public DeciderMetrics(MeterRegistry registry) {
        this.registry = registry;
        this.process = ComponentMetrics.latency(registry, MetricNames.DECIDER_PROCESS,
                "the decider's own work for one fact: state read, transition, decisions, state write");
        this.hops = Hop.meters(registry, Hop.FACT_TO_DECIDER, Hop.REPORT_TO_DECIDER, Hop.DECIDER_ORDER, Hop.DECIDER_KV_READY);
        for (Phase p : Phase.values()) {
            AtomicLong v = new AtomicLong();
            Gauge.builder(MetricNames.DECIDER_REQUESTS, v, AtomicLong::get).description("requests per phase on this instance")
                    .tag("phase", p.name()).register(registry);
            phases.put(p, v);
        }
    }

    /** Meters that go nowhere (tests, tools that build the topology without a process registry). */
    public static DeciderMetrics noop() {
        return new DeciderMetrics(new SimpleMeterRegistry());
    }

    public void fact(Object payload) {
        facts.computeIfAbsent(payload.getClass(), c -> Counter.builder(MetricNames.DECIDER_FACTS)
                .description("facts the decider consumed, by payload type").tag("type", c.getSimpleName()).register(registry)).increment();
    }

    public void decision(Object payload) {
        decisions.computeIfAbsent(payload.getClass(), c -> Counter.builder(MetricNames.DECIDER_DECISIONS)
                .description("decisions emitted, by payload type").tag("type", c.getSimpleName()).register(registry)).increment();
    }

    /** One hop of a handoff seen by the decider (wall clock, µs; see {@link Hop}). */
    public void hop(Hop hop, long fromMicros, long toMicros) {
        hops.record(hop, fromMicros, toMicros);
    }

    public void deadLetter(String errorType) {
        deadLetters.computeIfAbsent(errorType, t -> Counter.builder(MetricNames.DECIDER_DEAD_LETTERS)
                .description("records the decider dead-lettered").tag("error_type", t).register(registry)).increment();
    }

    /** Installs (or, with null, removes) the per-fact timing listener. */
    public void factTimings(FactTimings listener) {
        this.factTimings = listener;
    }

    /** One fact's processing (timers fired after it included); {@code eventId} is null when the record did not decode. */
    public void processed(String eventId, long startNanos, long endNanos) {
        process.record(endNanos - startNanos, TimeUnit.NANOSECONDS);
        FactTimings listener = factTimings;
        if (listener != null && eventId != null) {
            try {
                listener.fact(eventId, startNanos, endNanos);
            } catch (RuntimeException e) {
                // An observer must never fail the stream thread (that would stop deciding for its partitions): it is removed.
                factTimings = null;
                log.atError().setCause(e).log("fact timing listener failed; removed");
            }
        }
    }

    /** Sets the per-phase gauge from a count of this instance's request states. */
    public void phases(Map<Phase, Long> counts) {
        phases.forEach((p, v) -> v.set(counts.getOrDefault(p, 0L)));
    }

    /** Sets the per-engine in-flight gauge from this instance's load store; engines no longer listed read 0. */
    public void engines(Map<String, Long> inflight) {
        engines.forEach((e, v) -> v.set(inflight.getOrDefault(e, 0L)));
        inflight.forEach((engine, n) -> engines.computeIfAbsent(engine, e -> {
            AtomicLong v = new AtomicLong();
            Gauge.builder(MetricNames.ENGINE_INFLIGHT, v, AtomicLong::get).description("requests in flight per engine (the decider's load store)")
                    .tag("engine", e).register(registry);
            return v;
        }).set(n));
    }
}
