package io.orbitkv.pd.decider;

import io.orbitkv.pd.decider.RequestStateMachine.Emit;
import io.orbitkv.pd.decider.RequestStateMachine.Rejection;
import io.orbitkv.pd.decider.RequestStateMachine.Step;
import io.orbitkv.pd.events.AbortTransfer;
import io.orbitkv.pd.events.InputRejected;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.RecomputeDecided;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.schemas.EventText;
import io.orbitkv.pd.state.DeciderState;
import io.orbitkv.pd.state.HeldPages;
import io.orbitkv.pd.state.HistoryEntry;
import java.util.ArrayList;
import java.util.List;
import org.apache.avro.specific.SpecificRecord;

/**
 * One step of the {@link RequestStateMachine}: the request's live state (changed in place), the fact being applied
 * ({@code null} for a timer), the stream time, and what the step emits and dead-letters. Owned by that one step.
 *
 * <p>Every release goes through here, so none lands while a push may still write into or read from the pages: until
 * the open attempt has settled and its drain window has passed, a release only marks the pages, and {@link #finish}
 * carries it out once they are drained.
 */
final class StepContext {

    final DeciderState s;
    final RequestEvent event;
    final long now;
    private final int historyLimit;
    private final List<Emit> emits = new ArrayList<>();
    private Rejection rejection;
    private boolean aborted;
    private boolean forget;

    StepContext(DeciderState s, RequestEvent event, long now, int historyLimit, long settleWaitMs) {
        this.s = s;
        this.event = event;
        this.now = now;
        this.historyLimit = historyLimit;
        this.settleWaitMs = settleWaitMs;
    }

    /** How long releases wait for the reports of attempts given up (twice the lease): see {@link #drained}. */
    private final long settleWaitMs;

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
        awaitSettlement(settleWaitMs);
    }

    /**
     * No push may still land in, or read from, a page: no attempt open, the drain window over, and every attempt ever
     * ordered reported by its sender — a sender lagging on its commands can read an order after its abort and push then,
     * into pages released meanwhile (the partitions chaos run: a push acknowledged 4 s after the release) — or, for a
     * sender gone without an epoch change, {@code settle_by_ms} passed.
     */
    boolean drained() {
        return !s.getAttemptOpen() && now >= s.getDrainUntilMs() && (s.getUnsettledAttempts() == 0 || now >= s.getSettleByMs());
    }

    /** Attempts given up (aborted, timed out) may still be started by a lagging sender: releases wait up to this long for their reports. */
    void awaitSettlement(long waitMs) {
        s.setSettleByMs(Math.max(s.getSettleByMs(), now + waitMs));
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
    private void flushReleases() {
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
        if (historyLimit == 0) {
            return;
        }
        List<HistoryEntry> h = s.getHistory();
        if (h.size() >= historyLimit) {
            h.remove(0);
        }
        h.add(HistoryEntry.newBuilder().setStreamTimeMs(now).setDirection(direction).setType(type)
                .setDetail(detail.length() > 300 ? detail.substring(0, 300) + "..." : detail).build());
    }

    /** The request's state is to be deleted (its retention ran out). */
    void forget() {
        forget = true;
    }

    Step finish() {
        if (forget) {
            return new Step(null, List.copyOf(emits), rejection);
        }
        flushReleases();
        return new Step(s, List.copyOf(emits), rejection);
    }

    // ------------------------------------------------------------------------------------------------ pages

    /** The engine the request's KV comes from: the one that reported it, else the one it was admitted for (null: neither yet). */
    static String sourceEngine(DeciderState s) {
        return s.getSource() != null ? s.getSource().getEngineId() : s.getAdmission() != null ? s.getAdmission().getPrefillEngineId() : null;
    }

    /** A release was decided but waits for pushes to drain. */
    static boolean releasesPending(DeciderState s) {
        return pending(s.getSource()) || pending(s.getDest());
    }

    private static boolean pending(HeldPages h) {
        return h != null && !h.getReleased() && h.getPendingReason() != null;
    }

    /** Pages still held and not yet even decided for release (only possible outside terminal phases). */
    static boolean holdsPages(DeciderState s) {
        return (s.getSource() != null && !s.getSource().getReleased() && s.getSource().getPendingReason() == null)
                || (s.getDest() != null && !s.getDest().getReleased() && s.getDest().getPendingReason() == null);
    }

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
}
