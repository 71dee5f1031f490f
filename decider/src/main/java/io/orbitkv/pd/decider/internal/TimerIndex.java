package io.orbitkv.pd.decider.internal;

import java.util.ArrayList;
import java.util.List;
import java.util.TreeSet;

/**
 * One task's timers, in deadline order: which request wakes up at which stream time. Derived from the request
 * states (each state carries its next deadline), so it lives in the processor and is rebuilt when the task starts,
 * never written to a store or a changelog. Not thread-safe: the task's stream thread owns it.
 */
final class TimerIndex {

    record Timer(long deadline, String requestId) implements Comparable<Timer> {
        @Override
        public int compareTo(Timer o) {
            int c = Long.compare(deadline, o.deadline);
            return c != 0 ? c : requestId.compareTo(o.requestId);
        }
    }

    private final TreeSet<Timer> timers = new TreeSet<>();

    void add(long deadline, String requestId) {
        timers.add(new Timer(deadline, requestId));
    }

    void remove(long deadline, String requestId) {
        timers.remove(new Timer(deadline, requestId));
    }

    void clear() {
        timers.clear();
    }

    /** Up to {@code max} timers with a deadline at or before {@code now}, earliest first; the index is unchanged. */
    List<Timer> due(long now, int max) {
        if (timers.isEmpty() || timers.first().deadline() > now) {
            return List.of();
        }
        List<Timer> out = new ArrayList<>();
        for (Timer t : timers) {
            if (t.deadline() > now || out.size() == max) {
                break;
            }
            out.add(t);
        }
        return out;
    }

    /** The earliest deadline, or 0 when there is no timer. */
    long earliest() {
        return timers.isEmpty() ? 0 : timers.first().deadline();
    }
}
