package io.orbitkv.pd.decider;

import io.orbitkv.pd.events.CancelRequested;
import io.orbitkv.pd.events.DecodeCompleted;
import io.orbitkv.pd.events.DecodeReady;
import io.orbitkv.pd.events.DecodeRejected;
import io.orbitkv.pd.events.EngineEpochChanged;
import io.orbitkv.pd.events.FailurePolicy;
import io.orbitkv.pd.events.InputRejected;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.LeaseHeartbeat;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.events.PrefillFailed;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferFailed;
import io.orbitkv.pd.events.TransferStarted;
import io.orbitkv.pd.state.Admission;
import io.orbitkv.pd.state.DeciderState;
import io.orbitkv.pd.state.HeldPages;
import io.orbitkv.pd.state.Phase;
import java.util.EnumSet;
import java.util.List;
import java.util.Objects;
import java.util.Set;

/**
 * The decider's state machine as one table, {@link #define}: for every phase (a column; phases that take every input
 * alike share one) and every input (a row: each fact type, and a due timer), the handler that runs, or that the input
 * is ignored or refused. Below the table, the handlers, in its row order. The table picks the handler by phase, so no
 * handler asks which phase it was entered in; a handler checks only what the request's facts decide (a second report of
 * the same thing, another engine than admitted, a stale lease, an attempt never ordered), with the same reasons
 * wherever it is used. The moves handlers end in (order, retry, recompute, fail, finish) are {@link Moves}; the
 * {@link RequestStateMachine} drives the table, after the checks every fact passes first.
 */
final class Transitions {

    static final String ILLEGAL = "ILLEGAL_TRANSITION";
    static final String PREFILL_REPORTED = "a prefill result for this request was already reported";
    static final String DECODE_REPORTED = "decode pages for this request were already reported";
    static final String DECODE_ANSWERED = "the decode engine already reported on this request";

    private final DeciderPolicy policy;
    private final Moves m;
    /** The handler of each (phase, input), by ordinals; total. */
    private final Handler<Object>[][] table;

    @SuppressWarnings("unchecked")
    Transitions(DeciderPolicy policy) {
        this.policy = policy;
        this.m = new Moves(policy);
        this.table = (Handler<Object>[][]) new Handler<?>[Phase.values().length][Input.values().length];
        define();
        for (Phase p : Phase.values()) {
            for (Input in : Input.values()) {
                if (table[p.ordinal()][in.ordinal()] == null) {
                    throw new IllegalStateException("the decider's transition table has no cell for " + p + " × " + in);
                }
            }
        }
    }

    /**
     * The table. A refusal is an {@code InputRejected} decision and an {@code ILLEGAL_TRANSITION} dead letter;
     * {@link #IGNORED} records the fact in the request's history and decides nothing. In TRANSFERRING..RECOMPUTING the
     * decode pages are always known (an order and a recompute both need them), so a second decode report is refused
     * outright. A Tick is not an input: it only advances stream time, which fires the timer row.
     */
    private void define() {
        Transitions t = this; // one letter, so that each row of the table fits one line
        Handler<Object> prefillKnown = refuse(PREFILL_REPORTED);
        Handler<Object> decodeKnown = refuse(DECODE_REPORTED);
        Handler<Object> decodeAnswered = refuse(DECODE_ANSWERED);
        //      AWAITING_ADMISSION ADMITTED           TRANSFERRING       RETRY_WAIT         KV_READY           RECOMPUTING        COMPLETED CANCELLED
        //                         PREFILL_DONE                                                                                   TIMED_OUT FAILED
        //                         DECODE_READY
        on(RequestAdmitted.class,
                t::admit,          t::admitAgain,     t::admitAgain,     t::admitAgain,     t::admitAgain,     t::admitAgain,     t::admitAgain);
        on(PrefillCompleted.class,
                t::holdPrefill,    t::pairPrefill,    t::confirmAhead,   t::holdPrefill,    t::prefillAfterKv, prefillKnown,      t::latePrefill);
        on(PrefillFailed.class,
                t::holdFailure,    t::prefillFailed,  t::prefillFailed,  t::prefillFailed,  t::prefillFailed,  prefillKnown,      IGNORED);
        on(DecodeReady.class,
                t::holdDecode,     t::pairDecode,     decodeKnown,       decodeKnown,       decodeKnown,       decodeKnown,       t::lateDecode);
        on(DecodeRejected.class,
                t::holdRejection,  t::decodeRejected, decodeAnswered,    decodeAnswered,    decodeAnswered,    decodeAnswered,    IGNORED);
        on(LeaseHeartbeat.class,
                t::heartbeat,      t::heartbeat,      t::heartbeat,      t::heartbeat,      t::heartbeat,      t::heartbeat,      t::checkLease);
        on(TransferStarted.class,
                t::checkOrder,     t::checkOrder,     t::checkOrder,     t::checkOrder,     t::checkOrder,     t::checkOrder,     t::checkOrder);
        on(TransferCompleted.class,
                t::settle,         t::settle,         t::kvDelivered,    t::kvDelivered,    t::settle,         t::settle,         t::settle);
        on(TransferFailed.class,
                t::settle,         t::settle,         t::transferFailed, t::settle,         t::settle,         t::settle,         t::settle);
        on(DecodeCompleted.class,
                t::decodeTooEarly, t::decodeTooEarly, t::decodeOvertook, t::decodeOvertook, t::decodeFinished, t::recomputedDone, IGNORED);
        on(CancelRequested.class,
                t::holdCancel,     t::cancel,         t::cancel,         t::cancel,         t::cancel,         t::cancel,         t::cancelTooLate);
        on(EngineEpochChanged.class,
                t::holdLoss,       t::engineLost,     t::engineLost,     t::engineLost,     t::lostAfterKv,    t::lostAfterKv,    t::lostAfterEnd);
        timers(
                t::admissionGrace, t::timeouts,       t::orderTimeouts,  t::retryTimeouts,  t::timeouts,       t::decodeTimeouts, t::retention);
    }

