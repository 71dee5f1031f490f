package io.orbitkv.pd.runtime;

import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Where a long-running component (decider, dashboard, worker, proxy, engine) is in its life, as one state that every
 * part of it reads the same way: {@code /health} reports it, {@code close()} is idempotent because only the first
 * caller wins the move to {@link State#STOPPING}, and a start after a stop is refused instead of half-running.
 * Transitions are compare-and-set on one reference (as Kroxylicious' {@code KafkaProxy} does): no lock, and no
 * component-specific flag beside it.
 *
 * <pre>
 *   NEW ─▶ STARTING ─▶ RUNNING ─▶ STOPPING ─▶ STOPPED
 *             │                      ▲
 *             └──▶ FAILED ───────────┘   (a failed start is still closed, to free what it had opened)
 * </pre>
 */
public final class Lifecycle {

    /** A component's state; {@link #label()} is how {@code /health} spells it. */
    public enum State {
        NEW, STARTING, RUNNING, FAILED, STOPPING, STOPPED;

        public String label() {
            return name().toLowerCase(java.util.Locale.ROOT);
        }
    }

    private static final Logger LOG = LoggerFactory.getLogger(Lifecycle.class);

    private final String component;
    private final AtomicReference<State> state = new AtomicReference<>(State.NEW);
    private final CountDownLatch stopped = new CountDownLatch(1);
    private volatile Throwable failure;

    /** @param component the name logs and errors use, e.g. {@code worker decode-0} */
    public Lifecycle(String component) {
        this.component = component;
    }

    public State state() {
        return state.get();
    }

    public boolean isRunning() {
        return state.get() == State.RUNNING;
    }

    /** True once a close has begun: work arriving now is refused, not started. */
    public boolean isStopping() {
        State s = state.get();
        return s == State.STOPPING || s == State.STOPPED;
    }

    /** Why the start failed, or null. */
    public Throwable failure() {
        return failure;
    }

    /**
     * NEW → STARTING, at the top of {@code start()}.
     *
     * @throws IllegalStateException naming the component and its state when it was started or stopped before
     */
    public void starting() {
        if (!state.compareAndSet(State.NEW, State.STARTING)) {
            throw new IllegalStateException(component + ": cannot start, it is " + state.get().label());
        }
        LOG.atDebug().addKeyValue("component", component).log("starting");
    }

    /** STARTING → RUNNING once the component does its job; false when a stop came first (it stays stopping). */
    public boolean running() {
        return move(State.STARTING, State.RUNNING);
    }

    /** STARTING → FAILED when the start threw; the caller still closes to free what the start had opened. */
    public void failed(Throwable cause) {
        failure = cause;
        move(State.STARTING, State.FAILED);
    }

    /**
     * Moves any state before {@link State#STOPPING} to it, at the top of {@code close()}.
     *
     * @return true for the one caller that must do the closing; false when a close is under way or done
     */
    public boolean stopping() {
        while (true) {
            State s = state.get();
            if (s == State.STOPPING || s == State.STOPPED) {
                return false;
            }
            if (state.compareAndSet(s, State.STOPPING)) {
                LOG.atDebug().addKeyValue("component", component).addKeyValue("from", s.label()).log("stopping");
                return true;
            }
        }
    }

    /** STOPPING → STOPPED at the end of {@code close()}; releases {@link #awaitStopped()}. */
    public void stopped() {
        state.set(State.STOPPED);
        stopped.countDown();
    }

    /** Blocks until the component has stopped (a {@code run} command's main thread waits here for SIGTERM's close). */
    public void awaitStopped() throws InterruptedException {
        stopped.await();
    }

    /** As {@link #awaitStopped()}, at most {@code timeout}; true when stopped. */
    public boolean awaitStopped(Duration timeout) throws InterruptedException {
        return stopped.await(timeout.toNanos(), TimeUnit.NANOSECONDS);
    }

    private boolean move(State from, State to) {
        boolean moved = state.compareAndSet(from, to);
        if (moved) {
            LOG.atDebug().addKeyValue("component", component).addKeyValue("from", from.label()).addKeyValue("to", to.label()).log("lifecycle");
        }
        return moved;
    }

    @Override
    public String toString() {
        return component + " " + state.get().label();
    }
}
