package io.orbitkv.pd.engine.client;

import io.orbitkv.pd.events.OutcomeKind;

/** What a decode engine waiting for a request's KV learns first (see {@link EngineClient#awaitKv}). */
public sealed interface KvSignal {

    /**
     * The KV landed in the destination pages.
     *
     * @param receivedMicros when this engine read the {@code KvReady} (wall clock, µs; {@code Marks#nowMicros})
     * @param decidedMicros  when the decider handed it to Kafka (its {@code out} mark), or 0 if it carries none
     * @param firstToken     the token the prefill sampled, or null when its engine reported none
     */
    record Ready(String orderId, long bytes, long receivedMicros, long decidedMicros, Integer firstToken) implements KvSignal { }

    /** No KV will come: compute the prefill here (bump the lease epoch first). */
    record Recompute(String reason) implements KvSignal { }

    /** The request ended (cancelled, timed out, failed) or its pages were released: stop, do not decode. */
    record Ended(OutcomeKind kind, String reason) implements KvSignal { }
}
