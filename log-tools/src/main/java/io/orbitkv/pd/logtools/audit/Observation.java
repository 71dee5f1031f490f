package io.orbitkv.pd.logtools.audit;

import static io.orbitkv.pd.logtools.audit.RuleChecker.time;

import io.orbitkv.pd.events.AbortTransfer;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.logtools.audit.RequestHistory.Attempt;
import io.orbitkv.pd.logtools.audit.RequestHistory.Hold;

/**
 * A point in {@link RequestLedger}'s fold at which rules are checked, handed to every {@link RuleChecker} with the
 * request's {@link RequestHistory} as it is at that point. Each type says what the ledger has applied when it is
 * seen, since a rule compares the new record with what came before it.
 *
 * <p>One record can be seen several times, once per aspect ({@link OrderIssued}, {@link OrderDestination}, ...):
 * the checkers run in a fixed order for each observation, so the aspects fix the order in which a record's
 * violations of different families are listed.
 */
sealed interface Observation {

    /** How a decision's seq relates to those already read. */
    enum Repeat { NEW, IDENTICAL, CONFLICTING }

    /** A decision of the request; seen before its seq and stream time are applied, and only a NEW one is applied further. */
    record DecisionRead(Decision decision, String type, String key, String where, Repeat repeat) implements Observation { }

    /** A record of the decisions topic that does not decode; {@code key} is its key, or null. Seen with no request. */
    record UndecodableDecision(String key, String where, String reason) implements Observation { }

    /**
     * A {@code TransferOrder} with the page sets it names matched against the request's holds. Seen in four
     * aspects, all before the order is applied.
     *
     * @param anchor index of the latest fact the decision may have seen (its cause, else the last cause so far)
     * @param dest   the accepted decode hold of the lease and pages it pushes into, or null
     * @param source the accepted prefill hold of the pages it reads, or null
     * @param ahead  issued ahead of the prefill: it names no source pages yet
     */
    record IssuedOrder(Decision decision, TransferOrder order, long t, int anchor, String where, Hold dest, Hold source,
                       String destKey, String sourceKey, boolean ahead) {

        /** How messages name the order. */
        String what() {
            return "TransferOrder " + order.getOrderId() + " (seq " + decision.getSeq() + ", " + time(t) + ")";
        }
    }

    /** The order against what came before it (the outcome, a cancel). */
    record OrderIssued(IssuedOrder order) implements Observation { }

    /** The order against the lease and pages it pushes into. */
    record OrderDestination(IssuedOrder order) implements Observation { }

    /** The order against the pages it reads and its engines' instance epochs. */
    record OrderSource(IssuedOrder order) implements Observation { }

    /** The order starts a new attempt (it is not the order issued ahead, sent again with its source pages). */
    record NewAttempt(IssuedOrder order) implements Observation { }

    /** An {@code AbortTransfer}; seen before the attempt is marked aborted. */
    record AbortDecided(AbortTransfer abort, String where) implements Observation { }

    /** A {@code ReleaseDecided} and the page set it names. */
    record Release(Decision decision, ReleaseDecided release, long t, String key, String where) {

        /** How messages name the release. */
        String what() {
            return "ReleaseDecided " + release.getSide() + " [" + key + "] (seq " + decision.getSeq() + ", " + time(t) + ")";
        }
    }

    /** A release of pages no unreleased hold has; {@code heldBefore}: a hold of them was released already. */
    record ReleaseUnheld(Release release, boolean heldBefore) implements Observation { }

    /** A release of {@code hold}; seen after the hold is marked released. */
    record Released(Release release, Hold hold) implements Observation { }

    /**
     * A release of pages {@code attempt} pushes into or reads from, seen once per such attempt after {@link Released};
     * {@code engineGone}: the release was caused by the engine's new instance epoch (its memory is gone).
     */
    record ReleaseTouches(Release release, Attempt attempt, boolean engineGone) implements Observation { }

    /** A second (or later) {@code RequestOutcome}; seen before anything of it is applied but the count of outcomes. */
    record OutcomeRepeated(RequestOutcome outcome, int seq, String where) implements Observation { }

    /** The first {@code RequestOutcome} of a request not known to have begun before the slice; seen after it is applied. */
    record OutcomeDecided(RequestOutcome outcome, String where) implements Observation { }

    /** The first {@code TransferCompleted} of an attempt ({@code bytes}: what it says moved); seen after it is applied. */
    record PushAcknowledged(Attempt attempt, long bytes, String where) implements Observation { }

    /**
     * The request is judged as a whole: at the end of the log, or when dropped as finished. {@code streamTime} is
     * its partition's; {@code inFlight}: the log does not run {@link Auditor#slackMs()} past its last activity, so
     * what is missing may still come.
     */
    record Ended(long streamTime, boolean inFlight) implements Observation { }
}
