package io.orbitkv.pd.dashboard.internal;

import io.orbitkv.pd.dashboard.stats.StatsWindow;

/**
 * What the stats processor reports besides its stores: per-record facts for the process's Prometheus meters and the
 * stream time it has reached. Called on stream threads; implementations must be thread-safe and cheap.
 */
public interface StatsObserver {

    /** Does nothing (topology tests). */
    StatsObserver NONE = new StatsObserver() { };

    default void streamTime(long streamTimeMs) { }

    default void consumed(String topic, String type) { }

    default void rejected(String errorType) { }

    default void late(StatsWindow window) { }

    /** One outcome; phase durations in microseconds, -1 where the phase did not happen. */
    default void outcome(String kind, long prefillUs, long decodeReadyUs, long handoffUs, long decodeUs, long endToEndUs) { }

    default void decisionLatency(long micros) { }

    default void transferCompleted(String transport, long durationUs, long bytes) { }

    default void transferFailed(String transport, String reasonClass, boolean retriable) { }

    /** One hop of a handoff ({@code io.orbitkv.pd.tracing.Hop} key), from the records' timing marks. */
    default void hop(String hop, long micros) { }
}
