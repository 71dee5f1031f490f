package io.orbitkv.pd.logtools.audit;

import static io.orbitkv.pd.logtools.audit.RuleChecker.time;

import io.orbitkv.pd.decider.DeciderPolicy;
import io.orbitkv.pd.logtools.audit.Observation.Ended;
import io.orbitkv.pd.logtools.audit.Observation.ReleaseTouches;
import io.orbitkv.pd.logtools.audit.Observation.ReleaseUnheld;
import io.orbitkv.pd.logtools.audit.RequestHistory.Attempt;
import io.orbitkv.pd.logtools.audit.RequestHistory.Hold;

/**
 * The page rules ({@link Rule#PAGES_NOT_RELEASED}, {@link Rule#PAGES_RELEASED_TWICE}, {@link Rule#RELEASE_BEFORE_DRAIN}):
 * every page set a fact reported as held is released exactly once, and not while a transfer attempt could still push
 * into or read from it. An attempt can push until it reports, or until its deadline (or abort) plus the drain grace.
 */
record PageChecker(DeciderPolicy policy) implements RuleChecker {

    @Override
    public void check(RequestHistory r, Observation seen, Violations out) {
        switch (seen) {
            case ReleaseUnheld u -> out.add(Rule.PAGES_RELEASED_TWICE, r.id, u.release().where(), u.release().what() + (u.heldBefore()
                    ? " releases pages that were already released" : " releases pages no fact of this request reported as held"));
            case ReleaseTouches touch when !touch.engineGone() -> drained(r, touch, out);
            case Ended e when !e.inFlight() -> {
                for (Hold h : r.holds) {
                    if (h.counted() && h.releasedAt < 0) {
                        out.add(Rule.PAGES_NOT_RELEASED, r.id, "end of log", "[" + h.key + "] held since " + h.fact.eventId + " ("
                                + time(h.fact.streamTime) + ") never released; the log runs to " + time(e.streamTime()));
                    }
                }
            }
            default -> { }
        }
    }

    private void drained(RequestHistory r, ReleaseTouches touch, Violations out) {
        Attempt a = touch.attempt();
        long t = touch.release().t();
        long fence = Math.min(a.order.getDeadlineMs(), a.abortedAt == null ? Long.MAX_VALUE : a.abortedAt) + policy.drainGrace().toMillis();
        boolean drained = (a.reported != null && a.reported <= t) || t >= fence;
        if (!drained) {
            out.add(Rule.RELEASE_BEFORE_DRAIN, r.id, touch.release().where(), touch.release().what() + " while attempt " + a.order.getAttempt()
                    + " may still push (no report; " + (a.abortedAt == null ? "not aborted" : "aborted at " + time(a.abortedAt))
                    + "; fenced only from " + time(fence) + ")");
        }
    }
}
