package io.orbitkv.pd.bench;

import com.sun.management.GarbageCollectionNotificationInfo;

import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;

import javax.management.ListenerNotFoundException;
import javax.management.NotificationEmitter;
import javax.management.NotificationListener;
import javax.management.openmbean.CompositeData;

/**
 * The collector pauses of this JVM while a benchmark runs, from the platform's GC notifications: young and full
 * collections (G1's concurrent cycles run beside the application and are not counted). The benchmark reports the
 * pauses that fell into its measured window, so a run's latency tail can be read against them.
 */
final class GcPauses implements AutoCloseable {

    /** Pauses in a window: how many, their mean and their longest (ms). */
    record Summary(int count, double meanMs, double maxMs) {
        static final Summary NONE = new Summary(0, 0, 0);
    }

    /** One pause: when its notification arrived (System.nanoTime) and how long it lasted (ms). */
    private record Pause(long atNanos, long durationMs) { }

    private final ConcurrentLinkedQueue<Pause> pauses = new ConcurrentLinkedQueue<>();
    private final List<Runnable> unregister = new ArrayList<>();

    GcPauses() {
        NotificationListener listener = (notification, handback) -> {
            if (GarbageCollectionNotificationInfo.GARBAGE_COLLECTION_NOTIFICATION.equals(notification.getType())) {
                var info = GarbageCollectionNotificationInfo.from((CompositeData) notification.getUserData());
                if (!info.getGcName().contains("Concurrent")) {
                    pauses.add(new Pause(System.nanoTime(), info.getGcInfo().getDuration()));
                }
            }
        };
        for (GarbageCollectorMXBean gc : ManagementFactory.getGarbageCollectorMXBeans()) {
            if (gc instanceof NotificationEmitter emitter) {
                emitter.addNotificationListener(listener, null, null);
                unregister.add(() -> {
                    try {
                        emitter.removeNotificationListener(listener);
                    } catch (ListenerNotFoundException e) {
                        // already gone
                    }
                });
            }
        }
    }

    /** The pauses whose notification arrived in [fromNanos, toNanos). */
    Summary between(long fromNanos, long toNanos) {
        int n = 0;
        long sum = 0;
        long max = 0;
        for (Pause p : pauses) {
            if (p.atNanos() >= fromNanos && p.atNanos() < toNanos) {
                n++;
                sum += p.durationMs();
                max = Math.max(max, p.durationMs());
            }
        }
        return n == 0 ? Summary.NONE : new Summary(n, sum / (double) n, max);
    }

    /**
     * Ends a warm-up with one full collection, so that what lives as long as the clients under test (the
     * producers' pooled batch buffers, above all) sits in the old generation, as it does in a process that has run
     * for a while. Without it the measured window pays for copying that cohort between survivor spaces at every
     * young collection until it is tenured (15 of them): measured at 1,000 handoffs/s, young pauses of 6-13 ms
     * falling to ~3 ms once it was (docs/decider.md, "GC").
     */
    static void settleHeap() {
        System.gc();
    }

    @Override
    public void close() {
        unregister.forEach(Runnable::run);
    }
}
