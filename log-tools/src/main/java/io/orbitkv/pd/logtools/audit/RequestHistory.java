package io.orbitkv.pd.logtools.audit;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.events.TransferOrder;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * What one request's records showed so far, as {@link RequestLedger} folded them: its significant facts in the
 * order the decider processed them, the page sets it held, its transfer attempts and the milestones of its
 * decisions. The ledger writes it and the {@link RuleChecker}s read it, so every family of rules judges the same
 * facts; the one mark a checker leaves is {@link Attempt#staleAckReported}.
 *
 * <p>Bounded by what the request holds (page sets, a few attempts, its significant facts), not by how many events
 * it had: heartbeats and {@code TransferStarted} are applied, not kept.
 */
final class RequestHistory {

    /** The facts that are kept; the others are applied to what they concern. */
    enum Kind { ADMITTED, PREFILL, PREFILL_FAILED, DECODE_READY, DECODE_REJECTED, COMPLETED, FAILED, DECODE_COMPLETED, CANCEL, EPOCH }

    /** A significant fact of the request, with the stream time at which the decider processed it. */
    static final class Fact {
        final Kind kind;
        final String type;
        final String eventId;
        /** Position among all the request's facts (kept or not): the order the decider processed them in. */
        final int idx;
        final long streamTime;
        final int partition;
        final long offset;
        String engine;
        long epoch;
        /** Refused by the decider (an {@code InputRejected} or a dead letter): it applied nothing of it. */
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

    /** Pages a fact reported as held, until a {@code ReleaseDecided} frees them. */
    static final class Hold {
        final Fact fact;
        final ReleaseSide side;
        final String key;
        final long instanceEpoch;
        /** The pages held, as reported (an order skipping a cached prefix names the ones after it). */
        List<BlockRun> blocks = List.of();
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

        /** Held for the decider: a hold of a refused fact may be released, but the decider never counted it. */
        boolean counted() {
            return !fact.rejected;
        }
    }

    /** One transfer attempt: its order and what was reported or decided about it. */
    static final class Attempt {
        TransferOrder order;
        final String destKey;
        String sourceKey;
        /** The destination pages the order pushes into, when an accepted {@code DecodeReady} held them. */
        Hold dest;
        Long reported;
        Long failed;
        boolean failedRetriable;
        Long abortedAt;
        Long ackedAt;
        /** Set by {@link EpochChecker}: a push acknowledged after its lease was released is reported once. */
        boolean staleAckReported;
        /** Issued ahead of the prefill (no source pages yet): a worker may push it layer by layer while the prefill computes. */
        boolean ahead;

        Attempt(TransferOrder order) {
            this(order, pages(order.getDestEngineId(), ReleaseSide.DECODE, order.getDestBlocks()),
                    pages(order.getSourceEngineId(), ReleaseSide.PREFILL, order.getSourceBlocks()));
        }

        /** With the keys of the whole pages held (an order that skips the decode engine's cached prefix names fewer). */
        Attempt(TransferOrder order, String destKey, String sourceKey) {
            this.order = order;
            this.destKey = destKey;
            this.sourceKey = sourceKey;
        }
    }

    final String id;
    int partition = -1;
    int factCount;
    long lastActivity = Long.MIN_VALUE;
    final List<Fact> facts = new ArrayList<>(8);
    final List<Hold> holds = new ArrayList<>(2);
    final Map<Integer, Attempt> attempts = new HashMap<>(4);
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
    /** Its first facts or decisions are before the slice: it is not judged. */
    boolean partial;
    boolean queued;
    /** Judged as a whole: what is found about it from now on is reported at once. */
    boolean finalized;
    /** Violations waiting for the request to be judged whole (dropped if it turns out to have begun before the slice). */
    List<Violation> pending;

    RequestHistory(String id) {
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

    /** The first accepted fact of a kind, or null. */
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

    /** How the log names a page set in messages and compares them: {@code engine SIDE start+count ...}. */
    static String pages(String engine, ReleaseSide side, List<BlockRun> blocks) {
        StringBuilder b = new StringBuilder(engine).append(' ').append(side);
        for (BlockRun r : blocks) {
            b.append(' ').append(r.getStart()).append('+').append(r.getCount());
        }
        return b.toString();
    }
}