    /** Runs the cell of {@code phase} for a fact; false when the fact's type is no input of this table. */
    boolean onFact(Phase phase, StepContext c, Object fact) {
        Input in = Input.of(fact);
        if (in == null) {
            return false;
        }
        table[phase.ordinal()][in.ordinal()].apply(c, fact);
        return true;
    }

    /** Runs the timer cell of {@code phase}. */
    void onTimer(Phase phase, StepContext c) {
        table[phase.ordinal()][Input.TIMER.ordinal()].apply(c, null);
    }

    // ------------------------------------------------------------------------------------------------ the table's parts

    /** The table's rows: each fact of the RequestEvent union that concerns a request, and a due timer. */
    enum Input {
        ADMITTED(RequestAdmitted.class), PREFILL_COMPLETED(PrefillCompleted.class), PREFILL_FAILED(PrefillFailed.class),
        DECODE_READY(DecodeReady.class), DECODE_REJECTED(DecodeRejected.class), HEARTBEAT(LeaseHeartbeat.class),
        TRANSFER_STARTED(TransferStarted.class), TRANSFER_COMPLETED(TransferCompleted.class), TRANSFER_FAILED(TransferFailed.class),
        DECODE_COMPLETED(DecodeCompleted.class), CANCEL(CancelRequested.class), ENGINE_EPOCH_CHANGED(EngineEpochChanged.class),
        TIMER(null);

        private final Class<?> type;

        Input(Class<?> type) {
            this.type = type;
        }

        private static final ClassValue<Input> BY_TYPE = new ClassValue<>() {
            @Override
            protected Input computeValue(Class<?> type) {
                for (Input in : values()) {
                    if (in.type != null && in.type.isAssignableFrom(type)) {
                        return in;
                    }
                }
                return null;
            }
        };

        /** The row of a fact's payload; null for a type this decider version does not handle (a Tick is no input). */
        static Input of(Object payload) {
            return BY_TYPE.get(payload.getClass());
        }
    }

    /** What one cell of the table does with its input, a fact's payload. */
    @FunctionalInterface
    interface Handler<P> {
        void apply(StepContext c, P fact);
    }

    /** What one cell of the timer row does. */
    @FunctionalInterface
    interface TimerHandler {
        void fire(StepContext c);
    }

    /** The table's columns: phases that take every input alike share one. */
    private static final List<Set<Phase>> COLUMNS = List.of(
            EnumSet.of(Phase.AWAITING_ADMISSION),
            EnumSet.of(Phase.ADMITTED, Phase.PREFILL_DONE, Phase.DECODE_READY),
            EnumSet.of(Phase.TRANSFERRING),
            EnumSet.of(Phase.RETRY_WAIT),
            EnumSet.of(Phase.KV_READY),
            EnumSet.of(Phase.RECOMPUTING),
            EnumSet.of(Phase.COMPLETED, Phase.CANCELLED, Phase.TIMED_OUT, Phase.FAILED));

