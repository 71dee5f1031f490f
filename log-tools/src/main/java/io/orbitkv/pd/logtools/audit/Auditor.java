package io.orbitkv.pd.logtools.audit;

import io.orbitkv.pd.decider.DeciderPolicy;
import io.orbitkv.pd.events.AbortTransfer;
import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.CancelRequested;
import io.orbitkv.pd.events.DeadLetter;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.DecodeCompleted;
import io.orbitkv.pd.events.DecodeReady;
import io.orbitkv.pd.events.DecodeRejected;
import io.orbitkv.pd.events.EngineEpochChanged;
import io.orbitkv.pd.events.InputRejected;
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
import io.orbitkv.pd.logtools.LogRecord;
import io.orbitkv.pd.logtools.LogSlice;
import io.orbitkv.pd.logtools.LogSource;
import io.orbitkv.pd.logtools.Progress;
import io.orbitkv.pd.logtools.TopicRole;
import io.orbitkv.pd.schemas.EventDecodingException;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.EventText;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.zip.CRC32C;

/**
 * Checks the decider's invariants ({@link Rule}) over a recorded log, streaming: one pass in merged order, state
 * per request that is bounded by what the request holds (its page sets, at most a few attempts, a handful of
 * significant facts) rather than by how many events it had, and requests dropped once they are finished and
 * older than the decider's own retention. Every value is decoded with the deployment's real serdes; a record
 * that does not decode is counted and shown, never a crash.
 *
 * <p>How it reconstructs order: the facts of a request are in one partition in processing order; decisions of a
 * request are totally ordered by {@code seq}; a decision names the fact that caused it; and the auditor tracks
 * each partition's stream time (the largest timestamp so far, as Kafka Streams does), so it knows the stream time
 * at which the decider processed each fact. Rules compare those, never wall clocks. Where the log cannot tell
 * (facts of equal timestamps read before a decision they came after), a rule errs toward silence: a correct
 * run must audit clean.
 *
 * <p>Requests in flight at the end of the log are not violations: a missing outcome or release counts only
 * when the partition's stream time ran past every deadline the request could still have been waiting for.
 */
public final class Auditor {

    private static final int MAX_FACTS_PER_REQUEST = 256;
    private static final int MAX_ORDERS_PER_REQUEST = 32;
    private static final int MAX_UNDECODABLE_SAMPLES = 10;
    private static final int EVICT_EVERY = 4096;

    private final EventSerdes serdes;
    private final DeciderPolicy policy;
    private final LogSlice slice;
    private final AuditReport report;
    private final long slack;
    private final Map<String, Req> reqs = new HashMap<>();
    private final ArrayDeque<Req> closed = new ArrayDeque<>();
    private long[] streamTime = new long[0];
    private long[] firstTime = new long[0];
    private long seen;
    private final String requestEventsTopic;

    /**
     * @param serdes    the deployment's serdes (values are decoded with them)
     * @param policy    the decider's policy (timeouts, drain, attempts) the log was made under
     * @param slice     what is being audited (used to tell requests that began before the slice)
     * @param maxListed violations listed in the report (all are counted)
     */
    public Auditor(EventSerdes serdes, DeciderPolicy policy, LogSlice slice, int maxListed) {
        this.serdes = serdes;
        this.policy = policy;
        this.slice = slice;
        this.report = new AuditReport(slice, maxListed);
        this.requestEventsTopic = slice.topic(TopicRole.REQUEST_EVENTS).map(LogSlice.TopicSlice::name).orElse(null);
        long longest = max(policy.prefillTimeout().toMillis(), policy.decodeReadyTimeout().toMillis(), policy.leaseDuration().toMillis(),
                policy.transferTimeout().toMillis(), policy.admissionGrace().toMillis());
        this.slack = longest + policy.drainGrace().toMillis() + policy.backoffMax().toMillis() + 1_000;
    }

    /** Audits everything {@code source} holds. */
    public static AuditReport audit(LogSource source, EventSerdes serdes, DeciderPolicy policy, int maxListed, Progress progress) {
        long t0 = System.nanoTime();
        Auditor a = new Auditor(serdes, policy, source.slice(), maxListed);
        source.read(LogSource.RecordFilter.ALL, a::accept, progress);
        return a.finish(System.nanoTime() - t0);
    }

    /**
     * How far (ms of stream time) past a request's last activity the log must run before a missing outcome or
     * release is a violation rather than work in flight: the longest deadline of the policy, plus the drain
     * grace, the longest backoff and a tick.
     */
    public long slackMs() {
        return slack;
    }

    // ------------------------------------------------------------------------------------------------ state

    private enum Kind { ADMITTED, PREFILL, PREFILL_FAILED, DECODE_READY, DECODE_REJECTED, COMPLETED, FAILED, DECODE_COMPLETED, CANCEL, EPOCH }

    /** A significant fact of a request (heartbeats and TransferStarted are applied, not kept). */
    private static final class Fact {
        final Kind kind;
        final String type;
        final String eventId;
        final int idx;
        final long streamTime;
        final int partition;
        final long offset;
        String engine;
        long epoch;
        boolean rejected;
        boolean causedDecision;

        Fact(Kind kind, String type, String eventId, int idx, long streamTime, int partition, long offset) {
            this.kind = kind;
            this.type = type;
            this.eventId = eventId;
            this.idx = idx;
            this.streamTime = streamTime;
            this.partition = partition;
            this.offset = offset;
        }
    }

    /** Pages a fact reported as held. */
    private static final class Hold {
        final Fact fact;
        final ReleaseSide side;
        final String key;
        final long instanceEpoch;
        String leaseId;
        long leaseEpoch;
        long leaseExpiry = Long.MAX_VALUE;
        long releasedAt = -1;

