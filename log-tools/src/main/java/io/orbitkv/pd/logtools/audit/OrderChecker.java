package io.orbitkv.pd.logtools.audit;

import static io.orbitkv.pd.logtools.audit.RuleChecker.time;

import io.orbitkv.pd.logtools.audit.Observation.AbortDecided;
import io.orbitkv.pd.logtools.audit.Observation.Ended;
import io.orbitkv.pd.logtools.audit.Observation.IssuedOrder;
import io.orbitkv.pd.logtools.audit.Observation.OrderDestination;
import io.orbitkv.pd.logtools.audit.Observation.OrderIssued;
import io.orbitkv.pd.logtools.audit.RequestHistory.Fact;
import io.orbitkv.pd.logtools.audit.RequestHistory.Hold;
import io.orbitkv.pd.logtools.audit.RequestHistory.Kind;

/**
 * The order rules ({@link Rule#ORDER_AFTER_OUTCOME}, {@link Rule#ORDER_AFTER_CANCEL}, {@link Rule#CANCEL_IGNORED},
 * {@link Rule#ORDER_AFTER_LEASE_EXPIRY}, {@link Rule#ABORT_WITHOUT_ORDER}): a transfer is ordered only for a live,
 * uncancelled request into a live lease, and every accepted cancel is answered. "After a cancel" is judged by the
 * facts the deciding fact came after ({@link IssuedOrder#anchor()}), not by timestamps.
 */
final class OrderChecker implements RuleChecker {

    @Override
    public void check(RequestHistory r, Observation seen, Violations out) {
        switch (seen) {
            case OrderIssued(IssuedOrder o) -> issued(r, o, out);
            case OrderDestination(IssuedOrder o) -> {
                Hold dest = o.dest();
                if (dest != null && o.t() >= dest.leaseExpiry) {
                    out.add(Rule.ORDER_AFTER_LEASE_EXPIRY, r.id, o.where(), o.what() + " at or after the end of lease " + o.order().getLeaseId()
                            + "@" + o.order().getLeaseEpoch() + " (" + time(dest.leaseExpiry) + ")");
                }
            }
            case AbortDecided(var a, var where) -> {
                if (r.attempts.get(a.getAttempt()) == null && a.getAttempt() > r.lastAttempt) {
                    out.add(Rule.ABORT_WITHOUT_ORDER, r.id, where, "AbortTransfer of " + a.getOrderId() + " attempt " + a.getAttempt()
                            + ", which was never ordered (last attempt " + r.lastAttempt + ")");
                }
            }
            case Ended e when !e.inFlight() && r.admitted() -> cancelsAnswered(r, out);
            default -> { }
        }
    }

    private static void issued(RequestHistory r, IssuedOrder o, Violations out) {
        String what = o.what();
        if (r.outcomeSeq >= 0) {
            out.add(Rule.ORDER_AFTER_OUTCOME, r.id, o.where(), what + " after the request's outcome " + r.outcomeKind + " (seq "
                    + r.outcomeSeq + ")");
        }
        if (r.cancelDecisionSeq >= 0) {
            out.add(Rule.ORDER_AFTER_CANCEL, r.id, o.where(), what + " after the cancel was decided (seq " + r.cancelDecisionSeq + ")");
            return;
        }
        for (Fact f : r.facts) {
            if (f.kind == Kind.CANCEL && !f.rejected && f.idx < o.anchor()) {
                out.add(Rule.ORDER_AFTER_CANCEL, r.id, o.where(), what + " after CancelRequested " + f.eventId + " (at "
                        + time(f.streamTime) + ") was processed");
                return;
            }
        }
    }

    /** Once admitted, the decider answers every cancel: with the outcome, or an InputRejected when it ended already. */
    private static void cancelsAnswered(RequestHistory r, Violations out) {
        Fact admit = r.first(Kind.ADMITTED);
        for (Fact f : r.facts) {
            if (f.kind == Kind.CANCEL && !f.rejected && !f.causedDecision && f.idx > admit.idx) {
                out.add(Rule.CANCEL_IGNORED, r.id, "request-events-" + f.partition + "@" + f.offset, "CancelRequested " + f.eventId
                        + " (" + time(f.streamTime) + ") of an admitted request: no decision answered it");
            }
        }
    }
}
