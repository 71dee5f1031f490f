package io.orbitkv.pd.worker.internal;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.orbitkv.pd.metrics.ComponentMetrics;
import io.orbitkv.pd.metrics.MetricNames;
import io.orbitkv.pd.transport.TransferError;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The worker's meters: per transport (registered when the transport is first used, then a map lookup by name) the
 * push duration histogram, the size histogram and failures by {@link TransferError} kind; orders in flight; the
 * wait from an order's record timestamp to its start. No string is built per transfer. Thread-safe.
 */
public final class WorkerMetrics {

    private record PerTransport(Timer duration, DistributionSummary size) { }

    private final MeterRegistry registry;
    private final Timer orderWait;
    private final AtomicInteger inflight = new AtomicInteger();
    private final Map<String, PerTransport> transports = new ConcurrentHashMap<>();
    private final Map<FailureKey, Counter> failures = new ConcurrentHashMap<>();

    private record FailureKey(String transport, TransferError kind, boolean retriable) { }

    public WorkerMetrics(MeterRegistry registry) {
        this.registry = registry;
        this.orderWait = ComponentMetrics.latency(registry, MetricNames.WORKER_ORDER_WAIT, "an order's record timestamp to the worker starting it");
        Gauge.builder(MetricNames.WORKER_ORDERS_INFLIGHT, inflight, AtomicInteger::get).description("orders this worker is executing")
                .register(registry);
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
                ComponentMetrics.latency(registry, MetricNames.TRANSFER_DURATION, "one transfer's push, as its worker measured it",
                        "transport", n, "side", "push"),
                ComponentMetrics.bytes(registry, MetricNames.TRANSFER_SIZE, "bytes of one transfer", "transport", n)));
        t.duration().record(durationNanos, TimeUnit.NANOSECONDS);
        t.size().record(bytes);
    }

    /** {@code transport} is "none" when the order failed before one was chosen. */
    public void failed(String transport, TransferError kind, boolean retriable) {
        failures.computeIfAbsent(new FailureKey(transport, kind, retriable), k -> Counter.builder(MetricNames.TRANSFER_FAILURES)
                .description("failed transfers by TransferError kind").tag("transport", k.transport()).tag("reason", k.kind().name())
                .tag("retriable", Boolean.toString(k.retriable())).register(registry)).increment();
    }
}