        Hold(Fact fact, ReleaseSide side, String key, long instanceEpoch) {
            this.fact = fact;
            this.side = side;
            this.key = key;
            this.instanceEpoch = instanceEpoch;
        }

        boolean counted() {
            return !fact.rejected;
        }
    }

    private static final class Order {
        TransferOrder order;
        final long time;
        final String destKey;
        String sourceKey;
        Hold dest;
        Long reported;
        Long failed;
        boolean failedRetriable;
        Long abortedAt;
        Long ackedAt;
        boolean ackFlagged;

        Order(TransferOrder order, long time) {
            this.order = order;
            this.time = time;
            this.destKey = pages(order.getDestEngineId(), ReleaseSide.DECODE, order.getDestBlocks());
            this.sourceKey = pages(order.getSourceEngineId(), ReleaseSide.PREFILL, order.getSourceBlocks());
        }
    }

    private static final class Req {
        final String id;
        int partition = -1;
        int factCount;
        long lastActivity = Long.MIN_VALUE;
        final List<Fact> facts = new ArrayList<>(8);
        final List<Hold> holds = new ArrayList<>(2);
        final Map<Integer, Order> orders = new HashMap<>(4);
        boolean factsOverflow;
        String prefillEngine;
        String decodeEngine;
        int lastAttempt;
        int firstSeq = -1;
        int nextSeq;
        long[] hashes = new long[8];
        long lastDecisionTime = Long.MIN_VALUE;
        int lastAnchor = -1;
        int outcomes;
        int outcomeSeq = -1;
        OutcomeKind outcomeKind;
        long finishedAt = -1;
        long firstOrderAt = -1;
        /** The first order went out ahead of the prefill (decider.order-ahead). */
        boolean firstOrderAhead;
        long kvReadyAt = -1;
        long recomputeAt = -1;
        int cancelDecisionSeq = -1;
        boolean neverAdmitted;
        boolean partial;
        boolean queued;
        boolean finalized;
        List<Violation> violations;

        Req(String id) {
            this.id = id;
        }

        Fact fact(String eventId) {
            for (Fact f : facts) {
                if (f.eventId.equals(eventId)) {
                    return f;
                }
            }
            return null;
        }

        Fact first(Kind kind) {
            for (Fact f : facts) {
                if (f.kind == kind && !f.rejected) {
                    return f;
                }
            }
            return null;
        }

        boolean admitted() {
            return first(Kind.ADMITTED) != null;
        }
    }

    // ------------------------------------------------------------------------------------------------ input

    /** Feeds one record, in merged order. */
    public void accept(LogRecord r) {
        report.records.merge(r.role(), 1L, Long::sum);
        if (r.streamTimeMark()) {
            report.streamTimeMarks++;
            advance(r.partition(), r.timestamp());
            return;
        }
        switch (r.role()) {
            case REQUEST_EVENTS -> fact(r);
            case DECISIONS -> decision(r);
            case DEAD_LETTERS -> deadLetter(r);
            default -> { } // engines and engine commands: counted only
        }
        if (++seen % EVICT_EVERY == 0) {
            evict();
        }
    }

    private long advance(int partition, long ts) {
        if (partition >= streamTime.length) {
            int old = streamTime.length;
            streamTime = Arrays.copyOf(streamTime, partition + 1);
            Arrays.fill(streamTime, old, streamTime.length, Long.MIN_VALUE);
            firstTime = Arrays.copyOf(firstTime, partition + 1);
            Arrays.fill(firstTime, old, firstTime.length, Long.MIN_VALUE);
        }
        if (firstTime[partition] == Long.MIN_VALUE) {
            firstTime[partition] = ts;
        }
        streamTime[partition] = Math.max(streamTime[partition], ts);
        return streamTime[partition];
    }

    private long streamTimeOf(int partition) {
        return partition >= 0 && partition < streamTime.length ? streamTime[partition] : Long.MIN_VALUE;
    }

    private <T> T decode(LogRecord r, org.apache.kafka.common.serialization.Deserializer<T> d) {
        try {
            T v = d.deserialize(r.topic(), r.value());
            if (v == null) {
                undecodable(r, "null value (tombstone)");
            }
            return v;
        } catch (EventDecodingException e) {
            undecodable(r, e.reason() + ": " + e.detail());
        } catch (RuntimeException e) {
            undecodable(r, "MALFORMED: " + e);
        }
        return null;
    }

    private void undecodable(LogRecord r, String reason) {
        report.undecodable.merge(r.role(), 1L, Long::sum);
        if (report.undecodableSamples.size() < MAX_UNDECODABLE_SAMPLES) {
            report.undecodableSamples.add(new AuditReport.Undecodable(r.where(), reason));
        }
        if (r.role() == TopicRole.DECISIONS) {
            String key = r.keyString();
            violation(Rule.UNDECODABLE_DECISION, key == null ? "?" : key, r.where(), reason);
        }
    }

    private Req req(String id) {
        Req r = reqs.get(id);
        if (r == null) {
            r = new Req(id);
            reqs.put(id, r);
            report.requests++;
            report.peakOpenRequests = Math.max(report.peakOpenRequests, reqs.size());
        }
        return r;
    }

    // ------------------------------------------------------------------------------------------------ facts

