package io.orbitkv.pd.decider;

import io.orbitkv.pd.events.CancelRequested;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.DecodeReady;
import io.orbitkv.pd.events.DecodeRejected;
import io.orbitkv.pd.events.EngineEpochChanged;
import io.orbitkv.pd.events.InputRejected;
import io.orbitkv.pd.events.PhaseTimings;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.events.PrefillFailed;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.Tick;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferFailed;
import io.orbitkv.pd.schemas.EventText;
import io.orbitkv.pd.state.Admission;
import io.orbitkv.pd.state.DeciderState;
import io.orbitkv.pd.state.HeldPages;
import io.orbitkv.pd.state.Phase;
import java.util.ArrayList;
import java.util.List;
import org.apache.avro.specific.SpecificRecord;

/**
 * The per-request state machine of the decider: a pure function from (state, fact or timer, stream time) to
 * (new state, decisions, rejection). No clock, no I/O, no randomness: replaying the same facts at the same
 * stream times yields the same decisions, which is what makes the log replayable.
 *
 * <p>States are {@link Phase}; the terminal ones are COMPLETED, CANCELLED, TIMED_OUT and FAILED. The whole machine is
 * one table, in {@link Transitions}: for every phase and every input (each fact type, and a due timer), the handler
 * that runs, or that the input is ignored or refused. This class drives it: a fact is checked on its own first
 * ({@link FactValidator}), a repeated event id is ignored, a Tick only advances stream time. Invariants:
 * <ul>
 *   <li>an admitted request gets exactly one {@link RequestOutcome};</li>
 *   <li>every page set a fact reports as held is released exactly once ({@link HeldPages#getReleased()});</li>
 *   <li>no page is released while a transfer attempt may still push into or read from it (open attempt or
 *       drain window after an abort);</li>
 *   <li>no order is issued after a terminal outcome, and every order carries the current lease epoch.</li>
 * </ul>
 * Facts that cannot apply in the current state are reported as {@link InputRejected} decisions and, when they
 * are wrong rather than merely late, dead-lettered too.
 */
public final class RequestStateMachine {

    /** A decision payload and the engines that must act on it (routed on the engine-commands topic). */
    public record Emit(SpecificRecord payload, List<String> engines) { }

    /** Why an input goes to the dead-letter topic. */
    public record Rejection(String errorType, String reason) { }

    /**
     * The result of one step.
     *
     * @param state     the new state, or {@code null} when the request's state is to be deleted
     * @param emits     decisions, in order
     * @param rejection non-null when the input must be dead-lettered
     */
    public record Step(DeciderState state, List<Emit> emits, Rejection rejection) { }

    /**
     * The decision record for one emit of a step, with its deterministic id {@code <request id>/<seq>} taken from
     * {@code state}'s sequence, which this advances (actors dedupe by that id, so it must be the same on every replay).
     */
    public static Decision decision(String requestId, DeciderState state, Emit emit, long streamTimeMs, String causeEventId) {
        int seq = state.getSeq();
        state.setSeq(seq + 1);
        return Decision.newBuilder().setRequestId(requestId).setDecisionId(requestId + "/" + seq).setSeq(seq)
                .setStreamTimeMs(streamTimeMs).setCauseEventId(causeEventId).setPayload(emit.payload()).build();
    }

    private final DeciderPolicy policy;
    private final FactValidator validator;
    private final Transitions transitions;

    public RequestStateMachine(DeciderPolicy policy) {
        this.policy = policy;
        this.validator = new FactValidator(policy.maxRuns());
        this.transitions = new Transitions(policy);
    }

    /**
     * How long releases wait, after an attempt was given up, for its sender's report: twice the lease. A sender that has
     * not reported by then is taken as gone (one that restarted as a new instance settles them at once).
     */
    private long settleWaitMs() {
        return 2 * policy.leaseDuration().toMillis();
    }

    public DeciderPolicy policy() {
        return policy;
    }

    public static boolean isTerminal(Phase p) {
        return p == Phase.COMPLETED || p == Phase.CANCELLED || p == Phase.TIMED_OUT || p == Phase.FAILED;
    }

    /** Facts that may legitimately arrive before their RequestAdmitted (the proxy dispatches concurrently). */
    public static boolean mayPrecedeAdmission(Object payload) {
        return payload instanceof RequestAdmitted || payload instanceof PrefillCompleted || payload instanceof PrefillFailed
                || payload instanceof DecodeReady || payload instanceof DecodeRejected || payload instanceof CancelRequested;
    }

    // ------------------------------------------------------------------------------------------------ steps

