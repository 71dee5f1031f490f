package io.orbitkv.pd.metrics;

/**
 * Every metric name of the product, in Micrometer's dotted form. The Prometheus registry renders them in snake case
 * with the base unit and a {@code _total} suffix for counters: {@code orbitkv.handoff.phase} (a timer) becomes
 * {@code orbitkv_handoff_phase_seconds_bucket/_count/_sum}. {@code docs/dashboard.md} lists which component exposes
 * which name, and {@code deploy/grafana/orbitkv-pd.json} queries exactly these. Every meter also carries the common
 * tags {@code component} and {@code instance} (see {@link ComponentMetrics}).
 */
public final class MetricNames {

    private MetricNames() { }

    // ------------------------------------------------------------------ shared by several components

    /** Timer, tag {@code phase}: prefill, decode_ready, handoff, decode, end_to_end (from a request's phase timings). */
    public static final String HANDOFF_PHASE = "orbitkv.handoff.phase";
    /** Timer: last input fact of a transfer order → the first report of the worker that executes it. */
    public static final String DECISION_LATENCY = "orbitkv.decision.latency";
    /** Timer, tags {@code transport}, {@code side} (push | receive | log): one transfer's duration. */
    public static final String TRANSFER_DURATION = "orbitkv.transfer.duration";
    /** Distribution summary in bytes, tag {@code transport}: one transfer's size. */
    public static final String TRANSFER_SIZE = "orbitkv.transfer.size";
    /** Counter, tags {@code transport}, {@code reason} (a reason class, see the dashboard docs), {@code retriable}. */
    public static final String TRANSFER_FAILURES = "orbitkv.transfer.failures";
    /**
     * Timer, tag {@code hop} (a {@code io.orbitkv.pd.tracing.Hop} key): one hop of a handoff on the wall clock, measured by
     * the process that sees its end (a Kafka hop by its consumer, from the producer's {@code out} mark).
     */
    public static final String HOP = "orbitkv.hop";
    /** Counter, tag {@code kind}: COMPLETED, CANCELLED, TIMED_OUT, FAILED. */
    public static final String OUTCOMES = "orbitkv.outcomes";
    /** Gauge, tag {@code engine}: requests admitted to the engine that have no outcome yet. */
    public static final String ENGINE_INFLIGHT = "orbitkv.engine.inflight";

    // ------------------------------------------------------------------ decider

    /** Counter, tag {@code type}: facts the decider consumed, by payload type. */
    public static final String DECIDER_FACTS = "orbitkv.decider.facts";
    /** Counter, tag {@code type}: decisions emitted, by payload type. */
    public static final String DECIDER_DECISIONS = "orbitkv.decider.decisions";
    /** Timer: the decider's own work for one fact (state read, transition, decisions, state write). */
    public static final String DECIDER_PROCESS = "orbitkv.decider.process";
    /** Counter, tag {@code error_type}: records the decider dead-lettered. */
    public static final String DECIDER_DEAD_LETTERS = "orbitkv.decider.dead.letters";
    /** Gauge, tag {@code phase}: requests per phase on this instance. */
    public static final String DECIDER_REQUESTS = "orbitkv.decider.requests";

    // ------------------------------------------------------------------ transfer worker

    /** Gauge: orders this worker is executing. */
    public static final String WORKER_ORDERS_INFLIGHT = "orbitkv.worker.orders.inflight";
    /** Timer: an order's record timestamp → the worker started it (queueing + consume hop). */
    public static final String WORKER_ORDER_WAIT = "orbitkv.worker.order.wait";
    /** Counter, tag {@code reason} (a TransferError kind): pushes this worker refused as a receiver. */
    public static final String WORKER_PUSHES_REFUSED = "orbitkv.worker.pushes.refused";
    /** Counter, tag {@code code} (an engine API error code): requests the worker's engine API refused (docs/engine-api.md). */
    public static final String WORKER_API_REFUSED = "orbitkv.worker.api.refused";

    // ------------------------------------------------------------------ proxy