    private void fact(LogRecord rec) {
        long now = advance(rec.partition(), rec.timestamp());
        RequestEvent e = decode(rec, serdes.requestEvent().deserializer());
        if (e == null) {
            return;
        }
        Object p = e.getPayload();
        report.factTypes.merge(EventText.typeOf(p), 1L, Long::sum);
        if (p instanceof Tick) {
            return;
        }
        if (!e.getRequestId().equals(rec.keyString())) {
            report.keyMismatches++; // the decider dead-letters it (KEY_MISMATCH) and applies nothing
            return;
        }
        Req r = req(e.getRequestId());
        int idx = r.factCount++;
        if (r.partition < 0) {
            r.partition = rec.partition();
            if (!slice.fromLogStart(TopicRole.REQUEST_EVENTS, rec.partition())
                    && !io.orbitkv.pd.decider.RequestStateMachine.mayPrecedeAdmission(p)) {
                r.partial = true; // the request's first facts are before the slice
            }
        }
        r.lastActivity = Math.max(r.lastActivity, now);
        Kind kind = kindOf(p);
        if (kind == null) {
            switch (p) {
                case LeaseHeartbeat hb -> heartbeat(r, hb, now);
                case TransferStarted ignored -> { }
                default -> { }
            }
            return;
        }
        if (r.fact(e.getEventId()) != null) {
            report.duplicateFacts++; // the decider ignores a repeated event id
            return;
        }
        if (r.facts.size() >= MAX_FACTS_PER_REQUEST) {
            r.factsOverflow = true;
            return;
        }
        Fact f = new Fact(kind, EventText.typeOf(p), e.getEventId(), idx, now, rec.partition(), rec.offset());
        r.facts.add(f);
        switch (p) {
            case RequestAdmitted a -> {
                if (r.prefillEngine == null) {
                    r.prefillEngine = a.getPrefillEngineId();
                    r.decodeEngine = a.getDecodeEngineId();
                }
            }
            case PrefillCompleted pc -> hold(r, f, ReleaseSide.PREFILL, pc.getEngineId(), pc.getInstanceEpoch(), pc.getSourceBlocks());
            case DecodeReady dr -> {
                Hold h = hold(r, f, ReleaseSide.DECODE, dr.getEngineId(), dr.getInstanceEpoch(), dr.getDestBlocks());
                if (h != null) {
                    h.leaseId = dr.getLeaseId();
                    h.leaseEpoch = dr.getLeaseEpoch();
                    h.leaseExpiry = leaseEnd(dr.getLeaseDeadlineMs(), now);
                }
            }
            case TransferCompleted tc -> {
                Order o = r.orders.get(tc.getAttempt());
                if (o != null && o.order.getOrderId().equals(tc.getOrderId())) {
                    if (o.reported == null) {
                        o.reported = now;
                    }
                    if (o.ackedAt == null) {
                        o.ackedAt = now;
                        if (o.dest != null && o.dest.releasedAt >= 0 && o.dest.releasedAt < now) {
                            ackAfterRelease(r, o, rec.where());
                        }
                    }
                }
            }
            case TransferFailed tf -> {
                Order o = r.orders.get(tf.getAttempt());
                if (o != null && o.order.getOrderId().equals(tf.getOrderId()) && o.reported == null) {
                    o.reported = now;
                    o.failed = now;
                    o.failedRetriable = tf.getRetriable();
                }
            }
            case EngineEpochChanged ec -> {
                f.engine = ec.getEngineId();
                f.epoch = ec.getDeregistered() ? Long.MAX_VALUE : ec.getInstanceEpoch();
            }
            default -> { }
        }
    }

    private static Kind kindOf(Object p) {
        return switch (p) {
            case RequestAdmitted x -> Kind.ADMITTED;
            case PrefillCompleted x -> Kind.PREFILL;
            case PrefillFailed x -> Kind.PREFILL_FAILED;
            case DecodeReady x -> Kind.DECODE_READY;
            case DecodeRejected x -> Kind.DECODE_REJECTED;
            case TransferCompleted x -> Kind.COMPLETED;
            case TransferFailed x -> Kind.FAILED;
            case DecodeCompleted x -> Kind.DECODE_COMPLETED;
            case CancelRequested x -> Kind.CANCEL;
            case EngineEpochChanged x -> Kind.EPOCH;
            default -> null;
        };
    }

    private Hold hold(Req r, Fact f, ReleaseSide side, String engine, long instanceEpoch, List<BlockRun> blocks) {
        f.engine = engine;
        f.epoch = instanceEpoch;
        String key = pages(engine, side, blocks);
        for (Hold h : r.holds) {
            if (h.side == side && h.key.equals(key) && h.instanceEpoch == instanceEpoch && h.counted()) {
                return null; // the same pages reported again: the decider records them once
            }
        }
        Hold h = new Hold(f, side, key, instanceEpoch);
        r.holds.add(h);
        return h;
    }

    private void heartbeat(Req r, LeaseHeartbeat hb, long now) {
        for (Hold h : r.holds) {
            if (h.side == ReleaseSide.DECODE && Objects.equals(h.leaseId, hb.getLeaseId()) && h.leaseEpoch == hb.getLeaseEpoch()
                    && h.fact.engine.equals(hb.getEngineId()) && h.releasedAt < 0) {
                h.leaseExpiry = Math.max(h.leaseExpiry, leaseEnd(hb.getExtendToMs(), now));
            }
        }
    }

    private long leaseEnd(long requested, long now) {
        long max = now + policy.leaseDuration().toMillis();
        return requested > now ? Math.min(requested, max) : max;
    }

    // ------------------------------------------------------------------------------------------------ decisions

