package io.orbitkv.pd.decider.internal;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The earliest timer deadline of each partition this instance owns, published by the partition's processor after
 * every fact and read by the {@link Ticker} on its own thread: a partition whose earliest deadline is due by the wall
 * clock gets a tick. A stale view costs at most one tick too many or one tick round late, never a decision: the
 * decision itself is taken by the processor from its own timer index at the tick's stream time.
 */
public final class DueTimers {

    private final Map<Integer, Long> earliest = new ConcurrentHashMap<>();

    /** Records the partition's earliest deadline (0: no timer). */
    void publish(int partition, long deadline) {
        if (deadline > 0) {
            earliest.put(partition, deadline);
        } else {
            earliest.remove(partition);
        }
    }

    /** The partition is no longer processed here (task closed or moved). */
    void forget(int partition) {
        earliest.remove(partition);
    }

    /** True when the partition has a timer due at {@code now}. */
    public boolean due(int partition, long now) {
        Long d = earliest.get(partition);
        return d != null && d <= now;
    }
}
