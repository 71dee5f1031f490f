package io.orbitkv.pd.worker.internal;

import java.util.TreeSet;

/**
 * Which consumed offsets of the command partition are finished, so the committed offset never passes a record
 * whose effect (an order's terminal report) is not yet durable: after a crash the worker re-reads from there and
 * re-executes idempotently.
 */
public final class OffsetTracker {

    private final TreeSet<Long> pending = new TreeSet<>();
    private long maxSeen = -1;
    private long lastCommitted = -1;

    public synchronized void track(long offset) {
        pending.add(offset);
        maxSeen = Math.max(maxSeen, offset);
    }

    public synchronized void done(long offset) {
        pending.remove(offset);
    }

    /** The offset to commit now (the next record to read after a restart), or -1 when nothing changed. */
    public synchronized long committable() {
        long next = pending.isEmpty() ? maxSeen + 1 : pending.first();
        if (next <= lastCommitted || maxSeen < 0) {
            return -1;
        }
        return next;
    }

    public synchronized void committed(long offset) {
        lastCommitted = Math.max(lastCommitted, offset);
    }

    public synchronized int inFlight() {
        return pending.size();
    }
}
