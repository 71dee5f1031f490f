package io.orbitkv.pd.tracing;

import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import io.orbitkv.pd.metrics.ComponentMetrics;
import io.orbitkv.pd.metrics.MetricNames;
import java.util.EnumMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

/**
 * The hops of one P/D handoff on the wall clock, in the order a request crosses them, from the {@link Marks} the
 * components write (docs/architecture.md, "Anatomy of a handoff"). One vocabulary for {@code trace}, the dashboard,
 * every process's {@code orbitkv_hop_seconds{hop}} and {@code bench e2e}. A hop is either inside one process (one
 * clock, exact) or a Kafka or HTTP hop between two ({@link #crossProcess}: on several hosts it carries their skew).
 */
public enum Hop {
    /** Proxy: the client's request received → {@code RequestAdmitted} handed to Kafka (engines are called at once). */
    ADMIT("admit", "proxy: request in → admission out", false),
    /** The proxy's call → the prefill engine received it (HTTP). */
    PREFILL_REQUEST("prefill_request", "HTTP: proxy → prefill engine in", true),
    /** Prefill engine: request in → its compute started (a batch slot free). */
    PREFILL_QUEUE("prefill_queue", "prefill engine: in → compute start", false),
    /** Prefill engine: the prompt's modelled compute (KV written into its pages). */
    PREFILL_COMPUTE("prefill_compute", "prefill engine: compute", false),
    /** Prefill engine: KV computed → {@code PrefillCompleted} handed to Kafka. */
    PREFILL_REPORT("prefill_report", "prefill engine: computed → fact out", false),
    /** Beside the handoff: {@code PrefillCompleted} out → acknowledged → the prefill engine's answer read by the proxy. */
    PREFILL_ANSWER("prefill_answer", "prefill fact out → answer at the proxy", true),
    /** The fact that completed the pair (prefill done or decode ready, the later one) → the decider took it up. */
    FACT_TO_DECIDER("fact_to_decider", "Kafka: fact out → decider in", true),
    /** Decider: the fact taken up → the {@code TransferOrder} handed to Kafka. */
    DECIDER_ORDER("decider_order", "decider: fact in → order out", false),
    /** The {@code TransferOrder} → the source engine's worker polled it. */
    ORDER_TO_WORKER("order_to_worker", "Kafka: order out → worker in", true),
    /**
     * Order-ahead: the prefill engine's KV computed → its worker read the engine's {@code PrefillCompleted} on the engine
     * API and started the order it holds (replaces the three hops above: the decider is not on this path).
     */
    PREFILL_TO_WORKER("prefill_to_worker", "engine API: prefill computed → worker starts the order ahead", true),
    /** Worker: polled → an order slot took it up. */
    WORKER_QUEUE("worker_queue", "worker: queued", false),
    /** Worker: destination looked up, plan built, {@code TransferStarted} sent, connection ready. */
    TRANSFER_SETUP("transfer_setup", "worker: setup and connection", false),
    /** Worker: the receiver's admission (token, epochs, fences, bounds) — the BEGIN round trip. */
    TRANSFER_ADMISSION("transfer_admission", "receiver: admission round trip", true),
    /** Worker: the page bytes on the wire, first to last written. */
    TRANSFER_WIRE("transfer_wire", "bytes on the wire", false),
    /** Worker: last byte written → the receiver acknowledged every byte in place (drain, apply, END/ACK). */
    TRANSFER_APPLY("transfer_apply", "receiver: apply and acknowledge", true),
    /** Worker: acknowledged → {@code TransferCompleted} handed to Kafka. */
    TRANSFER_REPORT("transfer_report", "worker: acked → report out", false),
    /** {@code TransferCompleted} → the decider took it up. */
    REPORT_TO_DECIDER("report_to_decider", "Kafka: report out → decider in", true),
    /** Decider: the report taken up → {@code KvReady} handed to Kafka. */
    DECIDER_KV_READY("decider_kv_ready", "decider: report in → KvReady out", false),
    /**
     * Ready on landing: every byte in place → the decode engine read the kv_ready its own worker handed it on the engine
     * API (replaces the report → decider → {@code KvReady} hops, which follow off the critical path). It starts at the
     * sender's {@code ack}, or at the engine's notice when that came first (tcp: both follow the landing over two
     * sockets; the apply hop then ends there), so apply + this hop are exactly last byte written → engine in.
     */
    LANDED_TO_ENGINE("landed_to_engine", "engine API: bytes landed → decode engine in", true),
    /** {@code KvReady} → the decode engine read it. */
    KV_READY_TO_ENGINE("kv_ready_to_engine", "Kafka: KvReady out → decode engine in", true),
    /** Decode engine: {@code KvReady} read → first token written on the HTTP answer. */
    ENGINE_FIRST_TOKEN("engine_first_token", "decode engine: KvReady in → first token out", false),
    /** The decode engine's first token → the proxy read it. */
    FIRST_TOKEN_TO_PROXY("first_token_to_proxy", "HTTP: first token → proxy", true);

    private final String key;
    private final String label;
    private final boolean crossProcess;

    Hop(String key, String label, boolean crossProcess) {
        this.key = key;
        this.label = label;
        this.crossProcess = crossProcess;
    }

    /** The name used in metrics ({@code hop} tag), JSON and tables. */
    public String key() {
        return key;
    }

    /** A short human description: where, and from what to what. */
    public String label() {
        return label;
    }

    /** True when the hop's two ends are marked by different processes (two clocks across hosts). */
    public boolean crossProcess() {
        return crossProcess;
    }

    /** Registers {@code orbitkv_hop_seconds{hop}} timers for {@code hops} on {@code registry}. */
    public static Meters meters(MeterRegistry registry, Hop... hops) {
        Map<Hop, Timer> m = new EnumMap<>(Hop.class);
        for (Hop h : hops) {
            m.put(h, ComponentMetrics.latency(registry, MetricNames.HOP, "one hop of a handoff on the wall clock", "hop", h.key));
        }
        return new Meters(m);
    }

    /** A process's hop timers; recording a hop it did not register, or a negative span (clock step), does nothing. */
    public static final class Meters {
        private final Map<Hop, Timer> timers;

        private Meters(Map<Hop, Timer> timers) {
            this.timers = timers;
        }

        /** Records {@code toMicros - fromMicros}; ignored when either is 0 (not marked). */
        public void record(Hop hop, long fromMicros, long toMicros) {
            Timer t = timers.get(hop);
            if (t != null && fromMicros > 0 && toMicros >= fromMicros) {
                t.record(toMicros - fromMicros, TimeUnit.MICROSECONDS);
            }
        }

        public static Meters none() {
            return new Meters(Map.of());
        }
    }
}
