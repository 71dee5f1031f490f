package io.orbitkv.pd.logtools.audit;

import io.orbitkv.pd.decider.DeciderPolicy;
import io.orbitkv.pd.decider.RequestStateMachine;
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
import io.orbitkv.pd.logtools.LogRecord;
import io.orbitkv.pd.logtools.LogSlice;
import io.orbitkv.pd.logtools.TopicRole;
import io.orbitkv.pd.logtools.audit.Observation.Repeat;
import io.orbitkv.pd.logtools.audit.RequestHistory.Attempt;
import io.orbitkv.pd.logtools.audit.RequestHistory.Fact;
import io.orbitkv.pd.logtools.audit.RequestHistory.Hold;
import io.orbitkv.pd.logtools.audit.RequestHistory.Kind;
import io.orbitkv.pd.schemas.EventDecodingException;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.EventText;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.zip.CRC32C;
import org.apache.kafka.common.serialization.Deserializer;

/**
 * Folds the log, in merged order, into one {@link RequestHistory} per request, and tells the {@link Observer} at
 * each point where a rule compares a record with what came before it. Kept apart from the rules so that every
 * family judges the same facts, and so that what the audit remembers about a request, and when it forgets it,
 * is decided in one place.
 *
 * <p>It tracks each partition's stream time (the largest timestamp so far, as Kafka Streams does), so it knows the
 * stream time at which the decider processed each fact. A finished request (outcome, every page released) is
 * judged and dropped once its partition's stream time is the slack past its last activity; whatever concerns it
 * later is taken as about a new request. It also fills the report's counts of what the log holds, and holds each
 * request's violations until the request is judged whole.
 */
final class RequestLedger {

    /** Receives the fold's observations, synchronously, with the request's history as the observation says. */
    @FunctionalInterface
    interface Observer {
        void seen(RequestHistory request, Observation observation);
    }

    private static final int MAX_FACTS_PER_REQUEST = 256;
    private static final int MAX_ATTEMPTS_PER_REQUEST = 32;
    private static final int MAX_UNDECODABLE_SAMPLES = 10;
    private static final int EVICT_EVERY = 4096;

    private final EventSerdes serdes;
    private final DeciderPolicy policy;
    private final LogSlice slice;
    private final AuditReport report;
    private final long slack;
    private final Observer observer;
    private final String requestEventsTopic;
    private final Map<String, RequestHistory> requests = new HashMap<>();
    private final ArrayDeque<RequestHistory> closed = new ArrayDeque<>();
    private long[] streamTime = new long[0];
    private long[] firstTime = new long[0];
    private long seen;

    RequestLedger(EventSerdes serdes, DeciderPolicy policy, LogSlice slice, long slack, AuditReport report, Observer observer) {
        this.serdes = serdes;
        this.policy = policy;
        this.slice = slice;
        this.slack = slack;
        this.report = report;
        this.observer = observer;
        this.requestEventsTopic = slice.topic(TopicRole.REQUEST_EVENTS).map(LogSlice.TopicSlice::name).orElse(null);
    }

    // ------------------------------------------------------------------------------------------------ input