    /** Counter, tag {@code status}: HTTP requests answered. */
    public static final String PROXY_REQUESTS = "orbitkv.proxy.requests";
    /** Timer, tag {@code phase}: ttft (first byte of the answer), handoff (prefill answered → decode first byte) or total. */
    public static final String PROXY_REQUEST = "orbitkv.proxy.request";
    /** Timer, tag {@code phase}: itl (between two chunks of a streamed answer) or tpot (a streamed answer's mean chunk gap). */
    public static final String PROXY_TOKEN = "orbitkv.proxy.token";
    /** Timer, tag {@code role}: prefill or decode upstream call. */
    public static final String PROXY_UPSTREAM = "orbitkv.proxy.upstream";
    /** Gauge: streams in flight. */
    public static final String PROXY_INFLIGHT = "orbitkv.proxy.inflight";
    /** Counter: client disconnects turned into CancelRequested. */
    public static final String PROXY_CANCELS = "orbitkv.proxy.cancels";

    // ------------------------------------------------------------------ engines

    /** Timer, tags {@code engine}, {@code phase}: prefill, kv_wait (decode ready → KV ready), decode. */
    public static final String ENGINE_PHASE = "orbitkv.engine.phase";
    /** Gauge, tag {@code engine}: KV pages held. */
    public static final String ENGINE_PAGES_USED = "orbitkv.engine.pages.used";
    /** Gauge, tag {@code engine}: KV pages of the engine's pool (used + free). */
    public static final String ENGINE_PAGES_TOTAL = "orbitkv.engine.pages.total";
    /** Counter, tags {@code engine}, {@code kind}: prompt or output tokens. */
    public static final String ENGINE_TOKENS = "orbitkv.engine.tokens";
    /** Timer, tag {@code engine}: between two tokens of a streamed answer, as the engine sent them (vLLM's inter_token_latency). */
    public static final String ENGINE_ITL = "orbitkv.engine.itl";
    /** Timer, tag {@code engine}: the model's forward steps (simulated engines: the cost model's time). */
    public static final String ENGINE_STEP = "orbitkv.engine.step";
    /** Distribution, tag {@code engine}: tokens a step computed (one per decoding sequence, plus prefill chunks). */
    public static final String ENGINE_STEP_TOKENS = "orbitkv.engine.step.tokens";
    /** Gauge, tags {@code engine}, {@code state} (running, waiting): sequences of the engine's scheduler. */
    public static final String ENGINE_SEQS = "orbitkv.engine.seqs";
    /** Gauge, tag {@code engine}: the model's KV blocks reserved by running sequences, as a fraction of the pool (vLLM's kv_cache_usage_perc). */
    public static final String ENGINE_KV_USAGE = "orbitkv.engine.kv.usage";
    /** Counter, tag {@code engine}: prompt tokens looked up in the prefix cache (vLLM's prefix_cache_queries). */
    public static final String ENGINE_PREFIX_QUERIES = "orbitkv.engine.prefix.cache.queries";
    /** Counter, tag {@code engine}: prompt tokens found in the prefix cache (vLLM's prefix_cache_hits). */
    public static final String ENGINE_PREFIX_HITS = "orbitkv.engine.prefix.cache.hits";

    // ------------------------------------------------------------------ dashboard (stream-processing stats)

    /** Counter, tags {@code topic}, {@code type}: records the dashboard consumed. */
    public static final String DASHBOARD_RECORDS = "orbitkv.dashboard.records";
    /** Counter, tag {@code error_type}: records the dashboard dead-lettered. */
    public static final String DASHBOARD_REJECTED = "orbitkv.dashboard.rejected";
    /** Counter, tag {@code window}: records that arrived after their window closed (past the grace). */
    public static final String DASHBOARD_LATE = "orbitkv.dashboard.late";
    /** Timer, tag {@code path}: HTTP queries of the dashboard (fan-out included). */
    public static final String DASHBOARD_QUERY = "orbitkv.dashboard.query";

    /** Counter, tags {@code topic}, {@code cause} ({@code denied}: refused by the ACLs; {@code failed}): writes the broker did not take. */
    public static final String KAFKA_WRITE_FAILURES = "orbitkv.kafka.write.failures";
}
