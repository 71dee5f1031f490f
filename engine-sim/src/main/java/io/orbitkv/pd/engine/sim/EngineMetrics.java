package io.orbitkv.pd.engine.sim;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import io.orbitkv.pd.engine.client.BlockAllocator;
import io.orbitkv.pd.metrics.ComponentMetrics;
import io.orbitkv.pd.metrics.MetricNames;
import java.util.concurrent.TimeUnit;

/**
 * An engine's meters, all registered up front (a request only records): {@code orbitkv_engine_phase_seconds} with
 * {@code phase} prefill (the prompt's compute), kv_wait ({@code DecodeReady} reported → the KV landed, or recompute /
 * end) and decode (first token → last token out), KV pages in use and in total, prompt and output tokens.
 */
final class EngineMetrics {

    /** Gauge, tag {@code engine}: KV pages of the pool (used + free). */
    static final String PAGES_TOTAL = MetricNames.ENGINE_PAGES_TOTAL;

    private final Timer prefill;
    private final Timer kvWait;
    private final Timer decode;
    private final Timer itl;
    private final Counter promptTokens;
    private final Counter outputTokens;

    EngineMetrics(MeterRegistry registry, String engineId, BlockAllocator allocator) {
        prefill = ComponentMetrics.latency(registry, MetricNames.ENGINE_PHASE, "an engine's phases of one request", "engine", engineId,
                "phase", "prefill");
        kvWait = ComponentMetrics.latency(registry, MetricNames.ENGINE_PHASE, "an engine's phases of one request", "engine", engineId,
                "phase", "kv_wait");
        decode = ComponentMetrics.latency(registry, MetricNames.ENGINE_PHASE, "an engine's phases of one request", "engine", engineId,
                "phase", "decode");
        itl = ComponentMetrics.tokenTime(registry, MetricNames.ENGINE_ITL, "between two tokens of a streamed answer, as the engine sent them"
                + " (vLLM's inter_token_latency)", "engine", engineId);
        promptTokens = Counter.builder(MetricNames.ENGINE_TOKENS).description("tokens processed").tag("engine", engineId).tag("kind", "prompt")
                .register(registry);
        outputTokens = Counter.builder(MetricNames.ENGINE_TOKENS).description("tokens processed").tag("engine", engineId).tag("kind", "output")
                .register(registry);
        Gauge.builder(MetricNames.ENGINE_PAGES_USED, allocator, BlockAllocator::usedBlocks).description("KV pages held").tag("engine", engineId)
                .register(registry);
        Gauge.builder(PAGES_TOTAL, allocator, BlockAllocator::numBlocks).description("KV pages of the pool").tag("engine", engineId)
                .register(registry);
    }

    void prefill(long nanos, int tokens) {
        prefill.record(nanos, TimeUnit.NANOSECONDS);
        promptTokens.increment(tokens);
    }

    void kvWait(long nanos) {
        kvWait.record(nanos, TimeUnit.NANOSECONDS);
    }

    void itl(long nanos) {
        itl.record(nanos, TimeUnit.NANOSECONDS);
    }

    void decode(long nanos, int tokens) {
        decode.record(nanos, TimeUnit.NANOSECONDS);
        outputTokens.increment(tokens);
    }
}
