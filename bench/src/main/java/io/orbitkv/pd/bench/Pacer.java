package io.orbitkv.pd.bench;

import java.util.concurrent.locks.LockSupport;

/** Open-loop rate limiter: the i-th action is due at start + i/rate, whatever the previous ones cost. */
public final class Pacer {
    private final long start = System.nanoTime();
    private final double intervalNanos;
    private long i;

    public Pacer(double perSecond) {
        this.intervalNanos = 1e9 / perSecond;
    }

    /** Parks until the next slot is due. */
    public void awaitNext() {
        long due = start + (long) (i++ * intervalNanos);
        long now;
        while ((now = System.nanoTime()) < due) {
            LockSupport.parkNanos(due - now);
        }
    }
}
