package io.orbitkv.pd.proxy.internal;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.orbitkv.pd.metrics.ComponentMetrics;
import io.orbitkv.pd.metrics.MetricNames;
import io.orbitkv.pd.tracing.Hop;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The proxy's meters, registered up front (a request records, it never registers or builds a name):
 * {@code orbitkv_proxy_request_seconds{phase="ttft"|"handoff"|"total"}}, {@code orbitkv_proxy_token_seconds{phase="itl"|"tpot"}}
 * (itl: between two chunks of a streamed answer, one per token from engines that flush each token, as vLLM and ours do;
 * tpot: a streamed answer's first chunk to its last over the chunks after the first), {@code orbitkv_proxy_upstream_seconds{role}},
 * {@code orbitkv_proxy_requests_total{status}} (the status codes the proxy answers pre-registered, others on first use),
 * {@code orbitkv_proxy_cancels_total}, {@code orbitkv_proxy_inflight}. Thread-safe.
 */
public final class ProxyMetrics {

    private static final int[] STATUSES = {200, 400, 404, 405, 409, 413, 499, 500, 502, 503, 504};

    private final MeterRegistry registry;
    private final Timer total;
    private final Timer ttft;
    private final Timer handoff;
    private final Timer itl;
    private final Timer tpot;
    private final Timer prefillUpstream;
    private final Timer decodeUpstream;
    private final Timer colocatedUpstream;
    private final Counter cancels;
    private final Counter[] byStatus = new Counter[600];
    private final Hop.Meters hops;

    public ProxyMetrics(MeterRegistry registry, AtomicInteger inFlight) {
        this.registry = registry;
        String d = "a proxied completion request";
        total = ComponentMetrics.latency(registry, MetricNames.PROXY_REQUEST, d, "phase", "total");
        ttft = ComponentMetrics.latency(registry, MetricNames.PROXY_REQUEST, d, "phase", "ttft");
        handoff = ComponentMetrics.latency(registry, MetricNames.PROXY_REQUEST, d, "phase", "handoff");
        itl = ComponentMetrics.tokenTime(registry, MetricNames.PROXY_TOKEN, "a streamed answer's token times", "phase", "itl");
        tpot = ComponentMetrics.tokenTime(registry, MetricNames.PROXY_TOKEN, "a streamed answer's token times", "phase", "tpot");
        prefillUpstream = ComponentMetrics.latency(registry, MetricNames.PROXY_UPSTREAM, "one call to an engine", "role", "prefill");
        decodeUpstream = ComponentMetrics.latency(registry, MetricNames.PROXY_UPSTREAM, "one call to an engine", "role", "decode");
        colocatedUpstream = ComponentMetrics.latency(registry, MetricNames.PROXY_UPSTREAM, "one call to an engine", "role", "colocated");
        cancels = Counter.builder(MetricNames.PROXY_CANCELS).description("client disconnects and timeouts turned into CancelRequested")
                .register(registry);
        Gauge.builder(MetricNames.PROXY_INFLIGHT, inFlight, AtomicInteger::get).description("completion requests in flight").register(registry);
        for (int s : STATUSES) {
            byStatus[s] = statusCounter(s);
        }
        hops = Hop.meters(registry, Hop.ADMIT, Hop.FIRST_TOKEN_TO_PROXY);
    }

    /** The proxy's hop timers ({@code orbitkv_hop_seconds{hop}}: admit, first_token_to_proxy). */
    public Hop.Meters hops() {
        return hops;
    }

    public static ProxyMetrics noop() {
        return new ProxyMetrics(new SimpleMeterRegistry(), new AtomicInteger());
    }

    /** One answered HTTP request; 499: the client went away before the answer ended. */
    public void status(int status) {
        int s = status < 100 || status > 599 ? 0 : status;
        Counter c = byStatus[s];
        if (c == null) {
            c = statusCounter(s);
            byStatus[s] = c;
        }
        c.increment();
    }

    private Counter statusCounter(int s) {
        return Counter.builder(MetricNames.PROXY_REQUESTS).description("HTTP requests answered, by status").tag("status", Integer.toString(s))
                .register(registry);
    }

    public void total(long nanos) {
        total.record(nanos, TimeUnit.NANOSECONDS);
    }

    public void ttft(long nanos) {
        ttft.record(nanos, TimeUnit.NANOSECONDS);
    }

    public void handoff(long nanos) {
        handoff.record(nanos, TimeUnit.NANOSECONDS);
    }

    /** The gap between two chunks of a streamed answer. */
    public void itl(long nanos) {
        itl.record(nanos, TimeUnit.NANOSECONDS);
    }

    /** A streamed answer's time per output token: first chunk to last over the chunks after the first. */
    public void tpot(long nanos) {
        tpot.record(nanos, TimeUnit.NANOSECONDS);
    }

    /** {@code role}: prefill, decode or colocated. */
    public void upstream(String role, long nanos) {
        Timer t = "prefill".equals(role) ? prefillUpstream : "decode".equals(role) ? decodeUpstream : colocatedUpstream;
        t.record(nanos, TimeUnit.NANOSECONDS);
    }

    public void cancel() {
        cancels.increment();
    }
}