    /** Late news of a request that moved on: recorded in its history, nothing decided. */
    private static final Handler<Object> IGNORED = (c, fact) -> { };

    /** An input that cannot apply in the phase: an {@code InputRejected} decision and a dead letter. */
    private static Handler<Object> refuse(String reason) {
        return (c, fact) -> c.illegal(ILLEGAL, reason);
    }

    @SafeVarargs
    private <P> void on(Class<P> type, Handler<? super P>... byColumn) {
        Input in = Input.BY_TYPE.get(type);
        for (int col = 0; col < byColumn.length; col++) {
            Handler<? super P> h = byColumn[col];
            put(in, col, byColumn.length, (c, fact) -> h.apply(c, type.cast(fact)));
        }
    }

    private void timers(TimerHandler... byColumn) {
        for (int col = 0; col < byColumn.length; col++) {
            TimerHandler h = byColumn[col];
            put(Input.TIMER, col, byColumn.length, (c, none) -> h.fire(c));
        }
    }

    private void put(Input in, int column, int columns, Handler<Object> h) {
        if (columns != COLUMNS.size()) {
            throw new IllegalArgumentException("row " + in + " has " + columns + " cells for " + COLUMNS.size() + " columns");
        }
        for (Phase p : COLUMNS.get(column)) {
            table[p.ordinal()][in.ordinal()] = h;
        }
    }

    // ------------------------------------------------------------------------------------------------ RequestAdmitted

