package io.orbitkv.pd.runtime;

import java.time.Duration;

/**
 * A long-running component's SIGTERM handling with a bound: the JVM's shutdown hook closes the component (ending or
 * handing off its in-flight work), and a watchdog halts the process if that close has not returned within the bound.
 * Closing talks to peers — Kafka (a last commit, a leave-group), workers, engines — and when those are already gone
 * each client waits out its own timeout, one after another: measured before this bound, after the broker was
 * stopped first, the decider took 42 s, the decode engine 62 s, and the prefill engine and both workers were still
 * running 60 s after SIGTERM (docs/chaos.md). An orchestrator (Kubernetes' {@code terminationGracePeriodSeconds},
 * the demo) then kills with SIGKILL anyway; halting ourselves is the same as a crash, which every component survives
 * by design, and it comes with a line saying what was still closing.
 */
public final class ShutdownBound {

    /** The default bound: inside the 10 s the chaos issue allows, with room for the JVM to exit. */
    public static final Duration DEFAULT = Duration.ofSeconds(8);

    private ShutdownBound() { }

    /** Installs the hook: on SIGTERM (or a normal exit) runs {@code close}, and halts the JVM {@code bound} later if it has not returned. */
    public static void install(String component, Runnable close, Duration bound) {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> run(component, close, bound), component + "-shutdown"));
    }

    /** {@link #install(String, Runnable, Duration)} with {@link #DEFAULT}. */
    public static void install(String component, Runnable close) {
        install(component, close, DEFAULT);
    }

    private static void run(String component, Runnable close, Duration bound) {
        Thread closing = Thread.currentThread();
        long start = System.nanoTime();
        Thread watchdog = Thread.ofPlatform().daemon().name(component + "-shutdown-watchdog").start(() -> {
            try {
                Thread.sleep(bound.toMillis());
            } catch (InterruptedException e) {
                return; // closed in time
            }
            StringBuilder where = new StringBuilder();
            for (StackTraceElement e : closing.getStackTrace()) {
                where.append("\n\tat ").append(e);
                if (where.length() > 2000) {
                    break;
                }
            }
            System.err.printf("%s: did not stop within %d s of SIGTERM; halting (the same as a crash, which it survives). Still closing:%s%n",
                    component, bound.toSeconds(), where);
            System.err.flush();
            Runtime.getRuntime().halt(143);
        });
        try {
            close.run();
        } finally {
            watchdog.interrupt();
            System.err.printf("%s: stopped in %d ms%n", component, (System.nanoTime() - start) / 1_000_000);
        }
    }
}