    private void decision(LogRecord rec) {
        Decision d = decode(rec, serdes.decision().deserializer());
        if (d == null) {
            return;
        }
        String type = EventText.typeOf(d);
        report.decisionTypes.merge(type, 1L, Long::sum);
        String where = rec.where();
        Req r = req(d.getRequestId());
        long t = d.getStreamTimeMs();
        if (!d.getRequestId().equals(rec.keyString())) {
            violation(Rule.DECISION_SEQUENCE, r.id, where, "decision for " + r.id + " keyed by '" + rec.keyString()
                    + "': readers of one request's partition would miss it");
        }
        int seq = d.getSeq();
        long hash = hash(rec.value());
        if (r.firstSeq < 0) {
            r.firstSeq = seq;
            r.nextSeq = seq;
            if (seq != 0) {
                r.partial = true; // its first decisions are before the slice (or trimmed by retention)
            }
        }
        if (seq < r.nextSeq) {
            int i = seq - r.firstSeq;
            if (i >= 0 && i < r.hashes.length && r.hashes[i] == hash) {
                report.duplicateDecisions++; // the same decision delivered twice: actors dedupe by decision id
            } else {
                violation(Rule.DECISION_CONFLICT, r.id, where, "decision " + d.getDecisionId() + " (" + type + ") differs from the decision"
                        + " with the same seq recorded earlier: the request was decided twice");
            }
            return;
        }
        if (seq > r.nextSeq) {
            violation(Rule.DECISION_SEQUENCE, r.id, where, "decision seq " + seq + " (" + type + ") where " + r.nextSeq + " was next: "
                    + (seq - r.nextSeq) + " decision(s) missing from the log");
        }
        if (!d.getDecisionId().equals(r.id + "/" + seq)) {
            violation(Rule.DECISION_SEQUENCE, r.id, where, "decision id '" + d.getDecisionId() + "' is not '" + r.id + "/" + seq + "'");
        }
        int slot = seq - r.firstSeq;
        if (slot >= r.hashes.length && slot < 1 << 16) {
            r.hashes = Arrays.copyOf(r.hashes, Math.max(slot + 1, r.hashes.length * 2));
        }
        if (slot < r.hashes.length) {
            r.hashes[slot] = hash;
        }
        r.nextSeq = seq + 1;
        if (t < r.lastDecisionTime) {
            violation(Rule.TIMINGS_INCONSISTENT, r.id, where, type + " seq " + seq + " decided at stream time " + time(t)
                    + ", before the previous decision (" + time(r.lastDecisionTime) + "): stream time never goes back");
        }
        r.lastDecisionTime = Math.max(r.lastDecisionTime, t);
        r.lastActivity = Math.max(r.lastActivity, t);
        Fact cause = d.getCauseEventId() == null ? null : r.fact(d.getCauseEventId());
        if (cause != null) {
            cause.causedDecision = true;
            if (cause.kind == Kind.CANCEL && r.cancelDecisionSeq < 0) {
                r.cancelDecisionSeq = seq;
            }
            r.lastAnchor = Math.max(r.lastAnchor, cause.idx);
        }
        int anchor = cause != null ? cause.idx : r.lastAnchor;
        switch (d.getPayload()) {
            case TransferOrder o -> order(r, d, o, t, anchor, where);
            case AbortTransfer a -> {
                Order o = r.orders.get(a.getAttempt());
                if (o == null && a.getAttempt() > r.lastAttempt) {
                    violation(Rule.ABORT_WITHOUT_ORDER, r.id, where, "AbortTransfer of " + a.getOrderId() + " attempt " + a.getAttempt()
                            + ", which was never ordered (last attempt " + r.lastAttempt + ")");
                } else if (o != null && o.abortedAt == null) {
                    o.abortedAt = t;
                }
            }
            case ReleaseDecided rd -> release(r, d, rd, t, cause, where);
            case KvReady k -> {
                if (r.kvReadyAt < 0) {
                    r.kvReadyAt = t;
                }
            }
            case RecomputeDecided rc -> {
                if (r.recomputeAt < 0) {
                    r.recomputeAt = t;
                }
            }
            case RequestOutcome out -> outcome(r, out, seq, t, where);
            case InputRejected ir -> {
                report.rejectedInputs++;
                if (ir.getEventId().equals(r.id) && "RequestAdmitted".equals(ir.getEventType())) {
                    r.neverAdmitted = true; // the admission grace passed: the decider released what early facts held
                } else {
                    Fact f = r.fact(ir.getEventId());
                    if (f != null && f.type.equals(ir.getEventType())) {
                        f.rejected = true;
                    }
                }
            }
            default -> { }
        }
        maybeClose(r);
    }

