package io.orbitkv.pd.engine.client;

import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.RecomputeDecided;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.RequestOutcome;

/**
 * What the decider tells an engine, delivered once per decision id (duplicates after a decider restart are dropped
 * by the client). Called on the client's command thread: keep it short, hand work to the engine's own threads.
 */
public interface DecisionListener {

    /** The request's KV is in this (decode) engine's pages: verify and decode. */
    default void onKvReady(Decision decision, KvReady kvReady) { }

    /** Free these pages: no push can land in them any more (decode side) or nobody reads them (prefill side). */
    default void onRelease(Decision decision, ReleaseDecided release) { }

    /** Transfers failed for good and the request's policy is RECOMPUTE: run the prefill here. */
    default void onRecompute(Decision decision, RecomputeDecided recompute) { }

    /** The request's one terminal outcome. */
    default void onOutcome(Decision decision, RequestOutcome outcome) { }
}
