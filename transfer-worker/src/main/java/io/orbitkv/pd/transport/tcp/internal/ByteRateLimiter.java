package io.orbitkv.pd.transport.tcp.internal;

import java.util.concurrent.locks.LockSupport;

/**
 * A byte-rate limit ({@code transfer.tcp.max-bytes-per-second}) shared by every push of one transport: each frame
 * waits for its slot, so the transport's sends together stay under the rate.
 */
public final class ByteRateLimiter {

    private final long bytesPerSecond;
    private long nextNanos = System.nanoTime();

    /** @param bytesPerSecond 0 for no limit */
    public ByteRateLimiter(long bytesPerSecond) {
        this.bytesPerSecond = bytesPerSecond;
    }

    /** Blocks until {@code bytes} more may be sent. */
    public void acquire(long bytes) {
        if (bytesPerSecond <= 0) {
            return;
        }
        long start;
        synchronized (this) {
            long now = System.nanoTime();
            start = Math.max(now, nextNanos);
            nextNanos = start + (long) (bytes * 1e9 / bytesPerSecond);
        }
        for (long left = start - System.nanoTime(); left > 0; left = start - System.nanoTime()) {
            LockSupport.parkNanos(left);
        }
    }
}