    private void order(Req r, Decision d, TransferOrder o, long t, int anchor, String where) {
        String what = "TransferOrder " + o.getOrderId() + " (seq " + d.getSeq() + ", " + time(t) + ")";
        if (r.outcomeSeq >= 0) {
            violation(Rule.ORDER_AFTER_OUTCOME, r.id, where, what + " after the request's outcome " + r.outcomeKind + " (seq "
                    + r.outcomeSeq + ")");
        }
        if (r.cancelDecisionSeq >= 0) {
            violation(Rule.ORDER_AFTER_CANCEL, r.id, where, what + " after the cancel was decided (seq " + r.cancelDecisionSeq + ")");
        } else {
            for (Fact f : r.facts) {
                if (f.kind == Kind.CANCEL && !f.rejected && f.idx < anchor) {
                    violation(Rule.ORDER_AFTER_CANCEL, r.id, where, what + " after CancelRequested " + f.eventId + " (at "
                            + time(f.streamTime) + ") was processed");
                    break;
                }
            }
        }
        // The order issued ahead of the prefill, sent again with the source pages: the same attempt, checked as an order
        // (epochs, pages) but not as a new attempt.
        Order ahead = r.orders.get(o.getAttempt());
        boolean confirms = ahead != null && ahead.order.getAwaitPrefill() && ahead.order.getSourceBlocks().isEmpty() && !o.getAwaitPrefill()
                && ahead.order.getOrderId().equals(o.getOrderId());
        boolean noSourceYet = o.getAwaitPrefill() && o.getSourceBlocks().isEmpty();
        // epochs: the lease and both engines' instance epochs the order names must be those the facts reported
        Hold dest = null;
        Hold src = null;
        String destKey = pages(o.getDestEngineId(), ReleaseSide.DECODE, o.getDestBlocks());
        String srcKey = pages(o.getSourceEngineId(), ReleaseSide.PREFILL, o.getSourceBlocks());
        for (Hold h : r.holds) {
            if (h.side == ReleaseSide.DECODE && h.key.equals(destKey) && Objects.equals(h.leaseId, o.getLeaseId()) && h.counted()) {
                dest = h;
            } else if (h.side == ReleaseSide.PREFILL && h.key.equals(srcKey) && h.counted()) {
                src = h;
            }
        }
        if (dest == null) {
            violation(Rule.STALE_EPOCH, r.id, where, what + " names lease " + o.getLeaseId() + " on [" + destKey
                    + "], which no accepted DecodeReady holds");
        } else {
            if (dest.leaseEpoch != o.getLeaseEpoch()) {
                violation(Rule.STALE_EPOCH, r.id, where, what + " carries lease epoch " + o.getLeaseEpoch() + " but lease " + o.getLeaseId()
                        + " has epoch " + dest.leaseEpoch + " (" + dest.fact.eventId + ")");
            }
            if (dest.instanceEpoch != o.getDestInstanceEpoch()) {
                violation(Rule.STALE_EPOCH, r.id, where, what + " names decode instance epoch " + o.getDestInstanceEpoch()
                        + " but the pages are held by instance epoch " + dest.instanceEpoch);
            }
            if (dest.releasedAt >= 0) {
                violation(Rule.STALE_EPOCH, r.id, where, what + " pushes into pages of lease " + o.getLeaseId() + " released at "
                        + time(dest.releasedAt));
            }
            if (t >= dest.leaseExpiry) {
                violation(Rule.ORDER_AFTER_LEASE_EXPIRY, r.id, where, what + " at or after the end of lease " + o.getLeaseId() + "@"
                        + o.getLeaseEpoch() + " (" + time(dest.leaseExpiry) + ")");
            }
        }
        if (noSourceYet) {
            // issued ahead: it names no source pages (it pushes those its engine's PrefillCompleted reports)
        } else if (src == null) {
            violation(Rule.STALE_EPOCH, r.id, where, what + " reads [" + srcKey + "], which no accepted PrefillCompleted holds");
        } else {
            if (src.instanceEpoch != o.getSourceInstanceEpoch()) {
                violation(Rule.STALE_EPOCH, r.id, where, what + " names prefill instance epoch " + o.getSourceInstanceEpoch()
                        + " but the pages are held by instance epoch " + src.instanceEpoch);
            }
            if (src.releasedAt >= 0) {
                violation(Rule.STALE_EPOCH, r.id, where, what + " reads prefill pages released at " + time(src.releasedAt));
            }
        }
        for (Fact f : r.facts) {
            if (f.kind == Kind.EPOCH && !f.rejected && f.idx <= anchor
                    && ((f.engine.equals(o.getDestEngineId()) && f.epoch > o.getDestInstanceEpoch())
                    || (!noSourceYet && f.engine.equals(o.getSourceEngineId()) && f.epoch > o.getSourceInstanceEpoch()))) {
                violation(Rule.STALE_EPOCH, r.id, where, what + " after " + f.eventId + ": engine " + f.engine + " moved past the epoch"
                        + " the order names");
                break;
            }
        }
        if (confirms) {
            ahead.order = o;
            ahead.sourceKey = srcKey;
            return;
        }
        report.attempts.merge(o.getAttempt(), 1L, Long::sum);
        // retries
        int a = o.getAttempt();
        if (a != r.lastAttempt + 1) {
            violation(Rule.RETRY_OUT_OF_BOUNDS, r.id, where, what + " is attempt " + a + " after attempt " + r.lastAttempt);
        }
        if (a > policy.maxAttempts() || a < 1) {
            violation(Rule.RETRY_OUT_OF_BOUNDS, r.id, where, what + " is attempt " + a + ", beyond decider.retry.max-attempts="
                    + policy.maxAttempts());
        }
        Order prev = r.orders.get(a - 1);
        if (a > 1 && prev != null) {
            if (prev.failed != null && !prev.failedRetriable) {
                violation(Rule.RETRY_WITHOUT_FAILURE, r.id, where, what + " after attempt " + (a - 1) + " failed for good (retriable=false)");
            } else {
                long signal = Long.MAX_VALUE;
                if (prev.failed != null) {
                    signal = prev.failed;
                }
                if (prev.abortedAt != null) {
                    signal = Math.min(signal, prev.abortedAt);
                }
                if (t >= prev.order.getDeadlineMs()) {
                    signal = Math.min(signal, prev.order.getDeadlineMs());
                }
                if (signal == Long.MAX_VALUE) {
                    violation(Rule.RETRY_WITHOUT_FAILURE, r.id, where, what + ": attempt " + (a - 1) + " neither failed nor timed out (deadline "
                            + time(prev.order.getDeadlineMs()) + ")");
                } else if (t < signal + policy.backoffMs(a)) {
                    violation(Rule.RETRY_BEFORE_BACKOFF, r.id, where, what + " only " + (t - signal) + " ms after attempt " + (a - 1)
                            + " failed; the backoff before attempt " + a + " is " + policy.backoffMs(a) + " ms");
                }
            }
        }
        r.lastAttempt = Math.max(r.lastAttempt, a);
        if (r.firstOrderAt < 0) {
            r.firstOrderAt = t;
            r.firstOrderAhead = noSourceYet;
        }
        if (r.orders.size() < MAX_ORDERS_PER_REQUEST) {
            Order ord = new Order(o, t);
            ord.dest = dest;
            r.orders.put(a, ord);
        }
    }