    /** Applies one fact at stream time {@code now}. {@code state} is null for a request not seen before. */
    public Step onEvent(DeciderState state, RequestEvent event, long now) {
        Object p = event.getPayload();
        if (p instanceof Tick) {
            return new Step(state, List.of(), null);
        }
        boolean fresh = state == null;
        if (fresh) {
            if (p instanceof EngineEpochChanged) {
                return new Step(null, List.of(), null); // the request is gone; nothing holds pages any more
            }
            if (!mayPrecedeAdmission(p)) {
                return new Step(null, List.of(), new Rejection("UNKNOWN_REQUEST",
                        EventText.typeOf(p) + " for request " + event.getRequestId() + " that the decider does not know"
                                + " (never admitted, or finished longer than decider.retention ago)"));
            }
            state = newState(event.getRequestId(), now);
        }
        if (state.getSeenEventIds().contains(event.getEventId())) {
            return new Step(state, List.of(), null); // an at-least-once duplicate of a fact already applied
        }
        Rejection invalid = validator.check(p);
        if (invalid != null) {
            // A malformed fact changes nothing; a request first seen through it is not created.
            return new Step(fresh ? null : state, List.of(), invalid);
        }
        StepContext c = new StepContext(state, event, now, policy.historyLimit(), settleWaitMs());
        remember(state, event.getEventId());
        settle(state, p);
        c.history("in", EventText.typeOf(p), event.getEventId());
        if (!transitions.onFact(state.getPhase(), c, p)) {
            c.illegal("UNSUPPORTED", "payload type " + EventText.typeOf(p) + " is not handled by this decider version");
        }
        return c.finish();
    }

    /**
     * A sender's report settles its attempt (whatever the phase: a report of an attempt given up long ago still tells that
     * its push is over); a new instance of the source engine settles them all (its predecessor pushes nothing more, and
     * it refuses orders for the old instance's pages).
     */
    private static void settle(DeciderState s, Object p) {
        int attempt = p instanceof TransferCompleted tc && tc.getOrderId().equals(s.getRequestId() + "/a" + tc.getAttempt()) ? tc.getAttempt()
                : p instanceof TransferFailed tf && tf.getOrderId().equals(s.getRequestId() + "/a" + tf.getAttempt()) ? tf.getAttempt() : 0;
        if (attempt >= 1 && attempt <= 31) {
            s.setUnsettledAttempts(s.getUnsettledAttempts() & ~(1 << (attempt - 1)));
        } else if (p instanceof EngineEpochChanged ec && s.getUnsettledAttempts() != 0 && ec.getEngineId().equals(StepContext.sourceEngine(s))) {
            s.setUnsettledAttempts(0);
        }
    }

    /** Fires whatever timers are due at stream time {@code now}. */
    public Step onTimer(DeciderState s, long now) {
        StepContext c = new StepContext(s, null, now, policy.historyLimit(), settleWaitMs());
        if (StepContext.releasesPending(s) && s.getAttemptOpen() && now >= s.getOrderDeadlineMs() + policy.drainGrace().toMillis()) {
            // The attempt never reported; past its deadline plus the drain window the receiver refuses its pushes.
            s.setAttemptOpen(false);
            c.history("timer", "DrainElapsed", "no report from attempt " + s.getAttempt() + "; its pushes are fenced now");
        }
        transitions.onTimer(s.getPhase(), c);
        return c.finish();
    }

    /** The earliest stream time at which {@link #onTimer} would change this state, or 0 for none. */
    public long nextDeadline(DeciderState s) {
        long next = Long.MAX_VALUE;
        Phase p = s.getPhase();
        if (StepContext.releasesPending(s)) {
            next = Math.min(next, s.getAttemptOpen() ? s.getOrderDeadlineMs() + policy.drainGrace().toMillis()
                    : s.getUnsettledAttempts() != 0 ? Math.max(s.getDrainUntilMs(), s.getSettleByMs()) : s.getDrainUntilMs());
        }
        if (isTerminal(p)) {
            return StepContext.releasesPending(s) || StepContext.holdsPages(s) ? next : s.getFinishedMs() + policy.retention().toMillis();
        }
        if (p == Phase.AWAITING_ADMISSION) {
            return Math.min(next, s.getFirstSeenMs() + policy.admissionGrace().toMillis());
        }
        Admission a = s.getAdmission();
        if (a.getDeadlineMs() != null) {
            next = Math.min(next, a.getDeadlineMs());
        }
        long admitted = s.getTimings().getAdmittedMs();
        if (s.getSource() == null && p != Phase.RECOMPUTING) {
            next = Math.min(next, admitted + policy.prefillTimeout().toMillis());
        }
        if (s.getDest() == null) {
            next = Math.min(next, admitted + policy.decodeReadyTimeout().toMillis());
        } else if (!s.getDest().getReleased()) {
            next = Math.min(next, s.getLeaseDeadlineMs());
        }
        if (p == Phase.TRANSFERRING) {
            next = Math.min(next, s.getOrderDeadlineMs());
        }
        if (p == Phase.RETRY_WAIT) {
            next = Math.min(next, s.getRetryAtMs());
        }
        return next == Long.MAX_VALUE ? 0 : next;
    }

    private static DeciderState newState(String requestId, long now) {
        return DeciderState.newBuilder().setRequestId(requestId).setPhase(Phase.AWAITING_ADMISSION).setFirstSeenMs(now)
                .setTimings(PhaseTimings.newBuilder().build()).setSeenEventIds(new ArrayList<>()).setHistory(new ArrayList<>()).build();
    }

    private static final int SEEN_IDS = 16;

    private static void remember(DeciderState s, String eventId) {
        List<String> seen = s.getSeenEventIds();
        if (seen.size() >= SEEN_IDS) {
            seen.remove(0);
        }
        seen.add(eventId);
    }
}