    /** AWAITING_ADMISSION: the request starts; facts that came early are checked against the engines the proxy picked. */
    void admit(StepContext c, RequestAdmitted a) {
        if (!takeAdmission(c, a)) {
            return;
        }
        DeciderState s = c.s;
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
            m.cancel(c, s.getCancelRequested());
            return;
        }
        if (s.getDecodeRejected() != null) {
            m.fail(c, OutcomeKind.FAILED, "decode engine rejected the request: " + s.getDecodeRejected());
            return;
        }
        if (s.getPrefillFailed() != null) {
            m.prefillLost(c, "prefill failed: " + s.getPrefillFailed());
            return;
        }
        m.advance(c);
    }

    /**
     * Every later phase: refused, the request is already admitted. A request closed before its admission (never admitted
     * within the grace) has none yet: it takes this one and, if it has no outcome yet (older states), gets it now.
     */
    void admitAgain(StepContext c, RequestAdmitted a) {
        if (takeAdmission(c, a) && c.s.getOutcome() == null) {
            m.finishWith(c, OutcomeKind.FAILED, "admitted after " + c.s.getOutcomeReason());
        }
    }

    private static boolean takeAdmission(StepContext c, RequestAdmitted a) {
        DeciderState s = c.s;
        if (s.getAdmission() != null) {
            c.illegal(ILLEGAL, "request already admitted");
            return false;
        }
        s.setAdmission(Admission.newBuilder().setPrefillEngineId(a.getPrefillEngineId()).setDecodeEngineId(a.getDecodeEngineId())
                .setFailurePolicy(a.getFailurePolicy()).setDeadlineMs(a.getDeadlineMs()).setPromptTokens(a.getPromptTokens()).build());
        s.getTimings().setAdmittedMs(c.now);
        return true;
    }

    // ------------------------------------------------------------------------------------------------ PrefillCompleted

    /** AWAITING_ADMISSION, RETRY_WAIT: the pages are recorded; the order that follows carries them. */
    void holdPrefill(StepContext c, PrefillCompleted pc) {
        takePrefill(c, pc);
    }

    /** ADMITTED, PREFILL_DONE, DECODE_READY: recorded, then ordered if the decode pages are in. */
    void pairPrefill(StepContext c, PrefillCompleted pc) {
        if (takePrefill(c, pc)) {
            m.advance(c);
        }
    }

    /** TRANSFERRING: an order went out ahead of this fact; it is sent again with the pages (or aborted if they do not fit). */
    void confirmAhead(StepContext c, PrefillCompleted pc) {
        if (takePrefill(c, pc)) {
            m.confirmAhead(c);
        }
    }

    /** KV_READY: the KV was delivered before this fact arrived (an order ahead): the pages are released as delivered. */
    void prefillAfterKv(StepContext c, PrefillCompleted pc) {
        if (takePrefill(c, pc)) {
            c.release(c.s.getSource(), ReleaseSide.PREFILL, "kv delivered to " + c.s.getDest().getEngineId());
        }
    }

    /** Terminal: pages reported after the end are released (a duplicate of the recorded fact is not). */
    void latePrefill(StepContext c, PrefillCompleted pc) {
        DeciderState s = c.s;
        HeldPages held = pages(pc);
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
    }

    /** Records the source pages; false (refused) after another prefill result or from an engine the request is not on. */
    private static boolean takePrefill(StepContext c, PrefillCompleted pc) {
        DeciderState s = c.s;
        if (prefillReported(c)) {
            return false;
        }
        HeldPages held = pages(pc);
        if (s.getAdmission() != null && !s.getAdmission().getPrefillEngineId().equals(pc.getEngineId())) {
            c.illegal(ILLEGAL, "prefill ran on " + pc.getEngineId() + " but the request was admitted for "
                    + s.getAdmission().getPrefillEngineId());
            c.release(held, ReleaseSide.PREFILL, "prefill ran on an engine the request was not admitted for");
            return false;
        }
        s.setSource(held);
        s.setFirstToken(pc.getFirstToken());
        s.getTimings().setPrefillCompletedMs(c.now);
        return true;
    }

    private static HeldPages pages(PrefillCompleted pc) {
        return HeldPages.newBuilder().setEngineId(pc.getEngineId()).setInstanceEpoch(pc.getInstanceEpoch())
                .setBlocks(pc.getSourceBlocks()).setLayout(pc.getLayout()).setReleased(false).build();
    }

    // ------------------------------------------------------------------------------------------------ PrefillFailed

    /** AWAITING_ADMISSION: remembered, decided at admission. */
    void holdFailure(StepContext c, PrefillFailed pf) {
        takePrefillFailure(c, pf);
    }

    /** Admitted, prefill result still open: no prefill KV will exist (recompute on decode, or fail). */
    void prefillFailed(StepContext c, PrefillFailed pf) {
        if (takePrefillFailure(c, pf)) {
            m.prefillLost(c, "prefill failed: " + pf.getReason());
        }
    }

    private static boolean takePrefillFailure(StepContext c, PrefillFailed pf) {
        if (prefillReported(c)) {
            return false;
        }
        c.s.setPrefillFailed(pf.getReason());
        return true;
    }

    /** True (and the new report refused) when the prefill side already reported: pages or a failure. */
    private static boolean prefillReported(StepContext c) {
        boolean reported = c.s.getSource() != null || c.s.getPrefillFailed() != null;
        if (reported) {
            c.illegal(ILLEGAL, PREFILL_REPORTED);
        }
        return reported;
    }

    // ------------------------------------------------------------------------------------------------ DecodeReady

    /** AWAITING_ADMISSION: the decode pages and their lease are recorded. */
    void holdDecode(StepContext c, DecodeReady dr) {
        takeDecode(c, dr);
    }

    /** ADMITTED, PREFILL_DONE, DECODE_READY: recorded; a prefill failure known already is acted on, else the pair is ordered. */
    void pairDecode(StepContext c, DecodeReady dr) {
        if (!takeDecode(c, dr)) {
            return;
        }
        if (c.s.getPrefillFailed() != null) {
            m.prefillLost(c, "prefill failed: " + c.s.getPrefillFailed());
            return;
        }
        m.advance(c);
    }

    /** Terminal: no order was or will be issued against this lease, so no push can land: its pages are freed at once. */
    void lateDecode(StepContext c, DecodeReady dr) {
        DeciderState s = c.s;
        HeldPages held = pages(dr);
        if (samePages(s.getDest(), held)) {
            return; // a duplicate of the fact already recorded; released with the request
        }
        c.releaseLease(held, dr.getLeaseId(), dr.getLeaseEpoch(), "request already " + s.getPhase() + ": decode pages not needed");
    }

    /** Records the destination pages and opens their lease; false (refused) after another decode report or from another engine. */
    private boolean takeDecode(StepContext c, DecodeReady dr) {
        DeciderState s = c.s;
        if (decodeReported(c, DECODE_REPORTED)) {
            return false;
        }
        HeldPages held = pages(dr);
        if (s.getAdmission() != null && !s.getAdmission().getDecodeEngineId().equals(dr.getEngineId())) {
            c.illegal(ILLEGAL, "decode pages held on " + dr.getEngineId() + " but the request was admitted for "
                    + s.getAdmission().getDecodeEngineId());
            c.releaseLease(held, dr.getLeaseId(), dr.getLeaseEpoch(), "decode pages on an engine the request was not admitted for");
            return false;
        }
        s.setDest(held);
        s.setDestCachedBlocks(dr.getCachedBlocks());
        s.setLeaseId(dr.getLeaseId());
        s.setLeaseEpoch(dr.getLeaseEpoch());
        s.setLeaseDeadlineMs(m.leaseEnd(dr.getLeaseDeadlineMs(), c.event.getEventTimeMs(), c.now));
        s.getTimings().setDecodeReadyMs(c.now);
        return true;
    }

    private static HeldPages pages(DecodeReady dr) {
        return HeldPages.newBuilder().setEngineId(dr.getEngineId()).setInstanceEpoch(dr.getInstanceEpoch())
                .setBlocks(dr.getDestBlocks()).setLayout(dr.getLayout()).setReleased(false).build();
    }

    private static boolean samePages(HeldPages recorded, HeldPages reported) {
        return recorded != null && recorded.getEngineId().equals(reported.getEngineId())
                && recorded.getInstanceEpoch() == reported.getInstanceEpoch() && recorded.getBlocks().equals(reported.getBlocks());
    }

    // ------------------------------------------------------------------------------------------------ DecodeRejected

    /** AWAITING_ADMISSION: remembered, decided at admission. */
    void holdRejection(StepContext c, DecodeRejected rj) {
        takeDecodeRejection(c, rj);
    }

    /** ADMITTED, PREFILL_DONE, DECODE_READY: the request fails; its prefill pages are released at once (nobody to push to). */
    void decodeRejected(StepContext c, DecodeRejected rj) {
        if (takeDecodeRejection(c, rj)) {
            m.fail(c, OutcomeKind.FAILED, "decode engine rejected the request: " + rj.getReason());
        }
    }

    private static boolean takeDecodeRejection(StepContext c, DecodeRejected rj) {
        if (decodeReported(c, DECODE_ANSWERED)) {
            return false;
        }
        c.s.setDecodeRejected(rj.getReason());
        return true;
    }

    /** True (and the new report refused with {@code refusal}) when the decode side already reported: pages or a rejection. */
    private static boolean decodeReported(StepContext c, String refusal) {
        boolean reported = c.s.getDest() != null || c.s.getDecodeRejected() != null;
        if (reported) {
            c.illegal(ILLEGAL, refusal);
        }
        return reported;
    }

    // ------------------------------------------------------------------------------------------------ LeaseHeartbeat

    /** Not terminal: the lease lives on (refused for another lease; nothing to extend once its pages are released). */
    void heartbeat(StepContext c, LeaseHeartbeat hb) {
        DeciderState s = c.s;
        if (leaseMatches(c, hb) && !s.getDest().getReleased()) {
            s.setLeaseDeadlineMs(Math.max(s.getLeaseDeadlineMs(), m.leaseEnd(hb.getExtendToMs(), c.event.getEventTimeMs(), c.now)));
        }
    }

    /** Terminal: the lease is over, the engine learns it from the release; a heartbeat for another lease is still refused. */
    void checkLease(StepContext c, LeaseHeartbeat hb) {
        leaseMatches(c, hb);
    }

    private static boolean leaseMatches(StepContext c, LeaseHeartbeat hb) {
        DeciderState s = c.s;
        if (s.getDest() == null || !Objects.equals(s.getLeaseId(), hb.getLeaseId()) || s.getLeaseEpoch() != hb.getLeaseEpoch()
                || !s.getDest().getEngineId().equals(hb.getEngineId())) {
            c.illegal("STALE_LEASE", "heartbeat for lease " + hb.getLeaseId() + "@" + hb.getLeaseEpoch() + " from " + hb.getEngineId()
                    + " but the request holds " + (s.getDest() == null ? "no lease" : s.getLeaseId() + "@" + s.getLeaseEpoch()));
            return false;
        }
        return true;
    }

    // ------------------------------------------------------------------------------------------------ transfer reports

    /** Any phase: nothing to decide; refused for an attempt never ordered. */
    void checkOrder(StepContext c, TransferStarted ts) {
        ordered(c, ts.getOrderId(), ts.getAttempt());
    }

    /** Outside TRANSFERRING / RETRY_WAIT: settles its attempt (a drained one, or a duplicate completion); nothing else. */
    void settle(StepContext c, TransferCompleted tc) {
        if (ordered(c, tc.getOrderId(), tc.getAttempt())) {
            closeAttempt(c.s, tc.getAttempt());
        }
    }

    /** Outside TRANSFERRING: settles its attempt (superseded, timed out or aborted); nothing else. */
    void settle(StepContext c, TransferFailed tf) {
        if (ordered(c, tf.getOrderId(), tf.getAttempt())) {
            closeAttempt(c.s, tf.getAttempt());
        }
    }

    /** TRANSFERRING, RETRY_WAIT: the KV is in the decode engine's pages: KvReady, and the prefill pages are released. */
    void kvDelivered(StepContext c, TransferCompleted tc) {
        DeciderState s = c.s;
        if (!ordered(c, tc.getOrderId(), tc.getAttempt())) {
            return;
        }
        closeAttempt(s, tc.getAttempt());
        if (s.getAttemptOpen()) {
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
            m.finishWith(c, OutcomeKind.COMPLETED, "decode finished");
        }
    }

    /** TRANSFERRING: the current attempt failed: retry after a backoff, or recompute / fail once attempts are spent. */
    void transferFailed(StepContext c, TransferFailed tf) {
        if (ordered(c, tf.getOrderId(), tf.getAttempt()) && closeAttempt(c.s, tf.getAttempt())) {
            m.attemptFailed(c, tf.getReason(), tf.getRetriable());
        }
    }

    /** False (refused) when the report names an attempt this request never ordered. */
    private static boolean ordered(StepContext c, String orderId, int attempt) {
        DeciderState s = c.s;
        if (attempt >= 1 && attempt <= s.getAttempt() && orderId.equals(s.getRequestId() + "/a" + attempt)) {
            return true;
        }
        c.illegal(ILLEGAL, "transfer " + orderId + " attempt " + attempt + " was never ordered");
        return false;
    }

    /** True when the report closed the current, open attempt; reports of older or settled attempts change nothing. */
    private static boolean closeAttempt(DeciderState s, int attempt) {
        if (attempt != s.getAttempt() || !s.getAttemptOpen()) {
            return false;
        }
        s.setAttemptOpen(false);
        return true;
    }

    // ------------------------------------------------------------------------------------------------ DecodeCompleted

    /** Before any order: refused, the decode engine cannot have had its KV. */
    void decodeTooEarly(StepContext c, DecodeCompleted dc) {
        c.illegal(ILLEGAL, "decode completed before its KV was ready (phase " + c.s.getPhase() + ")");
    }

    /**
     * TRANSFERRING, RETRY_WAIT: the receiving worker handed the engine its KV the moment the bytes landed, and the
     * engine's report overtook the transfer's (two writers, one partition): the request completes once the transfer's
     * report is in.
     */
    void decodeOvertook(StepContext c, DecodeCompleted dc) {
        c.s.setDecodeCompletedEarly(true);
    }

    /** KV_READY: the request completed. */
    void decodeFinished(StepContext c, DecodeCompleted dc) {
        m.finishWith(c, OutcomeKind.COMPLETED, "decode finished");
    }

    /** RECOMPUTING: the request completed, its prefill run again on the decode engine. */
    void recomputedDone(StepContext c, DecodeCompleted dc) {
        m.finishWith(c, OutcomeKind.COMPLETED, "decode finished (prefill recomputed)");
    }

    // ------------------------------------------------------------------------------------------------ CancelRequested

    /** AWAITING_ADMISSION: remembered, carried out at admission. */
    void holdCancel(StepContext c, CancelRequested cr) {
        c.s.setCancelRequested(cr.getReason());
    }

    /** Admitted, not terminal: the request ends CANCELLED (an open attempt aborted, pages released after the drain). */
    void cancel(StepContext c, CancelRequested cr) {
        m.cancel(c, cr.getReason() + " (by " + cr.getRequestedBy() + ")");
    }

    /** Terminal: too late, reported as a decision (not dead-lettered: a client may well disconnect after the end). */
    void cancelTooLate(StepContext c, CancelRequested cr) {
        c.rejectNote("CancelRequested", "request already " + c.s.getPhase());
    }

    // ------------------------------------------------------------------------------------------------ EngineEpochChanged

    /** Which of the request's page sets an engine restart (or departure) took, and how to say so. */
    private record Lost(boolean source, boolean dest, String why) { }

    /** AWAITING_ADMISSION: the lost pages are released; the loss is decided at admission, like an early failure report. */
    void holdLoss(StepContext c, EngineEpochChanged ec) {
        DeciderState s = c.s;
        Lost lost = releaseLost(c, ec);
        if (lost == null) {
            return;
        }
        if (lost.source() && s.getPrefillFailed() == null) {
            s.setPrefillFailed(lost.why());
        }
        if (lost.dest() && s.getDecodeRejected() == null) {
            s.setDecodeRejected(lost.why());
        }
    }

    /** Admitted, KV not yet delivered: a lost lease fails the request; lost prefill pages recompute or fail it. */
    void engineLost(StepContext c, EngineEpochChanged ec) {
        DeciderState s = c.s;
        Lost lost = releaseLost(c, ec);
        if (lost == null) {
            return;
        }
        if (lost.dest()) {
            leaseVoid(c, lost);
            return;
        }
        // Under RECOMPUTE the request lives on (decode re-runs the prefill), so the attempt is stopped here;
        // under FAIL prefillLost ends it through fail(), which aborts.
        if (s.getAttemptOpen() && s.getAdmission().getFailurePolicy() == FailurePolicy.RECOMPUTE) {
            c.abort(lost.why());
        }
        m.prefillLost(c, lost.why() + " before its KV was delivered");
    }

    /** KV_READY, RECOMPUTING: the prefill pages are no longer needed; a lost lease still fails the request. */
    void lostAfterKv(StepContext c, EngineEpochChanged ec) {
        Lost lost = releaseLost(c, ec);
        if (lost != null && lost.dest()) {
            leaseVoid(c, lost);
        }
    }

    private void leaseVoid(StepContext c, Lost lost) {
        m.fail(c, OutcomeKind.FAILED, lost.why() + ": lease " + c.s.getLeaseId() + "@" + c.s.getLeaseEpoch() + " is void");
    }

    /** Terminal: the lost pages are released (for the books), nothing else. */
    void lostAfterEnd(StepContext c, EngineEpochChanged ec) {
        releaseLost(c, ec);
    }

    /**
     * Null when the restart took none of the request's pages. The engine's memory is gone: its pages are released now (for the books; the engine has nothing to free), without
     * waiting for an in-flight attempt, which cannot succeed any more.
     */
    private static Lost releaseLost(StepContext c, EngineEpochChanged ec) {
        DeciderState s = c.s;
        boolean sourceLost = affected(s.getSource(), ec);
        boolean destLost = affected(s.getDest(), ec);
        if (!sourceLost && !destLost) {
            return null;
        }
        String why = ec.getDeregistered() ? "engine " + ec.getEngineId() + " left" : "engine " + ec.getEngineId() + " restarted (epoch "
                + ec.getInstanceEpoch() + ")";
        if (sourceLost) {
            c.releaseNow(s.getSource(), ReleaseSide.PREFILL, why, null, null);
        }
        if (destLost) {
            c.releaseNow(s.getDest(), ReleaseSide.DECODE, why, s.getLeaseId(), s.getLeaseEpoch());
        }
        return new Lost(sourceLost, destLost, why);
    }

    private static boolean affected(HeldPages held, EngineEpochChanged ec) {
        return held != null && !held.getReleased() && held.getEngineId().equals(ec.getEngineId())
                && (ec.getDeregistered() || held.getInstanceEpoch() < ec.getInstanceEpoch());
    }

    // ------------------------------------------------------------------------------------------------ timers

    /** AWAITING_ADMISSION: no RequestAdmitted within the grace: the request the log knows of ends, its pages released. */
    void admissionGrace(StepContext c) {
        DeciderState s = c.s;
        if (c.now < s.getFirstSeenMs() + policy.admissionGrace().toMillis()) {
            return;
        }
        c.history("timer", "AdmissionGraceElapsed", "no RequestAdmitted");
        c.emit(InputRejected.newBuilder().setEventId(s.getRequestId()).setEventType("RequestAdmitted").setState(s.getPhase().name())
                .setReason("facts arrived but the request was never admitted within " + policy.admissionGrace().toMillis()
                        + " ms; releasing their pages").build(), List.of());
        // Every request the log knows of ends in exactly one outcome, this one too (an engine reported on it,
        // then the proxy that called the engine died before its RequestAdmitted was written).
        m.finishWith(c, OutcomeKind.FAILED, "never admitted: facts arrived but no RequestAdmitted within "
                + policy.admissionGrace().toMillis() + " ms");
    }

    /** ADMITTED, PREFILL_DONE, DECODE_READY, KV_READY: the request's own deadline, its timeouts and its lease. */
    void timeouts(StepContext c) {
        firstDue(c, true);
    }

    /** RECOMPUTING: as {@link #timeouts} but no prefill timeout (the decode engine runs the prefill itself). */
    void decodeTimeouts(StepContext c) {
        firstDue(c, false);
    }

    /**
     * The first due of the request's own deadline, the prefill timeout (if {@code prefillDue}) and decode-ready timeout,
     * and the lease; true when one fired.
     */
    private boolean firstDue(StepContext c, boolean prefillDue) {
        DeciderState s = c.s;
        Admission a = s.getAdmission();
        long admitted = s.getTimings().getAdmittedMs();
        if (a.getDeadlineMs() != null && c.now >= a.getDeadlineMs()) {
            c.history("timer", "RequestDeadline", "deadline " + a.getDeadlineMs());
            m.fail(c, OutcomeKind.TIMED_OUT, "request deadline passed");
        } else if (prefillDue && s.getSource() == null && c.now >= admitted + policy.prefillTimeout().toMillis()) {
            c.history("timer", "PrefillTimeout", "no prefill result after " + policy.prefillTimeout().toMillis() + " ms");
            if (s.getDest() != null && a.getFailurePolicy() == FailurePolicy.RECOMPUTE) {
                m.prefillLost(c, "prefill timed out");
            } else {
                m.fail(c, OutcomeKind.TIMED_OUT, "prefill timed out after " + policy.prefillTimeout().toMillis() + " ms");
            }
        } else if (s.getDest() == null && c.now >= admitted + policy.decodeReadyTimeout().toMillis()) {
            c.history("timer", "DecodeReadyTimeout", "no decode-ready after " + policy.decodeReadyTimeout().toMillis() + " ms");
            m.fail(c, OutcomeKind.TIMED_OUT, "decode engine not ready after " + policy.decodeReadyTimeout().toMillis() + " ms");
        } else if (s.getDest() != null && !s.getDest().getReleased() && c.now >= s.getLeaseDeadlineMs()) {
            c.history("timer", "LeaseExpired", "lease " + s.getLeaseId() + "@" + s.getLeaseEpoch());
            m.fail(c, OutcomeKind.TIMED_OUT, "lease " + s.getLeaseId() + "@" + s.getLeaseEpoch() + " expired without a heartbeat");
        } else {
            return false;
        }
        return true;
    }

    /** TRANSFERRING: as {@link #timeouts}, else the attempt's deadline: aborted, counted as a retriable failure. */
    void orderTimeouts(StepContext c) {
        DeciderState s = c.s;
        if (firstDue(c, true) || c.now < s.getOrderDeadlineMs()) {
            return;
        }
        c.history("timer", "TransferTimeout", "attempt " + s.getAttempt());
        c.abort("transfer attempt " + s.getAttempt() + " timed out");
        // Stop tracking the attempt; it may still push (the same bytes) until the drain window ends, and no
        // page is released before that.
        s.setAttemptOpen(false);
        s.setDrainUntilMs(Math.max(s.getDrainUntilMs(), c.now + policy.drainGrace().toMillis()));
        m.attemptFailed(c, "transfer attempt " + s.getAttempt() + " timed out", true);
    }

    /** RETRY_WAIT: as {@link #timeouts}, else the backoff's end: the next attempt is ordered. */
    void retryTimeouts(StepContext c) {
        DeciderState s = c.s;
        if (firstDue(c, true) || c.now < s.getRetryAtMs()) {
            return;
        }
        c.history("timer", "RetryBackoffElapsed", "attempt " + (s.getAttempt() + 1));
        m.issueOrder(c);
    }

    /** Terminal: once nothing is held or waits for a drain and the retention has passed, the state is deleted. */
    void retention(StepContext c) {
        DeciderState s = c.s;
        if (!StepContext.releasesPending(s) && !StepContext.holdsPages(s) && c.now >= s.getFinishedMs() + policy.retention().toMillis()) {
            c.forget();
        }
    }
}