    private void release(Req r, Decision d, ReleaseDecided rd, long t, Fact cause, String where) {
        String key = pages(rd.getEngineId(), rd.getSide(), rd.getBlocks());
        String what = "ReleaseDecided " + rd.getSide() + " [" + key + "] (seq " + d.getSeq() + ", " + time(t) + ")";
        Hold hold = null;
        for (Hold h : r.holds) { // an accepted hold first; a refused one may be released once too
            if (h.key.equals(key) && h.releasedAt < 0 && (hold == null || (!hold.counted() && h.counted()))) {
                hold = h;
            }
        }
        if (hold == null) {
            boolean before = r.holds.stream().anyMatch(h -> h.key.equals(key));
            violation(Rule.PAGES_RELEASED_TWICE, r.id, where, what + (before ? " releases pages that were already released"
                    : " releases pages no fact of this request reported as held"));
            return;
        }
        hold.releasedAt = t;
        if (hold.counted()) {
            report.pagesReleased++;
        }
        if (rd.getSide() == ReleaseSide.DECODE && rd.getLeaseEpoch() != null && hold.leaseId != null
                && (rd.getLeaseEpoch() != hold.leaseEpoch || !Objects.equals(rd.getLeaseId(), hold.leaseId))) {
            violation(Rule.STALE_EPOCH, r.id, where, what + " names lease " + rd.getLeaseId() + "@" + rd.getLeaseEpoch() + " but the pages"
                    + " are held under " + hold.leaseId + "@" + hold.leaseEpoch);
        }
        boolean engineGone = cause != null && cause.kind == Kind.EPOCH && rd.getEngineId().equals(cause.engine);
        for (Order o : r.orders.values()) {
            boolean touches = rd.getSide() == ReleaseSide.DECODE ? o.destKey.equals(key) : o.sourceKey.equals(key);
            if (!touches) {
                continue;
            }
            if (!engineGone) {
                long fence = Math.min(o.order.getDeadlineMs(), o.abortedAt == null ? Long.MAX_VALUE : o.abortedAt)
                        + policy.drainGrace().toMillis();
                boolean drained = (o.reported != null && o.reported <= t) || t >= fence;
                if (!drained) {
                    violation(Rule.RELEASE_BEFORE_DRAIN, r.id, where, what + " while attempt " + o.order.getAttempt() + " may still push"
                            + " (no report; " + (o.abortedAt == null ? "not aborted" : "aborted at " + time(o.abortedAt))
                            + "; fenced only from " + time(fence) + ")");
                }
            }
            if (rd.getSide() == ReleaseSide.DECODE && o.ackedAt != null && o.ackedAt > t && !o.ackFlagged) {
                ackAfterRelease(r, o, where);
            }
        }
    }

    private void ackAfterRelease(Req r, Order o, String where) {
        o.ackFlagged = true;
        violation(Rule.PUSH_ACK_STALE_EPOCH, r.id, where, "TransferCompleted of " + o.order.getOrderId() + " acknowledged at "
                + time(o.ackedAt) + ", after lease " + o.order.getLeaseId() + "@" + o.order.getLeaseEpoch() + " was released at "
                + time(o.dest.releasedAt) + ": a push landed with a stale epoch");
    }

