package io.orbitkv.pd.transport.tcp.internal;

import java.io.Closeable;
import java.io.IOException;
import java.time.Duration;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

/**
 * Closes connections that stopped making progress in the middle of a frame or a push. Blocking NIO channels have
 * no read or write timeout; closing the channel is what unblocks the thread, which then reports the timeout.
 */
public final class Watchdog implements AutoCloseable {

    /** What the watchdog watches on one connection. */
    public static final class Activity {
        private final Closeable channel;
        private volatile long lastProgressNanos = System.nanoTime();
        private volatile boolean busy;
        private volatile boolean fired;

        Activity(Closeable channel) {
            this.channel = channel;
        }

        /** Bytes moved or a frame completed. */
        public void progress() {
            lastProgressNanos = System.nanoTime();
        }

        /** Inside a frame or a push: a stall now is a failure. */
        public void busy(boolean b) {
            lastProgressNanos = System.nanoTime();
            busy = b;
        }

        /** True when the watchdog closed the connection. */
        public boolean fired() {
            return fired;
        }
    }

    private final long timeoutNanos;
    private final Set<Activity> watched = ConcurrentHashMap.newKeySet();
    private final ScheduledExecutorService timer;

    public Watchdog(Duration timeout, String name) {
        this.timeoutNanos = timeout.toNanos();
        this.timer = Executors.newSingleThreadScheduledExecutor(r -> Thread.ofPlatform().daemon().name(name).unstarted(r));
        long period = Math.max(20, Math.min(500, timeout.toMillis() / 4));
        timer.scheduleWithFixedDelay(this::scan, period, period, TimeUnit.MILLISECONDS);
    }

    public Activity watch(Closeable channel) {
        Activity a = new Activity(channel);
        watched.add(a);
        return a;
    }

    public void unwatch(Activity a) {
        watched.remove(a);
    }

    private void scan() {
        long now = System.nanoTime();
        for (Activity a : watched) {
            if (a.busy && now - a.lastProgressNanos > timeoutNanos && !a.fired) {
                a.fired = true;
                try {
                    a.channel.close();
                } catch (IOException ignored) {
                    // closing is all we wanted
                }
            }
        }
    }

    @Override
    public void close() {
        timer.shutdownNow();
    }
}
