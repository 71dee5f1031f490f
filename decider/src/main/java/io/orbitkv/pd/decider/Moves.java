package io.orbitkv.pd.decider;

import io.orbitkv.pd.events.FailurePolicy;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.PhaseTimings;
import io.orbitkv.pd.events.RecomputeDecided;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.schemas.OrderTokens;
import io.orbitkv.pd.state.DeciderState;
import io.orbitkv.pd.state.HeldPages;
import io.orbitkv.pd.state.Phase;
import java.nio.ByteBuffer;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;

/**
 * The moves that several cells of the {@link RequestStateMachine}'s table end in: order (and re-order, retry), recompute,
 * fail, finish. Each works on one {@link StepContext}, changes the phase itself and emits what goes with it; which move
 * follows which input is the table's business ({@link Transitions}).
 */
final class Moves {

    private final DeciderPolicy policy;
    private final OrderTokens tokens;

    Moves(DeciderPolicy policy) {
        this.policy = policy;
        this.tokens = new OrderTokens(policy.authKey());
    }

    /** Before any order (ADMITTED, PREFILL_DONE, DECODE_READY): order when both sides are in, else wait in the phase the facts say. */
    void advance(StepContext c) {
        DeciderState s = c.s;
        if (s.getSource() != null && s.getDest() != null) {
            String mismatch = FactValidator.misfit(s);
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

    /**
     * The prefill finished while an order issued ahead of it ({@code await_prefill}) is open: check the pages fit, and
     * send the order again with them, for a worker that did not hear the engine's fact itself. Same order id and attempt,
     * so a worker that already pushes ignores it; the transfer's deadline counts from now.
     */
    void confirmAhead(StepContext c) {
        DeciderState s = c.s;
        String mismatch = FactValidator.misfit(s);
        if (mismatch != null) {
            c.abort("incompatible KV: " + mismatch);
            prefillUnusable(c, "incompatible KV: " + mismatch);
            return;
        }
        s.setOrderDeadlineMs(transferDeadline(s, c.now));
        emitOrder(c, s.getAttempt());
    }

    private long transferDeadline(DeciderState s, long now) {
        return Math.min(now + policy.transferBudgetMs(destBytes(s)), Math.max(now + 1, s.getLeaseDeadlineMs()));
    }

    /** The bytes an order moves: every destination page after the decode engine's cached prefix, every layer (0 when unknown). */
    static long destBytes(DeciderState s) {
        if (s.getDest() == null || s.getDest().getLayout() == null) {
            return 0;
        }
        long blocks = -s.getDestCachedBlocks(); // the cached prefix does not move
        for (io.orbitkv.pd.events.BlockRun r : s.getDest().getBlocks()) {
            blocks += r.getCount();
        }
        try {
            return blocks * io.orbitkv.pd.kv.KvGeometry.of(s.getDest().getLayout()).bytesPerBlock();
        } catch (IllegalArgumentException e) {
            return 0; // a layout the validator refuses: no order goes out on it anyway
        }
    }

    /**
     * The next attempt. Without the prefill's pages yet (order-ahead) it waits for them: its deadline covers the
     * prefill's time as well (the prefill timeout, which fires first, ends a prefill that never comes).
     */
    void issueOrder(StepContext c) {
        DeciderState s = c.s;
        int attempt = s.getAttempt() + 1;
        long deadline = s.getSource() != null ? transferDeadline(s, c.now)
                : Math.max(c.now, s.getTimings().getAdmittedMs() + policy.prefillTimeout().toMillis()) + policy.transferBudgetMs(destBytes(s));
        s.setAttempt(attempt);
        s.setAttemptOpen(true);
        if (attempt <= 31) {
            s.setUnsettledAttempts(s.getUnsettledAttempts() | (1 << (attempt - 1)));
        }
        s.setOrderDeadlineMs(deadline);
        s.setPhase(Phase.TRANSFERRING);
        if (s.getTimings().getOrderIssuedMs() == null) {
            s.getTimings().setOrderIssuedMs(c.now);
        }
        emitOrder(c, attempt);
    }

    /** The order of {@code attempt}, to the source engine's worker: with the source pages once reported, else ahead of them. */
    private void emitOrder(StepContext c, int attempt) {
        DeciderState s = c.s;
        String orderId = s.getRequestId() + "/a" + attempt;
        // move only what the decode engine lacks: its cached prefix is skipped on both sides (signed as moved)
        int skip = s.getDestCachedBlocks();
        List<io.orbitkv.pd.events.BlockRun> destRuns = io.orbitkv.pd.kv.BlockRuns.skip(s.getDest().getBlocks(), skip);
        byte[] token = tokens.sign(orderId, s.getLeaseEpoch(), s.getDest().getEngineId(), s.getDest().getInstanceEpoch(), destRuns);
        HeldPages src = s.getSource();
        String sourceEngine = StepContext.sourceEngine(s);
        c.emit(TransferOrder.newBuilder().setOrderId(orderId).setAttempt(attempt)
                .setSourceEngineId(sourceEngine).setSourceInstanceEpoch(src == null ? -1 : src.getInstanceEpoch())
                .setDestEngineId(s.getDest().getEngineId()).setDestInstanceEpoch(s.getDest().getInstanceEpoch())
                .setSourceBlocks(src == null ? List.of() : io.orbitkv.pd.kv.BlockRuns.skip(src.getBlocks(), skip)).setDestBlocks(destRuns)
                .setSkipBlocks(skip)
                .setLayout(src == null ? s.getDest().getLayout() : src.getLayout())
                .setLeaseId(s.getLeaseId()).setLeaseEpoch(s.getLeaseEpoch()).setAuthToken(ByteBuffer.wrap(token))
                .setDeadlineMs(s.getOrderDeadlineMs()).setTransport("auto").setAwaitPrefill(src == null).setFirstToken(s.getFirstToken()).build(),
                sourceEngine);
    }

    /** The current attempt failed (reported, or timed out): retry after a backoff while attempts are left. */
    void attemptFailed(StepContext c, String reason, boolean retriable) {
        DeciderState s = c.s;
        if (retriable && s.getAttempt() < policy.maxAttempts()) {
            s.setPhase(Phase.RETRY_WAIT);
            s.setRetryAtMs(Math.max(s.getRetryAtMs(), c.now + policy.backoffMs(s.getAttempt() + 1)));
            return;
        }
        prefillUnusable(c, (retriable ? "transfer failed " + s.getAttempt() + " times, last: " : "transfer failed: ") + reason);
    }

    /** The prefill's KV cannot reach the decode engine: recompute on decode if allowed, else fail. */
    void prefillUnusable(StepContext c, String reason) {
        DeciderState s = c.s;
        if (s.getAdmission().getFailurePolicy() == FailurePolicy.RECOMPUTE && s.getDest() != null && !s.getDest().getReleased()) {
            c.release(s.getSource(), ReleaseSide.PREFILL, reason + "; decode recomputes");
            recompute(c, reason);
        } else {
            fail(c, OutcomeKind.FAILED, reason);
        }
    }

    /** No prefill KV exists (failed, timed out, engine lost it). */
    void prefillLost(StepContext c, String reason) {
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

    private void recompute(StepContext c, String reason) {
        DeciderState s = c.s;
        s.setPhase(Phase.RECOMPUTING);
        c.emit(RecomputeDecided.newBuilder().setDecodeEngineId(s.getDest().getEngineId()).setReason(reason).build(),
                s.getDest().getEngineId());
    }

    void cancel(StepContext c, String reason) {
        fail(c, OutcomeKind.CANCELLED, reason);
    }

    /** Ends the request with a non-success outcome: stop any attempt, release both sides (after the drain). */
    void fail(StepContext c, OutcomeKind kind, String reason) {
        if (c.s.getAttemptOpen()) {
            c.abort(reason);
        }
        finishWith(c, kind, reason);
    }

    /** The request's one outcome: its terminal phase, both sides released (after the drain), the outcome to both engines. */
    void finishWith(StepContext c, OutcomeKind kind, String reason) {
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

    /** A lease's end: what the engine asked for, never more than the policy's lease duration from now. */
    long leaseEnd(long requested, long eventTime, long now) {
        // The engine asks for a lease until `requested` on its own clock, stamped `eventTime` on the same clock: what it asks
        // for is the difference, counted here from the fact's time in the log (the broker's append time), so an engine whose
        // clock runs ahead or behind gets neither a longer nor a shorter lease. Its own bound (self-fencing) counts the
        // same duration from when it sent the fact, which is before the append: it stops first (docs/decider.md, "Clocks").
        long max = policy.leaseDuration().toMillis();
        long asked = eventTime > 0 ? requested - eventTime : requested - now;
        return now + (asked > 0 ? Math.min(asked, max) : max);
    }
}
