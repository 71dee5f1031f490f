package io.orbitkv.pd.engine.client;

import io.orbitkv.pd.events.OutcomeKind;

/** What a decode engine waiting for a request's KV learns first (see {@link EngineClient#awaitKv}). */
public sealed interface KvSignal {

    /**
     * The KV landed in the destination pages.
     *
     * @param receivedMicros when this engine read the {@code KvReady} (wall clock, µs; {@code Marks#nowMicros})
     * @param decidedMicros  when it was handed on (the decider's {@code out} mark, or the worker's on landing), or 0 if it
     *                       carries none
     * @param firstToken     the token the prefill sampled, or null when its engine reported none
     * @param landedMicros   when the bytes landed, if the engine's worker handed the KV over on landing (engine API,
     *                       its {@code land} mark); 0 when this is the decider's {@code KvReady}
     */
    record Ready(String orderId, long bytes, long receivedMicros, long decidedMicros, Integer firstToken, long landedMicros) implements KvSignal {
        /** Whether the worker handed the KV over as it landed (rather than the decider, after the transfer's report). */
        public boolean onLanding() {
            return landedMicros > 0;
        }
    }

    /** No KV will come: compute the prefill here (bump the lease epoch first). */
    record Recompute(String reason) implements KvSignal { }

    /** The request ended (cancelled, timed out, failed) or its pages were released: stop, do not decode. */
    record Ended(OutcomeKind kind, String reason) implements KvSignal { }
}
