package io.orbitkv.pd.engine.client;

import io.orbitkv.pd.events.OutcomeKind;

/** What a decode engine waiting for a request's KV learns first (see {@link EngineClient#awaitKv}). */
public sealed interface KvSignal {

    /** The KV landed in the destination pages. */
    record Ready(String orderId, long bytes) implements KvSignal { }

    /** No KV will come: compute the prefill here (bump the lease epoch first). */
    record Recompute(String reason) implements KvSignal { }

    /** The request ended (cancelled, timed out, failed) or its pages were released: stop, do not decode. */
    record Ended(OutcomeKind kind, String reason) implements KvSignal { }
}
