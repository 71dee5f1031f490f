package io.orbitkv.pd.worker.internal;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.FunctionCounter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.orbitkv.pd.engine.client.api.ApiException;
import io.orbitkv.pd.metrics.ComponentMetrics;
import io.orbitkv.pd.metrics.MetricNames;
import io.orbitkv.pd.tracing.Hop;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.TransferError;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The worker's meters: per transport (registered when the transport is first used, then a map lookup by name) the
 * push duration histogram, the size histogram and failures by {@link TransferError} kind; orders in flight; the
 * wait from an order's record timestamp to its start; on the receiving side ({@link #receiving}) the receive
 * duration per transport and the pushes the gate refused, by reason. No string is built per transfer. Thread-safe.
 */
public final class WorkerMetrics {

    private static final String DURATION_HELP = "one transfer's push, as the pushing (side=push) or receiving (side=receive) worker measured it";

    private record PerTransport(Timer duration, DistributionSummary size) { }

    private final MeterRegistry registry;
    private final Timer orderWait;
    private final AtomicInteger inflight = new AtomicInteger();
    private final Map<String, PerTransport> transports = new ConcurrentHashMap<>();
    private final Map<FailureKey, Counter> failures = new ConcurrentHashMap<>();
    private final Map<String, Timer> receives = new ConcurrentHashMap<>();
    private final Hop.Meters hops;
    private final java.util.concurrent.atomic.AtomicReference<PushGate> receivingGate = new java.util.concurrent.atomic.AtomicReference<>();
    private final Map<TransferError, java.util.concurrent.atomic.AtomicLong> retiredRefusals = new ConcurrentHashMap<>();

    private record FailureKey(String transport, TransferError kind, boolean retriable) { }

    public WorkerMetrics(MeterRegistry registry) {
        this.registry = registry;
        this.orderWait = ComponentMetrics.latency(registry, MetricNames.WORKER_ORDER_WAIT, "an order's record timestamp to the worker starting it");
        Gauge.builder(MetricNames.WORKER_ORDERS_INFLIGHT, inflight, AtomicInteger::get).description("orders this worker is executing")
                .register(registry);
        hops = Hop.meters(registry, Hop.ORDER_TO_WORKER, Hop.PREFILL_TO_WORKER, Hop.WORKER_QUEUE, Hop.TRANSFER_SETUP, Hop.TRANSFER_ADMISSION, Hop.TRANSFER_WIRE,
                Hop.TRANSFER_APPLY, Hop.TRANSFER_REPORT);
    }

    /** {@code orbitkv_worker_api_refused_total{code}}: the engine API's live refusal counts, read when scraped (every code from the start). */
    public void engineApi(Map<String, AtomicLong> refusals) {
        for (String code : ApiException.CODES) {
            FunctionCounter.builder(MetricNames.WORKER_API_REFUSED, refusals, m -> {
                AtomicLong n = m.get(code);
                return n == null ? 0 : n.get();
            })
                    .description("requests the engine API refused, by error code").tag("code", code).register(registry);
        }
    }

    /** One hop of a handoff seen by this worker (wall clock, µs; see {@link Hop}). */
    public void hop(Hop hop, long fromMicros, long toMicros) {
        hops.record(hop, fromMicros, toMicros);
    }

    public static WorkerMetrics noop() {
        return new WorkerMetrics(new SimpleMeterRegistry());
    }

    public void started(long orderTimestampMs) {
        inflight.incrementAndGet();
        if (orderTimestampMs > 0) {
            orderWait.record(Math.max(0, System.currentTimeMillis() - orderTimestampMs), TimeUnit.MILLISECONDS);
        }
    }

    public void finished() {
        inflight.decrementAndGet();
    }

    public void completed(String transport, long durationNanos, long bytes) {
        PerTransport t = transports.computeIfAbsent(transport, n -> new PerTransport(
                ComponentMetrics.latency(registry, MetricNames.TRANSFER_DURATION, DURATION_HELP,
                        "transport", n, "side", "push"),
                ComponentMetrics.bytes(registry, MetricNames.TRANSFER_SIZE, "bytes of one transfer", "transport", n)));
        t.duration().record(durationNanos, TimeUnit.NANOSECONDS);
        t.size().record(bytes);
    }

    /**
     * Meters the receiving side of {@code gate}: {@code orbitkv_transfer_duration_seconds{transport, side="receive"}}
     * (admission → the receive session closed, whatever ended it) and {@code orbitkv_worker_pushes_refused_total{reason}}
     * (read from the gate's own counts when scraped).
     */
    public void receiving(PushGate gate) {
        // A worker on the engine API gets a new gate per engine instance: the counters add the retired gates' counts,
        // so they never go down.
        PushGate previous = receivingGate.getAndSet(gate);
        if (previous != null) {
            for (TransferError reason : PushGate.REFUSALS) {
                retiredRefusals.computeIfAbsent(reason, r -> new java.util.concurrent.atomic.AtomicLong()).addAndGet(previous.refusedPushes(reason));
            }
        } else {
            for (TransferError reason : PushGate.REFUSALS) {
                FunctionCounter.builder(MetricNames.WORKER_PUSHES_REFUSED, receivingGate, g -> refusedSoFar(g.get(), reason))
                        .description("pushes this worker refused as a receiver, by reason").tag("reason", reason.name()).register(registry);
            }
        }
        gate.listen((transport, nanos) -> receives.computeIfAbsent(transport, n -> ComponentMetrics.latency(registry,
                MetricNames.TRANSFER_DURATION, DURATION_HELP, "transport", n, "side", "receive"))
                .record(nanos, TimeUnit.NANOSECONDS));
    }

    private double refusedSoFar(PushGate current, TransferError reason) {
        java.util.concurrent.atomic.AtomicLong retired = retiredRefusals.get(reason);
        return (current == null ? 0 : current.refusedPushes(reason)) + (retired == null ? 0 : retired.get());
    }

    /** {@code transport} is "none" when the order failed before one was chosen. */
    public void failed(String transport, TransferError kind, boolean retriable) {
        failures.computeIfAbsent(new FailureKey(transport, kind, retriable), k -> Counter.builder(MetricNames.TRANSFER_FAILURES)
                .description("failed transfers by TransferError kind").tag("transport", k.transport()).tag("reason", k.kind().name())
                .tag("retriable", Boolean.toString(k.retriable())).register(registry)).increment();
    }
}
