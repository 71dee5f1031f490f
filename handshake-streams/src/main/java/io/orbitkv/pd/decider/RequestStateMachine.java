package io.orbitkv.pd.decider;

import io.orbitkv.pd.events.AbortTransfer;
import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.CancelRequested;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.DecodeCompleted;
import io.orbitkv.pd.events.DecodeReady;
import io.orbitkv.pd.events.DecodeRejected;
import io.orbitkv.pd.events.EngineEpochChanged;
import io.orbitkv.pd.events.FailurePolicy;
import io.orbitkv.pd.events.InputRejected;
import io.orbitkv.pd.events.KvLayout;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.LeaseHeartbeat;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.PhaseTimings;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.events.PrefillFailed;
import io.orbitkv.pd.events.RecomputeDecided;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.Tick;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferFailed;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.events.TransferStarted;
import io.orbitkv.pd.schemas.EngineRegistrations;
import io.orbitkv.pd.schemas.EventText;
import io.orbitkv.pd.schemas.OrderTokens;
import io.orbitkv.pd.state.Admission;
import io.orbitkv.pd.state.DeciderState;
import io.orbitkv.pd.state.HeldPages;
import io.orbitkv.pd.state.HistoryEntry;
import io.orbitkv.pd.state.Phase;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;
import org.apache.avro.specific.SpecificRecord;