    private void outcome(Req r, RequestOutcome out, int seq, long t, String where) {
        report.outcomes.merge(out.getKind().name(), 1L, Long::sum);
        r.outcomes++;
        if (r.outcomes > 1) {
            violation(Rule.OUTCOME_DUPLICATE, r.id, where, "second RequestOutcome " + out.getKind() + " (seq " + seq + ") after "
                    + r.outcomeKind + " (seq " + r.outcomeSeq + ")");
            return;
        }
        r.outcomeSeq = seq;
        r.outcomeKind = out.getKind();
        r.finishedAt = t;
        if (r.partial) {
            return;
        }
        // timings: each milestone is the stream time of the step that reached it
        PhaseTimings tm = out.getTimings();
        boolean exact = slice.fromLogStart(TopicRole.REQUEST_EVENTS, r.partition);
        List<String> bad = new ArrayList<>();
        if (tm.getFinishedMs() == null || tm.getFinishedMs() != t) {
            bad.add("finished_ms " + tm.getFinishedMs() + " but the outcome was decided at " + t);
        }
        Fact admit = r.first(Kind.ADMITTED);
        if (admit != null) {
            if (tm.getAdmittedMs() == null) {
                bad.add("admitted_ms missing for an admitted request");
            } else if (exact && tm.getAdmittedMs() != admit.streamTime) {
                bad.add("admitted_ms " + tm.getAdmittedMs() + " but " + admit.eventId + " was processed at " + admit.streamTime);
            }
        }
        milestone(bad, "prefill_completed_ms", tm.getPrefillCompletedMs(), r, Kind.PREFILL, exact);
        milestone(bad, "decode_ready_ms", tm.getDecodeReadyMs(), r, Kind.DECODE_READY, exact);
        if (!Objects.equals(tm.getOrderIssuedMs(), r.firstOrderAt < 0 ? null : r.firstOrderAt)) {
            bad.add("order_issued_ms " + tm.getOrderIssuedMs() + " but the first order was at " + (r.firstOrderAt < 0 ? "none" : r.firstOrderAt));
        }
        if (!Objects.equals(tm.getTransferCompletedMs(), r.kvReadyAt < 0 ? null : r.kvReadyAt)) {
            bad.add("transfer_completed_ms " + tm.getTransferCompletedMs() + " but KvReady was at " + (r.kvReadyAt < 0 ? "none" : r.kvReadyAt));
        }
        Long[] chain = {tm.getAdmittedMs(), tm.getOrderIssuedMs(), tm.getTransferCompletedMs(), tm.getFinishedMs()};
        String[] names = {"admitted", "order_issued", "transfer_completed", "finished"};
        for (int i = 1; i < chain.length; i++) {
            for (int j = 0; j < i; j++) {
                if (chain[i] != null && chain[j] != null && chain[i] < chain[j]) {
                    bad.add(names[i] + " " + chain[i] + " before " + names[j] + " " + chain[j]);
                }
            }
        }
        for (Long side : new Long[] {tm.getPrefillCompletedMs(), tm.getDecodeReadyMs()}) {
            boolean mayFollow = r.firstOrderAhead && side == tm.getPrefillCompletedMs(); // an order ahead precedes the prefill
            if (side != null && tm.getOrderIssuedMs() != null && side > tm.getOrderIssuedMs() && !mayFollow) {
                bad.add("an order issued (" + tm.getOrderIssuedMs() + ") before both sides were in (" + side + ")");
            }
            if (side != null && tm.getFinishedMs() != null && side > tm.getFinishedMs()) {
                bad.add("a milestone " + side + " after finished " + tm.getFinishedMs());
            }
        }
        if (!bad.isEmpty()) {
            violation(Rule.TIMINGS_INCONSISTENT, r.id, where, "RequestOutcome " + out.getKind() + " timings: " + String.join("; ", bad));
        }
        List<String> wrong = new ArrayList<>();
        if (out.getAttempts() != r.lastAttempt) {
            wrong.add("attempts " + out.getAttempts() + " but the log has " + r.lastAttempt + " order(s)");
        }
        if (admit != null && (!Objects.equals(out.getPrefillEngineId(), r.prefillEngine) || !Objects.equals(out.getDecodeEngineId(), r.decodeEngine))) {
            wrong.add("engines " + out.getPrefillEngineId() + "/" + out.getDecodeEngineId() + " but admitted for " + r.prefillEngine + "/"
                    + r.decodeEngine);
        }
        if (out.getKind() == OutcomeKind.COMPLETED && ((r.kvReadyAt < 0 && r.recomputeAt < 0) || r.first(Kind.DECODE_COMPLETED) == null)) {
            wrong.add("COMPLETED without " + (r.kvReadyAt < 0 && r.recomputeAt < 0 ? "KvReady or RecomputeDecided" : "DecodeCompleted"));
        }
        if (out.getKind() == OutcomeKind.CANCELLED && r.first(Kind.CANCEL) == null) {
            wrong.add("CANCELLED without a CancelRequested");
        }
        if (out.getKvBytes() > 0 && r.kvReadyAt < 0) {
            wrong.add("kv_bytes " + out.getKvBytes() + " without KvReady");
        }
        if (!wrong.isEmpty()) {
            violation(Rule.OUTCOME_INCONSISTENT, r.id, where, "RequestOutcome " + out.getKind() + ": " + String.join("; ", wrong));
        }
    }

    private static void milestone(List<String> bad, String name, Long value, Req r, Kind kind, boolean exact) {
        Fact f = r.first(kind);
        // Strictly before: stream time is the partition's running maximum, so a fact processed after the outcome has a stream
        // time >= the finish; at the same millisecond the order is unknown, and an audit must not invent violations.
        if (value == null && f != null && f.streamTime < r.finishedAt) {
            bad.add(name + " missing although " + f.eventId + " was processed");
        } else if (value != null && f != null && exact && value != f.streamTime) {
            bad.add(name + " " + value + " but " + f.eventId + " was processed at " + f.streamTime);
        }
    }

    // ------------------------------------------------------------------------------------------------ dead letters

    private void deadLetter(LogRecord rec) {
        DeadLetter dl = decode(rec, serdes.deadLetter().deserializer());
        if (dl == null) {
            return;
        }
        report.deadLetters.merge(dl.getErrorType(), 1L, Long::sum);
        if (dl.getOriginalKey() == null || !dl.getTopic().equals(requestEventsTopic)) {
            return;
        }
        ByteBuffer k = dl.getOriginalKey().duplicate();
        byte[] key = new byte[k.remaining()];
        k.get(key);
        Req r = reqs.get(new String(key, StandardCharsets.UTF_8));
        if (r == null) {
            return;
        }
        for (Fact f : r.facts) {
            if (f.partition == dl.getPartition() && f.offset == dl.getOffset()) {
                f.rejected = true; // refused by the decider: it applied nothing of it
            }
        }
    }

    // ------------------------------------------------------------------------------------------------ end

    /**
     * Requests that are done (outcome, every page released) are checked and dropped once their partition's stream
     * time is {@link #slackMs()} past their last activity: late reports of an attempt (a push acknowledged after the
     * release) land well within that. What concerns a request later still is checked as if about a new one.
     */
    private void maybeClose(Req r) {
        if (r.queued || r.partition < 0 || (r.outcomes == 0 && !r.neverAdmitted)) {
            return;
        }
        for (Hold h : r.holds) {
            if (h.counted() && h.releasedAt < 0) {
                return;
            }
        }
        r.queued = true;
        closed.addLast(r);
    }

