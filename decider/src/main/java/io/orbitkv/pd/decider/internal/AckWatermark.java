package io.orbitkv.pd.decider.internal;

import java.util.TreeSet;

/**
 * How far a producer's sends have been acknowledged, as one number: every send numbered below
 * {@link #acknowledged()} has been acknowledged by the broker. Sends are numbered in the order they were handed to
 * the producer; acknowledgements arrive in any order across partitions, so those ahead of the first missing one wait
 * in a set. A send that failed is never acknowledged and holds the watermark where it is, until {@link #reset()}
 * (its commit refused, the tasks revived: what was sent before no longer matters).
 */
final class AckWatermark {

    private long next;
    private long acknowledged;
    private final TreeSet<Long> ahead = new TreeSet<>();

    /** Numbers the next send. */
    synchronized long send() {
        return next++;
    }

    /** Sends numbered so far: a state changed now waits until {@link #acknowledged()} reaches this. */
    synchronized long sent() {
        return next;
    }

    synchronized long acknowledged() {
        return acknowledged;
    }

    /** Send {@code seq} completed; a failed one ({@code ok} false) is never counted. */
    synchronized void completed(long seq, boolean ok) {
        if (!ok || seq < acknowledged) {
            return;
        }
        if (seq != acknowledged) {
            ahead.add(seq);
            return;
        }
        acknowledged++;
        while (!ahead.isEmpty() && ahead.first() == acknowledged) {
            ahead.pollFirst();
            acknowledged++;
        }
    }

    /** Forgets everything sent so far, acknowledged or not (after a refused commit). */
    synchronized void reset() {
        acknowledged = next;
        ahead.clear();
    }
}