    /** Folds one record, in merged order. */
    void accept(LogRecord r) {
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

    /** Judges every request still held. */
    void finish() {
        for (RequestHistory r : requests.values()) {
            end(r);
        }
        requests.clear();
    }

    /**
     * Violations wait with their request until it is judged as a whole: a request found to have begun before the
     * slice is left out, with whatever it seemed to break.
     */
    void violation(Rule rule, String requestId, String where, String message) {
        Violation v = new Violation(rule, requestId, where, message);
        RequestHistory r = requests.get(requestId);
        if (r != null && !r.finalized) {
            if (r.pending == null) {
                r.pending = new ArrayList<>(2);
            }
            r.pending.add(v);
        } else {
            report.add(v);
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

    private <T> T decode(LogRecord r, Deserializer<T> d) {
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
            observer.seen(null, new Observation.UndecodableDecision(r.keyString(), r.where(), reason));
        }
    }

    private RequestHistory request(String id) {
        RequestHistory r = requests.get(id);
        if (r == null) {
            r = new RequestHistory(id);
            requests.put(id, r);
            report.requests++;
            report.peakOpenRequests = Math.max(report.peakOpenRequests, requests.size());
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
        RequestHistory r = request(e.getRequestId());
        int idx = r.factCount++;
        if (r.partition < 0) {
            r.partition = rec.partition();
            if (!slice.fromLogStart(TopicRole.REQUEST_EVENTS, rec.partition()) && !RequestStateMachine.mayPrecedeAdmission(p)) {
                r.partial = true; // the request's first facts are before the slice
            }
        }
        r.lastActivity = Math.max(r.lastActivity, now);
        Kind kind = kindOf(p);
        if (kind == null) {
            if (p instanceof LeaseHeartbeat hb) {
                heartbeat(r, hb, now);
            }
            return;
        }
        if (r.fact(e.getEventId()) != null) {
            report.duplicateFacts++; // the decider ignores a repeated event id
            return;
        }
        if (r.facts.size() >= MAX_FACTS_PER_REQUEST) {
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
                Attempt a = r.attempts.get(tc.getAttempt());
                if (a != null && a.order.getOrderId().equals(tc.getOrderId())) {
                    if (a.reported == null) {
                        a.reported = now;
                    }
                    if (a.ackedAt == null) {
                        a.ackedAt = now;
                        observer.seen(r, new Observation.PushAcknowledged(a, tc.getBytes(), rec.where()));
                    }
                }
            }
            case TransferFailed tf -> {
                Attempt a = r.attempts.get(tf.getAttempt());
                if (a != null && a.order.getOrderId().equals(tf.getOrderId()) && a.reported == null) {
                    a.reported = now;
                    a.failed = now;
                    a.failedRetriable = tf.getRetriable();
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

    private Hold hold(RequestHistory r, Fact f, ReleaseSide side, String engine, long instanceEpoch, List<BlockRun> blocks) {
        f.engine = engine;
        f.epoch = instanceEpoch;
        String key = RequestHistory.pages(engine, side, blocks);
        for (Hold h : r.holds) {
            if (h.side == side && h.key.equals(key) && h.instanceEpoch == instanceEpoch && h.counted()) {
                return null; // the same pages reported again: the decider records them once
            }
        }
        Hold h = new Hold(f, side, key, instanceEpoch);
        h.blocks = List.copyOf(blocks);
        r.holds.add(h);
        return h;
    }

    private void heartbeat(RequestHistory r, LeaseHeartbeat hb, long now) {
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
        RequestHistory r = request(d.getRequestId());
        long t = d.getStreamTimeMs();
        int seq = d.getSeq();
        long hash = hash(rec.value());
        if (r.firstSeq < 0) {
            r.firstSeq = seq;
            r.nextSeq = seq;
            if (seq != 0) {
                r.partial = true; // its first decisions are before the slice (or trimmed by retention)
            }
        }
        Repeat repeat = Repeat.NEW;
        if (seq < r.nextSeq) {
            int i = seq - r.firstSeq;
            repeat = i >= 0 && i < r.hashes.length && r.hashes[i] == hash ? Repeat.IDENTICAL : Repeat.CONFLICTING;
            if (repeat == Repeat.IDENTICAL) {
                report.duplicateDecisions++; // the same decision delivered twice: actors dedupe by decision id
            }
        }
        observer.seen(r, new Observation.DecisionRead(d, type, rec.keyString(), where, repeat));
        if (repeat != Repeat.NEW) {
            return;
        }
        int slot = seq - r.firstSeq;
        if (slot >= r.hashes.length && slot < 1 << 16) {
            r.hashes = Arrays.copyOf(r.hashes, Math.max(slot + 1, r.hashes.length * 2));
        }
        if (slot < r.hashes.length) {
            r.hashes[slot] = hash;
        }
        r.nextSeq = seq + 1;
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
                observer.seen(r, new Observation.AbortDecided(a, where));
                Attempt attempt = r.attempts.get(a.getAttempt());
                if (attempt != null && attempt.abortedAt == null) {
                    attempt.abortedAt = t;
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

    private void order(RequestHistory r, Decision d, TransferOrder o, long t, int anchor, String where) {
        // The order issued ahead of the prefill, sent again with the source pages: the same attempt, checked as an order
        // (epochs, pages) but not as a new attempt.
        Attempt ahead = r.attempts.get(o.getAttempt());
        boolean confirms = ahead != null && ahead.order.getAwaitPrefill() && ahead.order.getSourceBlocks().isEmpty() && !o.getAwaitPrefill()
                && ahead.order.getOrderId().equals(o.getOrderId());
        boolean noSourceYet = o.getAwaitPrefill() && o.getSourceBlocks().isEmpty();
        Hold dest = null;
        Hold src = null;
        String destKey = RequestHistory.pages(o.getDestEngineId(), ReleaseSide.DECODE, o.getDestBlocks());
        String srcKey = RequestHistory.pages(o.getSourceEngineId(), ReleaseSide.PREFILL, o.getSourceBlocks());
        if (o.getSkipBlocks() > 0) {
            // an order that moves only what the decode engine lacks names the held pages after its cached prefix: judged
            // against the whole pages held (what releases and leases name)
            for (Hold h : r.holds) {
                List<BlockRun> rest = io.orbitkv.pd.kv.BlockRuns.skip(h.blocks, o.getSkipBlocks());
                if (h.side == ReleaseSide.DECODE && RequestHistory.pages(o.getDestEngineId(), ReleaseSide.DECODE, rest).equals(destKey)) {
                    destKey = h.key;
                } else if (h.side == ReleaseSide.PREFILL && !o.getSourceBlocks().isEmpty()
                        && RequestHistory.pages(o.getSourceEngineId(), ReleaseSide.PREFILL, rest).equals(srcKey)) {
                    srcKey = h.key;
                }
            }
        }
        for (Hold h : r.holds) {
            if (h.side == ReleaseSide.DECODE && h.key.equals(destKey) && Objects.equals(h.leaseId, o.getLeaseId()) && h.counted()) {
                dest = h;
            } else if (h.side == ReleaseSide.PREFILL && h.key.equals(srcKey) && h.counted()) {
                src = h;
            }
        }
        Observation.IssuedOrder issued = new Observation.IssuedOrder(d, o, t, anchor, where, dest, src, destKey, srcKey, noSourceYet);
        observer.seen(r, new Observation.OrderIssued(issued));
        observer.seen(r, new Observation.OrderDestination(issued));
        observer.seen(r, new Observation.OrderSource(issued));
        if (confirms) {
            ahead.order = o;
            ahead.sourceKey = srcKey;
            return;
        }
        report.attempts.merge(o.getAttempt(), 1L, Long::sum);
        observer.seen(r, new Observation.NewAttempt(issued));
        r.lastAttempt = Math.max(r.lastAttempt, o.getAttempt());
        if (r.firstOrderAt < 0) {
            r.firstOrderAt = t;
            r.firstOrderAhead = noSourceYet;
        }
        if (r.attempts.size() < MAX_ATTEMPTS_PER_REQUEST) {
            Attempt attempt = new Attempt(o, destKey, srcKey);
            attempt.dest = dest;
            attempt.ahead = noSourceYet;
            r.attempts.put(o.getAttempt(), attempt);
        }
    }

    private void release(RequestHistory r, Decision d, ReleaseDecided rd, long t, Fact cause, String where) {
        String key = RequestHistory.pages(rd.getEngineId(), rd.getSide(), rd.getBlocks());
        Observation.Release release = new Observation.Release(d, rd, t, key, where);
        Hold hold = null;
        for (Hold h : r.holds) { // an accepted hold first; a refused one may be released once too
            if (h.key.equals(key) && h.releasedAt < 0 && (hold == null || (!hold.counted() && h.counted()))) {
                hold = h;
            }
        }
        if (hold == null) {
            observer.seen(r, new Observation.ReleaseUnheld(release, r.holds.stream().anyMatch(h -> h.key.equals(key))));
            return;
        }
        hold.releasedAt = t;
        if (hold.counted()) {
            report.pagesReleased++;
        }
        observer.seen(r, new Observation.Released(release, hold));
        boolean engineGone = cause != null && cause.kind == Kind.EPOCH && rd.getEngineId().equals(cause.engine);
        for (Attempt a : r.attempts.values()) {
            boolean touches = rd.getSide() == ReleaseSide.DECODE ? a.destKey.equals(key) : a.sourceKey.equals(key);
            if (touches) {
                observer.seen(r, new Observation.ReleaseTouches(release, a, engineGone));
            }
        }
    }

    private void outcome(RequestHistory r, RequestOutcome out, int seq, long t, String where) {
        report.outcomes.merge(out.getKind().name(), 1L, Long::sum);
        r.outcomes++;
        if (r.outcomes > 1) {
            observer.seen(r, new Observation.OutcomeRepeated(out, seq, where));
            return;
        }
        r.outcomeSeq = seq;
        r.outcomeKind = out.getKind();
        r.finishedAt = t;
        if (r.partial) {
            return; // its milestones before the slice are unknown
        }
        observer.seen(r, new Observation.OutcomeDecided(out, where));
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
        RequestHistory r = requests.get(new String(key, StandardCharsets.UTF_8));
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
     * Requests that are done (outcome, every page released) are judged and dropped once their partition's stream
     * time is the slack past their last activity: late reports of an attempt (a push acknowledged after the release)
     * land well within that.
     */
    private void maybeClose(RequestHistory r) {
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
        while (!closed.isEmpty()) {
            RequestHistory r = closed.peekFirst();
            if (requests.get(r.id) != r) {
                closed.pollFirst();
                continue;
            }
            long now = streamTimeOf(r.partition);
            if (now == Long.MIN_VALUE || now < r.lastActivity + slack) {
                return; // roughly in finishing order: the rest is younger
            }
            closed.pollFirst();
            end(r);
            requests.remove(r.id);
            report.evicted++;
        }
    }

    /**
     * In a slice that does not start at the partition's log start, a request is whole only if its admission is in
     * the slice and late enough that the facts which may precede an admission (by at most the admission grace) are
     * in it too.
     */
    private boolean begunBeforeSlice(RequestHistory r) {
        if (slice.fromLogStart(TopicRole.REQUEST_EVENTS, r.partition)) {
            return false;
        }
        Fact admit = r.first(Kind.ADMITTED);
        long start = r.partition < firstTime.length ? firstTime[r.partition] : Long.MIN_VALUE;
        return admit == null || start == Long.MIN_VALUE || admit.streamTime < start + policy.admissionGrace().toMillis();
    }

    /** Judges a request as a whole: its held violations are reported, or dropped with it if it began before the slice. */
    private void end(RequestHistory r) {
        r.finalized = true;
        if (r.factCount == 0) {
            report.withoutFacts++;
            return;
        }
        if (r.partial || begunBeforeSlice(r)) {
            report.partial++;
            return;
        }
        if (r.pending != null) {
            r.pending.forEach(report::add);
        }
        report.checked++;
        boolean admitted = r.admitted();
        if (admitted) {
            report.admitted++;
        }
        long end = streamTimeOf(r.partition);
        boolean inFlight = end - r.lastActivity < slack;
        if (inFlight && admitted && r.outcomes == 0) {
            report.openAtEnd++;
        }
        for (Hold h : r.holds) {
            if (h.counted()) {
                report.pagesHeld++;
                if (inFlight && h.releasedAt < 0) {
                    report.pendingReleases++;
                }
            }
        }
        observer.seen(r, new Observation.Ended(end, inFlight));
    }

    private static long hash(byte[] v) {
        if (v == null) {
            return 0;
        }
        CRC32C c = new CRC32C();
        c.update(v);
        return (c.getValue() << 32) ^ Arrays.hashCode(v) ^ v.length;
    }
}