    private void evict() {
        long horizon = slack;
        while (!closed.isEmpty()) {
            Req r = closed.peekFirst();
            if (reqs.get(r.id) != r) {
                closed.pollFirst();
                continue;
            }
            long now = streamTimeOf(r.partition);
            if (now == Long.MIN_VALUE || now < r.lastActivity + horizon) {
                return; // roughly in finishing order: the rest is younger
            }
            closed.pollFirst();
            finalCheck(r);
            reqs.remove(r.id);
            report.evicted++;
        }
    }

    /**
     * In a slice that does not start at the partition's log start, a request is whole only if its admission is in
     * the slice and late enough that the facts which may precede an admission (by at most the admission grace) are
     * in it too.
     */
    private boolean begunBeforeSlice(Req r) {
        if (slice.fromLogStart(TopicRole.REQUEST_EVENTS, r.partition)) {
            return false;
        }
        Fact admit = r.first(Kind.ADMITTED);
        long start = r.partition < firstTime.length ? firstTime[r.partition] : Long.MIN_VALUE;
        return admit == null || start == Long.MIN_VALUE || admit.streamTime < start + policy.admissionGrace().toMillis();
    }

    /** Ends the audit: the checks that need the whole story run for every request still held. */
    public AuditReport finish(long elapsedNanos) {
        for (Req r : reqs.values()) {
            finalCheck(r);
        }
        reqs.clear();
        report.elapsedNanos = elapsedNanos;
        return report;
    }

    private void finalCheck(Req r) {
        r.finalized = true;
        if (r.factCount == 0) {
            report.withoutFacts++;
            return;
        }
        if (r.partial || begunBeforeSlice(r)) {
            report.partial++;
            return;
        }
        if (r.violations != null) {
            r.violations.forEach(report::add);
        }
        report.checked++;
        boolean admitted = r.admitted();
        if (admitted) {
            report.admitted++;
        }
        for (Hold h : r.holds) {
            if (h.counted()) {
                report.pagesHeld++;
            }
        }
        long end = streamTimeOf(r.partition);
        boolean inFlight = end - r.lastActivity < slack;
        String endWhere = "end of log";
        if (admitted && r.outcomes == 0) {
            if (inFlight) {
                report.openAtEnd++;
            } else {
                violation(Rule.OUTCOME_MISSING, r.id, endWhere, "admitted at " + time(r.first(Kind.ADMITTED).streamTime) + ", last activity "
                        + time(r.lastActivity) + ", but no RequestOutcome although the log runs to " + time(end) + " ("
                        + (end - r.lastActivity) + " ms later; every deadline is within " + slack + " ms)");
            }
        }
        // A request known only by facts whose admission never came ends FAILED once the admission grace passed (since
        // 2026-12-04; older logs have no outcome for it).
        boolean closedUnadmitted = r.neverAdmitted && r.outcomes == 1 && r.outcomeKind == OutcomeKind.FAILED;
        if (!admitted && r.outcomes > 0 && !closedUnadmitted) {
            violation(Rule.OUTCOME_UNADMITTED, r.id, endWhere, r.outcomes + " RequestOutcome(s) (" + r.outcomeKind + ") for a request that"
                    + " was never admitted");
        }
        for (Hold h : r.holds) {
            if (h.counted() && h.releasedAt < 0) {
                if (inFlight) {
                    report.pendingReleases++;
                } else {
                    violation(Rule.PAGES_NOT_RELEASED, r.id, endWhere, "[" + h.key + "] held since " + h.fact.eventId + " (" + time(h.fact.streamTime)
                            + ") never released; the log runs to " + time(end));
                }
            }
        }
        if (!inFlight && r.admitted()) {
            Fact admit = r.first(Kind.ADMITTED);
            for (Fact f : r.facts) {
                // once admitted, the decider answers every cancel: with the outcome, or an InputRejected when it ended already
                if (f.kind == Kind.CANCEL && !f.rejected && !f.causedDecision && f.idx > admit.idx) {
                    violation(Rule.CANCEL_IGNORED, r.id, "request-events-" + f.partition + "@" + f.offset, "CancelRequested " + f.eventId
                            + " (" + time(f.streamTime) + ") of an admitted request: no decision answered it");
                }
            }
        }
    }

    /**
     * Violations wait with their request until it is checked as a whole: a request found to have begun before the
     * slice is left out, with whatever it seemed to break.
     */
    private void violation(Rule rule, String requestId, String where, String message) {
        Violation v = new Violation(rule, requestId, where, message);
        Req r = reqs.get(requestId);
        if (r != null && !r.finalized) {
            if (r.violations == null) {
                r.violations = new ArrayList<>(2);
            }
            r.violations.add(v);
        } else {
            report.add(v);
        }
    }

    // ------------------------------------------------------------------------------------------------ helpers

    static String pages(String engine, ReleaseSide side, List<BlockRun> blocks) {
        StringBuilder b = new StringBuilder(engine).append(' ').append(side);
        for (BlockRun r : blocks) {
            b.append(' ').append(r.getStart()).append('+').append(r.getCount());
        }
        return b.toString();
    }

    private static long hash(byte[] v) {
        if (v == null) {
            return 0;
        }
        CRC32C c = new CRC32C();
        c.update(v);
        return (c.getValue() << 32) ^ Arrays.hashCode(v) ^ v.length;
    }

    private static String time(long ms) {
        return ms == Long.MAX_VALUE ? "never" : ms == Long.MIN_VALUE ? "-" : Instant.ofEpochMilli(ms).toString();
    }

    private static long max(long... v) {
        return Arrays.stream(v).max().orElse(0);
    }
}