/**
 * The per-request state machine of the decider: a pure function from (state, fact or timer, stream time) to
 * (new state, decisions, rejection). No clock, no I/O, no randomness: replaying the same facts at the same
 * stream times yields the same decisions, which is what makes the log replayable.
 *
 * <p>States are {@link Phase}; the terminal ones are COMPLETED, CANCELLED, TIMED_OUT and FAILED. Invariants:
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
    private final OrderTokens tokens;

    public RequestStateMachine(DeciderPolicy policy) {
        this.policy = policy;
        this.tokens = new OrderTokens(policy.authKey());
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

    // ------------------------------------------------------------------------------------------------ facts

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
        String invalid = validate(p);
        if (invalid != null) {
            // A malformed fact changes nothing; a request first seen through it is not created.
            return new Step(fresh ? null : state, List.of(),
                    new Rejection(invalid.startsWith("oversized") ? "OVERSIZED" : "OUT_OF_BOUNDS", invalid));
        }
        Ctx c = new Ctx(state, event, now);
        remember(state, event.getEventId());
        c.history("in", EventText.typeOf(p), event.getEventId());
        switch (p) {
            case RequestAdmitted a -> onAdmitted(c, a);
            case PrefillCompleted pc -> onPrefillCompleted(c, pc);
            case PrefillFailed pf -> onPrefillFailed(c, pf);
            case DecodeReady dr -> onDecodeReady(c, dr);
            case DecodeRejected rj -> onDecodeRejected(c, rj);
            case LeaseHeartbeat hb -> onHeartbeat(c, hb);
            case TransferStarted ts -> onTransferStarted(c, ts);
            case TransferCompleted tc -> onTransferCompleted(c, tc);
            case TransferFailed tf -> onTransferFailed(c, tf);
            case DecodeCompleted dc -> onDecodeCompleted(c, dc);
            case CancelRequested cr -> onCancel(c, cr);
            case EngineEpochChanged ec -> onEngineEpochChanged(c, ec);
            default -> c.illegal("UNSUPPORTED", "payload type " + EventText.typeOf(p) + " is not handled by this decider version");
        }
        return c.finish();
    }

    private void onAdmitted(Ctx c, RequestAdmitted a) {
        DeciderState s = c.s;
        if (s.getAdmission() != null) {
            c.illegal("ILLEGAL_TRANSITION", "request already admitted");
            return;
        }
        s.setAdmission(Admission.newBuilder().setPrefillEngineId(a.getPrefillEngineId()).setDecodeEngineId(a.getDecodeEngineId())
                .setFailurePolicy(a.getFailurePolicy()).setDeadlineMs(a.getDeadlineMs()).setPromptTokens(a.getPromptTokens()).build());
        s.getTimings().setAdmittedMs(c.now);
        if (s.getPhase() != Phase.AWAITING_ADMISSION) {
            // Closed before admission (never admitted, or a cancel): it already has its one outcome (older states may not).
            if (s.getOutcome() == null) {
                finishWith(c, OutcomeKind.FAILED, "admitted after " + s.getOutcomeReason());
            }
            return;
        }
        // Facts that came early are checked against the engines the proxy picked.
        if (s.getSource() != null && !s.getSource().getEngineId().equals(a.getPrefillEngineId())) {
            c.rejectNote("PrefillCompleted", "prefill ran on " + s.getSource().getEngineId() + " but the request was admitted for "
                    + a.getPrefillEngineId());
            c.release(s.getSource(), ReleaseSide.PREFILL, "prefill ran on an engine the request was not admitted for");
            s.setSource(null);
        }
        if (s.getDest() != null && !s.getDest().getEngineId().equals(a.getDecodeEngineId())) {
            c.rejectNote("DecodeReady", "decode pages held on " + s.getDest().getEngineId() + " but the request was admitted for "
                    + a.getDecodeEngineId());
            c.release(s.getDest(), ReleaseSide.DECODE, "decode pages on an engine the request was not admitted for");
            s.setDest(null);
        }
        s.setPhase(Phase.ADMITTED);
        if (s.getCancelRequested() != null) {
            cancel(c, s.getCancelRequested());
            return;
        }
        if (s.getDecodeRejected() != null) {
            fail(c, OutcomeKind.FAILED, "decode engine rejected the request: " + s.getDecodeRejected());
            return;
        }
        if (s.getPrefillFailed() != null) {
            prefillLost(c, "prefill failed: " + s.getPrefillFailed());
            return;
        }
        advance(c);
    }

    private void onPrefillCompleted(Ctx c, PrefillCompleted pc) {
        DeciderState s = c.s;
        HeldPages held = HeldPages.newBuilder().setEngineId(pc.getEngineId()).setInstanceEpoch(pc.getInstanceEpoch())
                .setBlocks(pc.getSourceBlocks()).setLayout(pc.getLayout()).setReleased(false).build();
        if (isTerminal(s.getPhase())) {
            if (samePages(s.getSource(), held)) {
                return; // a duplicate of the fact already recorded; those pages are (or will be) released with the request
            }
            if (s.getSource() == null && s.getAttempt() > 0 && s.getAdmission() != null
                    && s.getAdmission().getPrefillEngineId().equals(pc.getEngineId())) {
                // An order went out ahead of these pages: its worker may be reading them (it heard the engine first), so
                // they are released like any source, once the attempt has drained.
                s.setSource(held);
                c.release(held, ReleaseSide.PREFILL, "request already " + s.getPhase() + ": prefill pages not needed");
                return;
            }
            // No order was or will be issued against these pages: free them at once, drain or not.
            c.releaseNow(held, ReleaseSide.PREFILL, "request already " + s.getPhase() + ": prefill pages not needed", null, null);
            return;
        }
        if (s.getSource() != null || s.getPrefillFailed() != null || s.getPhase() == Phase.RECOMPUTING) {
            c.illegal("ILLEGAL_TRANSITION", "a prefill result for this request was already reported");
            return;
        }
        if (s.getAdmission() != null && !s.getAdmission().getPrefillEngineId().equals(pc.getEngineId())) {
            c.illegal("ILLEGAL_TRANSITION", "prefill ran on " + pc.getEngineId() + " but the request was admitted for "
                    + s.getAdmission().getPrefillEngineId());
            c.release(held, ReleaseSide.PREFILL, "prefill ran on an engine the request was not admitted for");
            return;
        }
        s.setSource(held);
        s.setFirstToken(pc.getFirstToken());
        s.getTimings().setPrefillCompletedMs(c.now);
        switch (s.getPhase()) {
            case AWAITING_ADMISSION, RETRY_WAIT -> { } // the order that follows carries the pages
            case TRANSFERRING -> confirmAhead(c); // an order went out ahead of this fact
            case KV_READY -> c.release(s.getSource(), ReleaseSide.PREFILL, "kv delivered to " + s.getDest().getEngineId());
            default -> advance(c);
        }
    }

    /**
     * The prefill finished while an order issued ahead of it ({@code await_prefill}) is open: check the pages fit, and
     * send the order again with them, for a worker that did not hear the engine's fact itself. Same order id and attempt,
     * so a worker that already pushes ignores it; the transfer's deadline counts from now.
     */
    private void confirmAhead(Ctx c) {
        DeciderState s = c.s;
        String mismatch = pairMismatch(s);
        if (mismatch != null) {
            c.abort("incompatible KV: " + mismatch);
            prefillUnusable(c, "incompatible KV: " + mismatch);
            return;
        }
        s.setOrderDeadlineMs(transferDeadline(s, c.now));
        emitOrder(c, s.getAttempt());
    }

    private void onPrefillFailed(Ctx c, PrefillFailed pf) {
        DeciderState s = c.s;
        if (isTerminal(s.getPhase())) {
            return; // late news of a request that already ended
        }
        if (s.getSource() != null || s.getPrefillFailed() != null || s.getPhase() == Phase.RECOMPUTING) {
            c.illegal("ILLEGAL_TRANSITION", "a prefill result for this request was already reported");
            return;
        }
        s.setPrefillFailed(pf.getReason());
        if (s.getPhase() != Phase.AWAITING_ADMISSION) {
            prefillLost(c, "prefill failed: " + pf.getReason());
        }
    }

    private void onDecodeReady(Ctx c, DecodeReady dr) {
        DeciderState s = c.s;
        HeldPages held = HeldPages.newBuilder().setEngineId(dr.getEngineId()).setInstanceEpoch(dr.getInstanceEpoch())
                .setBlocks(dr.getDestBlocks()).setLayout(dr.getLayout()).setReleased(false).build();
        if (isTerminal(s.getPhase())) {
            if (samePages(s.getDest(), held)) {
                return; // a duplicate of the fact already recorded; released with the request
            }
            // No order was or will be issued against this lease, so no push can land: free at once.
            c.releaseLease(held, dr.getLeaseId(), dr.getLeaseEpoch(), "request already " + s.getPhase() + ": decode pages not needed");
            return;
        }
        if (s.getDest() != null || s.getDecodeRejected() != null) {
            c.illegal("ILLEGAL_TRANSITION", "decode pages for this request were already reported");
            return;
        }
        if (s.getAdmission() != null && !s.getAdmission().getDecodeEngineId().equals(dr.getEngineId())) {
            c.illegal("ILLEGAL_TRANSITION", "decode pages held on " + dr.getEngineId() + " but the request was admitted for "
                    + s.getAdmission().getDecodeEngineId());
            c.releaseLease(held, dr.getLeaseId(), dr.getLeaseEpoch(), "decode pages on an engine the request was not admitted for");
            return;
        }
        s.setDest(held);
        s.setLeaseId(dr.getLeaseId());
        s.setLeaseEpoch(dr.getLeaseEpoch());
        s.setLeaseDeadlineMs(leaseEnd(dr.getLeaseDeadlineMs(), c.now));
        s.getTimings().setDecodeReadyMs(c.now);
        if (s.getPhase() == Phase.AWAITING_ADMISSION) {
            return;
        }
        if (s.getPrefillFailed() != null) {
            prefillLost(c, "prefill failed: " + s.getPrefillFailed());
            return;
        }
        advance(c);
    }

    private void onDecodeRejected(Ctx c, DecodeRejected rj) {
        DeciderState s = c.s;
        if (isTerminal(s.getPhase())) {
            return;
        }
        if (s.getDest() != null || s.getDecodeRejected() != null) {
            c.illegal("ILLEGAL_TRANSITION", "the decode engine already reported on this request");
            return;
        }
        s.setDecodeRejected(rj.getReason());
        if (s.getPhase() != Phase.AWAITING_ADMISSION) {
            // Releases the prefill pages at once: there is nobody to push them to.
            fail(c, OutcomeKind.FAILED, "decode engine rejected the request: " + rj.getReason());
        }
    }

    private void onHeartbeat(Ctx c, LeaseHeartbeat hb) {
        DeciderState s = c.s;
        if (s.getDest() == null || !Objects.equals(s.getLeaseId(), hb.getLeaseId()) || s.getLeaseEpoch() != hb.getLeaseEpoch()
                || !s.getDest().getEngineId().equals(hb.getEngineId())) {
            c.illegal("STALE_LEASE", "heartbeat for lease " + hb.getLeaseId() + "@" + hb.getLeaseEpoch() + " from " + hb.getEngineId()
                    + " but the request holds " + (s.getDest() == null ? "no lease" : s.getLeaseId() + "@" + s.getLeaseEpoch()));
            return;
        }
        if (isTerminal(s.getPhase()) || s.getDest().getReleased()) {
            return; // the lease is over; the engine learns it from the release
        }
        s.setLeaseDeadlineMs(Math.max(s.getLeaseDeadlineMs(), leaseEnd(hb.getExtendToMs(), c.now)));
    }

    private void onTransferStarted(Ctx c, TransferStarted ts) {
        if (!knownOrder(c, ts.getOrderId(), ts.getAttempt())) {
            c.illegal("ILLEGAL_TRANSITION", "transfer " + ts.getOrderId() + " attempt " + ts.getAttempt() + " was never ordered");
        }
    }

    private void onTransferCompleted(Ctx c, TransferCompleted tc) {
        DeciderState s = c.s;
        if (!knownOrder(c, tc.getOrderId(), tc.getAttempt())) {
            c.illegal("ILLEGAL_TRANSITION", "transfer " + tc.getOrderId() + " attempt " + tc.getAttempt() + " was never ordered");
            return;
        }
        boolean current = tc.getAttempt() == s.getAttempt();
        if (current) {
            s.setAttemptOpen(false);
        }
        if (isTerminal(s.getPhase())) {
            return; // settles a drained attempt; finish() releases what waited for it
        }
        if (s.getPhase() == Phase.TRANSFERRING || s.getPhase() == Phase.RETRY_WAIT) {
            if (!current && s.getAttemptOpen()) {
                // An earlier attempt finished after all: the bytes are in place (every attempt pushes the same
                // bytes), so stop the newer one. Its pages stay held until it settles.
                c.abort("an earlier attempt completed");
            }
            s.setKvBytes(tc.getBytes());
            s.getTimings().setTransferCompletedMs(c.now);
            s.setPhase(Phase.KV_READY);
            c.emit(KvReady.newBuilder().setDecodeEngineId(s.getDest().getEngineId()).setOrderId(tc.getOrderId())
                    .setBytes(tc.getBytes()).setFirstToken(s.getFirstToken()).build(), s.getDest().getEngineId());
            c.release(s.getSource(), ReleaseSide.PREFILL, "kv delivered to " + s.getDest().getEngineId());
            if (s.getDecodeCompletedEarly()) {
                finishWith(c, OutcomeKind.COMPLETED, "decode finished");
            }
        }
        // KV_READY / RECOMPUTING: a duplicate completion of an attempt already settled; nothing to do.
    }

    private void onTransferFailed(Ctx c, TransferFailed tf) {
        DeciderState s = c.s;
        if (!knownOrder(c, tf.getOrderId(), tf.getAttempt())) {
            c.illegal("ILLEGAL_TRANSITION", "transfer " + tf.getOrderId() + " attempt " + tf.getAttempt() + " was never ordered");
            return;
        }
        if (tf.getAttempt() != s.getAttempt() || !s.getAttemptOpen()) {
            return; // an attempt already settled or superseded
        }
        s.setAttemptOpen(false);
        if (s.getPhase() == Phase.TRANSFERRING) {
            attemptFailed(c, tf.getReason(), tf.getRetriable());
        }
    }

    private void onDecodeCompleted(Ctx c, DecodeCompleted dc) {
        DeciderState s = c.s;
        if (isTerminal(s.getPhase())) {
            return;
        }
        if (s.getPhase() == Phase.TRANSFERRING || s.getPhase() == Phase.RETRY_WAIT) {
            // The receiving worker handed the engine its KV the moment the bytes landed, and the engine's report overtook
            // the transfer's (two writers, one partition): the request completes once the transfer's report is in.
            s.setDecodeCompletedEarly(true);
            return;
        }
        if (s.getPhase() != Phase.KV_READY && s.getPhase() != Phase.RECOMPUTING) {
            c.illegal("ILLEGAL_TRANSITION", "decode completed before its KV was ready (phase " + s.getPhase() + ")");
            return;
        }
        finishWith(c, OutcomeKind.COMPLETED, s.getPhase() == Phase.RECOMPUTING ? "decode finished (prefill recomputed)" : "decode finished");
    }

    private void onCancel(Ctx c, CancelRequested cr) {
        DeciderState s = c.s;
        if (isTerminal(s.getPhase())) {
            c.rejectNote("CancelRequested", "request already " + s.getPhase());
            return;
        }
        if (s.getPhase() == Phase.AWAITING_ADMISSION) {
            s.setCancelRequested(cr.getReason());
            return;
        }
        cancel(c, cr.getReason() + " (by " + cr.getRequestedBy() + ")");
    }

    private void onEngineEpochChanged(Ctx c, EngineEpochChanged ec) {
        DeciderState s = c.s;
        String why = ec.getDeregistered() ? "engine " + ec.getEngineId() + " left" : "engine " + ec.getEngineId() + " restarted (epoch "
                + ec.getInstanceEpoch() + ")";
        boolean sourceLost = affected(s.getSource(), ec);
        boolean destLost = affected(s.getDest(), ec);
        if (!sourceLost && !destLost) {
            return;
        }
        // The engine's memory is gone: its pages are released now (for the books; the engine has nothing to free),
        // without waiting for an in-flight attempt, which cannot succeed any more.
        if (sourceLost) {
            c.releaseNow(s.getSource(), ReleaseSide.PREFILL, why, null, null);
        }
        if (destLost) {
            c.releaseNow(s.getDest(), ReleaseSide.DECODE, why, s.getLeaseId(), s.getLeaseEpoch());
        }
        if (isTerminal(s.getPhase())) {
            return;
        }
        if (s.getPhase() == Phase.AWAITING_ADMISSION) {
            // Decided at admission, like an early PrefillFailed / decode rejection.
            if (sourceLost && s.getPrefillFailed() == null) {
                s.setPrefillFailed(why);
            }
            if (destLost && s.getDecodeRejected() == null) {
                s.setDecodeRejected(why);
            }
            return;
        }
        if (destLost) {
            fail(c, OutcomeKind.FAILED, why + ": lease " + s.getLeaseId() + "@" + s.getLeaseEpoch() + " is void");
        } else if (s.getPhase() != Phase.KV_READY && s.getPhase() != Phase.RECOMPUTING) {
            // Under RECOMPUTE the request lives on (decode re-runs the prefill), so the attempt is stopped here;
            // under FAIL prefillLost ends it through fail(), which aborts.
            if (s.getAttemptOpen() && s.getAdmission().getFailurePolicy() == FailurePolicy.RECOMPUTE) {
                c.abort(why);
            }
            prefillLost(c, why + " before its KV was delivered");
        }
    }

    private static boolean samePages(HeldPages recorded, HeldPages reported) {
        return recorded != null && recorded.getEngineId().equals(reported.getEngineId())
                && recorded.getInstanceEpoch() == reported.getInstanceEpoch() && recorded.getBlocks().equals(reported.getBlocks());
    }

    // ------------------------------------------------------------------------------------------------ timers

    /** The earliest stream time at which {@link #onTimer} would change this state, or 0 for none. */
    public long nextDeadline(DeciderState s) {
        long next = Long.MAX_VALUE;
        Phase p = s.getPhase();
        if (releasesPending(s)) {
            next = Math.min(next, s.getAttemptOpen() ? s.getOrderDeadlineMs() + policy.drainGrace().toMillis() : s.getDrainUntilMs());
        }
        if (isTerminal(p)) {
            return releasesPending(s) || holdsPages(s) ? next : s.getFinishedMs() + policy.retention().toMillis();
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

    /** Fires whatever timers are due at stream time {@code now}. */
    public Step onTimer(DeciderState s, long now) {
        Ctx c = new Ctx(s, null, now);
        Phase p = s.getPhase();
        if (releasesPending(s) && s.getAttemptOpen() && now >= s.getOrderDeadlineMs() + policy.drainGrace().toMillis()) {
            // The attempt never reported; past its deadline plus the drain window the receiver refuses its pushes.
            s.setAttemptOpen(false);
            c.history("timer", "DrainElapsed", "no report from attempt " + s.getAttempt() + "; its pushes are fenced now");
        }
        if (isTerminal(p)) {
            if (!releasesPending(s) && !holdsPages(s) && now >= s.getFinishedMs() + policy.retention().toMillis()) {
                return new Step(null, List.of(), null);
            }
            return c.finish();
        }
        if (p == Phase.AWAITING_ADMISSION) {
            if (now >= s.getFirstSeenMs() + policy.admissionGrace().toMillis()) {
                c.history("timer", "AdmissionGraceElapsed", "no RequestAdmitted");
                c.emit(InputRejected.newBuilder().setEventId(s.getRequestId()).setEventType("RequestAdmitted").setState(p.name())
                        .setReason("facts arrived but the request was never admitted within " + policy.admissionGrace().toMillis()
                                + " ms; releasing their pages").build(), List.of());
                // Every request the log knows of ends in exactly one outcome, this one too (an engine reported on it,
                // then the proxy that called the engine died before its RequestAdmitted was written).
                finishWith(c, OutcomeKind.FAILED, "never admitted: facts arrived but no RequestAdmitted within "
                        + policy.admissionGrace().toMillis() + " ms");
            }
            return c.finish();
        }
        Admission a = s.getAdmission();
        long admitted = s.getTimings().getAdmittedMs();
        if (a.getDeadlineMs() != null && now >= a.getDeadlineMs()) {
            c.history("timer", "RequestDeadline", "deadline " + a.getDeadlineMs());
            fail(c, OutcomeKind.TIMED_OUT, "request deadline passed");
        } else if (s.getSource() == null && p != Phase.RECOMPUTING && now >= admitted + policy.prefillTimeout().toMillis()) {
            c.history("timer", "PrefillTimeout", "no prefill result after " + policy.prefillTimeout().toMillis() + " ms");
            if (s.getDest() != null && a.getFailurePolicy() == FailurePolicy.RECOMPUTE) {
                prefillLost(c, "prefill timed out");
            } else {
                fail(c, OutcomeKind.TIMED_OUT, "prefill timed out after " + policy.prefillTimeout().toMillis() + " ms");
            }
        } else if (s.getDest() == null && now >= admitted + policy.decodeReadyTimeout().toMillis()) {
            c.history("timer", "DecodeReadyTimeout", "no decode-ready after " + policy.decodeReadyTimeout().toMillis() + " ms");
            fail(c, OutcomeKind.TIMED_OUT, "decode engine not ready after " + policy.decodeReadyTimeout().toMillis() + " ms");
        } else if (s.getDest() != null && !s.getDest().getReleased() && now >= s.getLeaseDeadlineMs()) {
            c.history("timer", "LeaseExpired", "lease " + s.getLeaseId() + "@" + s.getLeaseEpoch());
            fail(c, OutcomeKind.TIMED_OUT, "lease " + s.getLeaseId() + "@" + s.getLeaseEpoch() + " expired without a heartbeat");
        } else if (p == Phase.TRANSFERRING && now >= s.getOrderDeadlineMs()) {
            c.history("timer", "TransferTimeout", "attempt " + s.getAttempt());
            c.abort("transfer attempt " + s.getAttempt() + " timed out");
            // Stop tracking the attempt; it may still push (the same bytes) until the drain window ends, and no
            // page is released before that.
            s.setAttemptOpen(false);
            s.setDrainUntilMs(Math.max(s.getDrainUntilMs(), now + policy.drainGrace().toMillis()));
            attemptFailed(c, "transfer attempt " + s.getAttempt() + " timed out", true);
        } else if (p == Phase.RETRY_WAIT && now >= s.getRetryAtMs()) {
            c.history("timer", "RetryBackoffElapsed", "attempt " + (s.getAttempt() + 1));
            issueOrder(c);
        }
        return c.finish();
    }

    // ------------------------------------------------------------------------------------------------ moves

    /** After a fact: order when both sides are in, else wait in the phase the facts say. */
    private void advance(Ctx c) {
        DeciderState s = c.s;
        Phase p = s.getPhase();
        if (p != Phase.ADMITTED && p != Phase.PREFILL_DONE && p != Phase.DECODE_READY) {
            return;
        }
        if (s.getSource() != null && s.getDest() != null) {
            String mismatch = pairMismatch(s);
            if (mismatch != null) {
                prefillUnusable(c, "incompatible KV: " + mismatch);
                return;
            }
            issueOrder(c);
        } else if (s.getSource() != null) {
            s.setPhase(Phase.PREFILL_DONE);
        } else if (s.getDest() != null) {
            if (policy.orderAhead()) {
                issueOrder(c); // ahead of the prefill: its worker pushes the moment the engine reports
            } else {
                s.setPhase(Phase.DECODE_READY);
            }
        } else {
            s.setPhase(Phase.ADMITTED);
        }
    }

    /** Null when the reported source pages can be copied page for page into the destination pages; else why not. */
    private static String pairMismatch(DeciderState s) {
        String mismatch = layoutMismatch(s.getSource().getLayout(), s.getDest().getLayout());
        if (mismatch == null && blocks(s.getSource().getBlocks()) != blocks(s.getDest().getBlocks())) {
            mismatch = "source holds " + blocks(s.getSource().getBlocks()) + " blocks, destination " + blocks(s.getDest().getBlocks());
        }
        return mismatch;
    }

    private long transferDeadline(DeciderState s, long now) {
        return Math.min(now + policy.transferTimeout().toMillis(), Math.max(now + 1, s.getLeaseDeadlineMs()));
    }

    /**
     * The next attempt. Without the prefill's pages yet (order-ahead) it waits for them: its deadline covers the
     * prefill's time as well (the prefill timeout, which fires first, ends a prefill that never comes).
     */
    private void issueOrder(Ctx c) {
        DeciderState s = c.s;
        int attempt = s.getAttempt() + 1;
        long deadline = s.getSource() != null ? transferDeadline(s, c.now)
                : Math.max(c.now, s.getTimings().getAdmittedMs() + policy.prefillTimeout().toMillis()) + policy.transferTimeout().toMillis();
        s.setAttempt(attempt);
        s.setAttemptOpen(true);
        s.setOrderDeadlineMs(deadline);
        s.setPhase(Phase.TRANSFERRING);
        if (s.getTimings().getOrderIssuedMs() == null) {
            s.getTimings().setOrderIssuedMs(c.now);
        }
        emitOrder(c, attempt);
    }

    /** The order of {@code attempt}, to the source engine's worker: with the source pages once reported, else ahead of them. */
    private void emitOrder(Ctx c, int attempt) {
        DeciderState s = c.s;
        String orderId = s.getRequestId() + "/a" + attempt;
        byte[] token = tokens.sign(orderId, s.getLeaseEpoch(), s.getDest().getEngineId(), s.getDest().getInstanceEpoch(), s.getDest().getBlocks());
        HeldPages src = s.getSource();
        String sourceEngine = sourceEngine(s);
        c.emit(TransferOrder.newBuilder().setOrderId(orderId).setAttempt(attempt)
                .setSourceEngineId(sourceEngine).setSourceInstanceEpoch(src == null ? -1 : src.getInstanceEpoch())
                .setDestEngineId(s.getDest().getEngineId()).setDestInstanceEpoch(s.getDest().getInstanceEpoch())
                .setSourceBlocks(src == null ? List.of() : src.getBlocks()).setDestBlocks(s.getDest().getBlocks())
                .setLayout(src == null ? s.getDest().getLayout() : src.getLayout())
                .setLeaseId(s.getLeaseId()).setLeaseEpoch(s.getLeaseEpoch()).setAuthToken(ByteBuffer.wrap(token))
                .setDeadlineMs(s.getOrderDeadlineMs()).setTransport("auto").setAwaitPrefill(src == null).setFirstToken(s.getFirstToken()).build(),
                sourceEngine);
    }

    /** The engine the request's KV comes from: the one that reported it, else the one it was admitted for. */
    private static String sourceEngine(DeciderState s) {
        return s.getSource() != null ? s.getSource().getEngineId() : s.getAdmission().getPrefillEngineId();
    }

    private void attemptFailed(Ctx c, String reason, boolean retriable) {
        DeciderState s = c.s;
        if (retriable && s.getAttempt() < policy.maxAttempts()) {
            s.setPhase(Phase.RETRY_WAIT);
            s.setRetryAtMs(Math.max(s.getRetryAtMs(), c.now + policy.backoffMs(s.getAttempt() + 1)));
            return;
        }
        prefillUnusable(c, (retriable ? "transfer failed " + s.getAttempt() + " times, last: " : "transfer failed: ") + reason);
    }

    /** The prefill's KV cannot reach the decode engine: recompute on decode if allowed, else fail. */
    private void prefillUnusable(Ctx c, String reason) {
        DeciderState s = c.s;
        if (s.getAdmission().getFailurePolicy() == FailurePolicy.RECOMPUTE && s.getDest() != null && !s.getDest().getReleased()) {
            c.release(s.getSource(), ReleaseSide.PREFILL, reason + "; decode recomputes");
            recompute(c, reason);
        } else {
            fail(c, OutcomeKind.FAILED, reason);
        }
    }

    /** No prefill KV exists (failed, timed out, engine lost it). */
    private void prefillLost(Ctx c, String reason) {
        DeciderState s = c.s;
        if (s.getAttemptOpen()) {
            c.abort(reason); // an order issued ahead of the prefill: nothing will come to push
        }
        if (s.getAdmission().getFailurePolicy() == FailurePolicy.RECOMPUTE) {
            if (s.getDest() != null && !s.getDest().getReleased()) {
                c.release(s.getSource(), ReleaseSide.PREFILL, reason);
                recompute(c, reason);
                return;
            }
            if (s.getDest() == null && s.getDecodeRejected() == null) {
                s.setPhase(Phase.ADMITTED); // wait for decode-ready, then recompute there
                s.setPrefillFailed(reason);
                return;
            }
        }
        fail(c, OutcomeKind.FAILED, reason);
    }

    private void recompute(Ctx c, String reason) {
        DeciderState s = c.s;
        s.setPhase(Phase.RECOMPUTING);
        c.emit(RecomputeDecided.newBuilder().setDecodeEngineId(s.getDest().getEngineId()).setReason(reason).build(),
                s.getDest().getEngineId());
    }

    private void cancel(Ctx c, String reason) {
        fail(c, OutcomeKind.CANCELLED, reason);
    }

    /** Ends the request with a non-success outcome: stop any attempt, release both sides (after the drain). */
    private void fail(Ctx c, OutcomeKind kind, String reason) {
        DeciderState s = c.s;
        if (s.getAttemptOpen()) {
            c.abort(reason);
        }
        finishWith(c, kind, reason);
    }

    private void finishWith(Ctx c, OutcomeKind kind, String reason) {
        DeciderState s = c.s;
        s.setPhase(switch (kind) {
            case COMPLETED -> Phase.COMPLETED;
            case CANCELLED -> Phase.CANCELLED;
            case TIMED_OUT -> Phase.TIMED_OUT;
            default -> Phase.FAILED;
        });
        s.setOutcome(kind);
        s.setOutcomeReason(reason);
        s.setFinishedMs(c.now);
        s.getTimings().setFinishedMs(c.now);
        c.release(s.getSource(), ReleaseSide.PREFILL, reason);
        c.release(s.getDest(), ReleaseSide.DECODE, reason);
        Set<String> engines = new LinkedHashSet<>();
        if (s.getAdmission() != null) {
            engines.add(s.getAdmission().getPrefillEngineId());
            engines.add(s.getAdmission().getDecodeEngineId());
        }
        c.emit(RequestOutcome.newBuilder().setKind(kind).setReason(reason).setAttempts(s.getAttempt())
                .setPrefillEngineId(s.getAdmission() == null ? null : s.getAdmission().getPrefillEngineId())
                .setDecodeEngineId(s.getAdmission() == null ? null : s.getAdmission().getDecodeEngineId())
                .setKvBytes(s.getKvBytes()).setTimings(PhaseTimings.newBuilder(s.getTimings()).build()).build(), List.copyOf(engines));
    }

    // ------------------------------------------------------------------------------------------------ helpers

    private boolean knownOrder(Ctx c, String orderId, int attempt) {
        DeciderState s = c.s;
        return attempt >= 1 && attempt <= s.getAttempt() && orderId.equals(s.getRequestId() + "/a" + attempt);
    }

    private static boolean affected(HeldPages held, EngineEpochChanged ec) {
        return held != null && !held.getReleased() && held.getEngineId().equals(ec.getEngineId())
                && (ec.getDeregistered() || held.getInstanceEpoch() < ec.getInstanceEpoch());
    }

    /** A release was decided but waits for pushes to drain. */
    private static boolean releasesPending(DeciderState s) {
        return pending(s.getSource()) || pending(s.getDest());
    }

    private static boolean pending(HeldPages h) {
        return h != null && !h.getReleased() && h.getPendingReason() != null;
    }

    /** Pages still held and not yet even decided for release (only possible outside terminal phases). */
    private static boolean holdsPages(DeciderState s) {
        return (s.getSource() != null && !s.getSource().getReleased() && s.getSource().getPendingReason() == null)
                || (s.getDest() != null && !s.getDest().getReleased() && s.getDest().getPendingReason() == null);
    }

    private long leaseEnd(long requested, long now) {
        long max = now + policy.leaseDuration().toMillis();
        return requested > now ? Math.min(requested, max) : max;
    }

    static long blocks(List<BlockRun> runs) {
        long n = 0;
        for (BlockRun r : runs) {
            n += r.getCount();
        }
        return n;
    }

    /** Null when pages of {@code src} can be copied page for page into pages of {@code dst}; else why not. */
    public static String layoutMismatch(KvLayout src, KvLayout dst) {
        List<String> diffs = new ArrayList<>();
        diff(diffs, "num_layers", src.getNumLayers(), dst.getNumLayers());
        diff(diffs, "dtype", src.getDtype(), dst.getDtype());
        diff(diffs, "num_kv_heads", src.getNumKvHeads(), dst.getNumKvHeads());
        diff(diffs, "head_dim", src.getHeadDim(), dst.getHeadDim());
        diff(diffs, "block_size_tokens", src.getBlockSizeTokens(), dst.getBlockSizeTokens());
        diff(diffs, "kv_split", src.getKvSplit(), dst.getKvSplit());
        diff(diffs, "tp_size", src.getTpSize(), dst.getTpSize());
        diff(diffs, "page_bytes", src.getPageBytes(), dst.getPageBytes());
        return diffs.isEmpty() ? null : String.join(", ", diffs);
    }

    private static void diff(List<String> out, String field, Object a, Object b) {
        if (!Objects.equals(a, b)) {
            out.add(field + " " + a + " (prefill) vs " + b + " (decode)");
        }
    }

    /** Null when the fact is well-formed; else the reason it goes to the dead-letter topic. */
    String validate(Object p) {
        return switch (p) {
            case RequestAdmitted a -> a.getPrefillEngineId().isEmpty() || a.getDecodeEngineId().isEmpty()
                    ? "RequestAdmitted: prefill_engine_id and decode_engine_id must be set"
                    : a.getPromptTokens() < 0 || a.getMaxTokens() < 0 ? "RequestAdmitted: negative token counts" : null;
            case PrefillCompleted pc -> pages("PrefillCompleted.source_blocks", pc.getSourceBlocks(), pc.getLayout());
            case DecodeReady dr -> pages("DecodeReady.dest_blocks", dr.getDestBlocks(), dr.getLayout());
            default -> null;
        };
    }

    private String pages(String field, List<BlockRun> runs, KvLayout layout) {
        if (layout == null) {
            return field.substring(0, field.indexOf('.')) + ".layout: required by the decider, missing";
        }
        String bad = EngineRegistrations.layoutProblem(layout);
        if (bad != null) {
            return field.substring(0, field.indexOf('.')) + ".layout: " + bad;
        }
        if (runs.isEmpty()) {
            return field + ": no blocks";
        }
        if (runs.size() > policy.maxRuns()) {
            return "oversized " + field + ": " + runs.size() + " runs, more than decider.max-runs=" + policy.maxRuns();
        }
        long total = 0;
        for (BlockRun r : runs) {
            if (r.getStart() < 0 || r.getCount() < 1 || (long) r.getStart() + r.getCount() > layout.getNumBlocks()) {
                return field + ": run " + r.getStart() + "+" + r.getCount() + " outside the pool of " + layout.getNumBlocks() + " blocks";
            }
            total += r.getCount();
        }
        if (total > layout.getNumBlocks()) {
            return "oversized " + field + ": " + total + " blocks in a pool of " + layout.getNumBlocks();
        }
        List<BlockRun> sorted = new ArrayList<>(runs);
        sorted.sort(Comparator.comparingInt(BlockRun::getStart));
        for (int i = 1; i < sorted.size(); i++) {
            BlockRun prev = sorted.get(i - 1);
            if (prev.getStart() + prev.getCount() > sorted.get(i).getStart()) {
                return field + ": runs " + prev.getStart() + "+" + prev.getCount() + " and " + sorted.get(i).getStart() + "+"
                        + sorted.get(i).getCount() + " overlap";
            }
        }
        return null;
    }


    private DeciderState newState(String requestId, long now) {
        return DeciderState.newBuilder().setRequestId(requestId).setPhase(Phase.AWAITING_ADMISSION).setFirstSeenMs(now)
                .setTimings(PhaseTimings.newBuilder().build()).setSeenEventIds(new ArrayList<>()).setHistory(new ArrayList<>()).build();
    }

    private static final int SEEN_IDS = 16;

    /** A short, cheap summary for the state's history (the full decision is in the log). */
    private static String brief(SpecificRecord payload) {
        return switch (payload) {
            case TransferOrder o -> o.getOrderId() + " lease epoch " + o.getLeaseEpoch();
            case AbortTransfer a -> a.getOrderId() + ": " + a.getReason();
            case ReleaseDecided r -> r.getSide() + " on " + r.getEngineId() + ": " + r.getReason();
            case KvReady k -> k.getOrderId();
            case RecomputeDecided r -> r.getReason();
            case RequestOutcome o -> o.getKind() + ": " + o.getReason();
            case InputRejected r -> r.getEventType() + ": " + r.getReason();
            default -> "";
        };
    }

    private static void remember(DeciderState s, String eventId) {
        List<String> seen = s.getSeenEventIds();
        if (seen.size() >= SEEN_IDS) {
            seen.remove(0);
        }
        seen.add(eventId);
    }

    /** The mutable context of one step: the state, what is emitted, and the dead-letter verdict. */
    private final class Ctx {
        final DeciderState s;
        final RequestEvent event;
        final long now;
        final List<Emit> emits = new ArrayList<>();
        Rejection rejection;
        boolean aborted;

        Ctx(DeciderState s, RequestEvent event, long now) {
            this.s = s;
            this.event = event;
            this.now = now;
        }

        void emit(SpecificRecord payload, String engine) {
            emit(payload, List.of(engine));
        }

        void emit(SpecificRecord payload, List<String> engines) {
            emits.add(new Emit(payload, engines));
            history("out", EventText.typeOf(payload), brief(payload));
        }

        /** An input that cannot apply here: reported as a decision and dead-lettered. */
        void illegal(String type, String reason) {
            rejectNote(event == null ? "timer" : EventText.typeOf(event.getPayload()), reason);
            rejection = new Rejection(type, reason);
        }

        /** An input that is late rather than wrong: reported as a decision only. */
        void rejectNote(String eventType, String reason) {
            emit(InputRejected.newBuilder().setEventId(event == null ? "" : event.getEventId()).setEventType(eventType)
                    .setState(s.getPhase().name()).setReason(reason).build(), List.of());
        }

        void abort(String reason) {
            if (aborted) {
                return; // one abort per attempt and step, whichever path asked first
            }
            aborted = true;
            String source = sourceEngine(s);
            emit(AbortTransfer.newBuilder().setOrderId(s.getRequestId() + "/a" + s.getAttempt()).setAttempt(s.getAttempt())
                    .setSourceEngineId(source).setDestEngineId(s.getDest().getEngineId()).setReason(reason).build(),
                    List.of(source, s.getDest().getEngineId()));
            // The attempt may be mid-push: it stays open until it reports, or until the drain window after now.
            s.setOrderDeadlineMs(Math.min(s.getOrderDeadlineMs(), now));
        }

        /** No push may still land in, or read from, a page. */
        boolean drained() {
            return !s.getAttemptOpen() && now >= s.getDrainUntilMs();
        }

        /** Releases now if no push can land, else marks the pages; {@link #finish} releases them once drained. */
        void release(HeldPages held, ReleaseSide side, String reason) {
            if (held == null || held.getReleased()) {
                return;
            }
            if (!drained()) {
                if (held.getPendingReason() == null) {
                    held.setPendingReason(reason);
                }
                return;
            }
            boolean lease = side == ReleaseSide.DECODE && held == s.getDest();
            releaseNow(held, side, reason, lease ? s.getLeaseId() : null, lease ? s.getLeaseEpoch() : null);
        }

        void releaseLease(HeldPages held, String leaseId, long leaseEpoch, String reason) {
            releaseNow(held, ReleaseSide.DECODE, reason, leaseId, leaseEpoch);
        }

        void releaseNow(HeldPages held, ReleaseSide side, String reason, String leaseId, Long leaseEpoch) {
            held.setReleased(true);
            held.setPendingReason(null);
            emit(ReleaseDecided.newBuilder().setEngineId(held.getEngineId()).setSide(side).setBlocks(held.getBlocks())
                    .setLeaseId(leaseId).setLeaseEpoch(leaseEpoch).setReason(reason).build(), held.getEngineId());
        }

        /** Carries out deferred releases once no push can land. */
        void flushReleases() {
            if (!drained()) {
                return;
            }
            if (pending(s.getSource())) {
                release(s.getSource(), ReleaseSide.PREFILL, s.getSource().getPendingReason());
            }
            if (pending(s.getDest())) {
                release(s.getDest(), ReleaseSide.DECODE, s.getDest().getPendingReason());
            }
        }

        void history(String direction, String type, String detail) {
            int limit = policy.historyLimit();
            if (limit == 0) {
                return;
            }
            List<HistoryEntry> h = s.getHistory();
            if (h.size() >= limit) {
                h.remove(0);
            }
            h.add(HistoryEntry.newBuilder().setStreamTimeMs(now).setDirection(direction).setType(type)
                    .setDetail(detail.length() > 300 ? detail.substring(0, 300) + "..." : detail).build());
        }

        Step finish() {
            flushReleases();
            return new Step(s, List.copyOf(emits), rejection);
        }
    }
}
