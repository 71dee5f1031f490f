package io.orbitkv.pd.logtools.audit;

import static io.orbitkv.pd.logtools.audit.RuleChecker.time;

import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.logtools.audit.Observation.IssuedOrder;
import io.orbitkv.pd.logtools.audit.Observation.OrderDestination;
import io.orbitkv.pd.logtools.audit.Observation.OrderSource;
import io.orbitkv.pd.logtools.audit.Observation.PushAcknowledged;
import io.orbitkv.pd.logtools.audit.Observation.Released;
import io.orbitkv.pd.logtools.audit.Observation.ReleaseTouches;
import io.orbitkv.pd.logtools.audit.RequestHistory.Attempt;
import io.orbitkv.pd.logtools.audit.RequestHistory.Fact;
import io.orbitkv.pd.logtools.audit.RequestHistory.Hold;
import io.orbitkv.pd.logtools.audit.RequestHistory.Kind;
import java.util.Objects;

/**
 * The epoch rules ({@link Rule#STALE_EPOCH}, {@link Rule#PUSH_ACK_STALE_EPOCH}): fencing. An order and a decode
 * release must carry the lease epoch and instance epochs of the pages they name, as the accepted facts reported
 * them, and no push may land after its destination lease was released: the receiver must have refused it.
 */
final class EpochChecker implements RuleChecker {

    @Override
    public void check(RequestHistory r, Observation seen, Violations out) {
        switch (seen) {
            case OrderDestination(IssuedOrder o) -> destination(r, o, out);
            case OrderSource(IssuedOrder o) -> source(r, o, out);
            case Released rel -> {
                ReleaseDecided rd = rel.release().release();
                Hold hold = rel.hold();
                if (rd.getSide() == ReleaseSide.DECODE && rd.getLeaseEpoch() != null && hold.leaseId != null
                        && (rd.getLeaseEpoch() != hold.leaseEpoch || !Objects.equals(rd.getLeaseId(), hold.leaseId))) {
                    out.add(Rule.STALE_EPOCH, r.id, rel.release().where(), rel.release().what() + " names lease " + rd.getLeaseId() + "@"
                            + rd.getLeaseEpoch() + " but the pages are held under " + hold.leaseId + "@" + hold.leaseEpoch);
                }
            }
            case ReleaseTouches touch -> {
                Attempt a = touch.attempt();
                if (touch.release().release().getSide() == ReleaseSide.DECODE && a.ackedAt != null && a.ackedAt > touch.release().t()
                        && !a.staleAckReported) {
                    staleAck(r, a, a.dest != null ? a.dest.releasedAt : touch.release().t(), touch.release().where(), out);
                }
            }
            case PushAcknowledged ack -> {
                Attempt a = ack.attempt();
                if (a.dest != null && a.dest.releasedAt >= 0 && a.dest.releasedAt < a.ackedAt && !a.staleAckReported) {
                    staleAck(r, a, a.dest.releasedAt, ack.where(), out);
                }
            }
            default -> { }
        }
    }

    private static void destination(RequestHistory r, IssuedOrder io, Violations out) {
        TransferOrder o = io.order();
        Hold dest = io.dest();
        String what = io.what();
        if (dest == null) {
            out.add(Rule.STALE_EPOCH, r.id, io.where(), what + " names lease " + o.getLeaseId() + " on [" + io.destKey()
                    + "], which no accepted DecodeReady holds");
            return;
        }
        if (dest.leaseEpoch != o.getLeaseEpoch()) {
            out.add(Rule.STALE_EPOCH, r.id, io.where(), what + " carries lease epoch " + o.getLeaseEpoch() + " but lease " + o.getLeaseId()
                    + " has epoch " + dest.leaseEpoch + " (" + dest.fact.eventId + ")");
        }
        if (dest.instanceEpoch != o.getDestInstanceEpoch()) {
            out.add(Rule.STALE_EPOCH, r.id, io.where(), what + " names decode instance epoch " + o.getDestInstanceEpoch()
                    + " but the pages are held by instance epoch " + dest.instanceEpoch);
        }
        if (dest.releasedAt >= 0) {
            out.add(Rule.STALE_EPOCH, r.id, io.where(), what + " pushes into pages of lease " + o.getLeaseId() + " released at "
                    + time(dest.releasedAt));
        }
    }

    private static void source(RequestHistory r, IssuedOrder io, Violations out) {
        TransferOrder o = io.order();
        Hold src = io.source();
        String what = io.what();
        if (io.ahead()) {
            // issued ahead: it names no source pages (it pushes those its engine's PrefillCompleted reports)
        } else if (src == null) {
            out.add(Rule.STALE_EPOCH, r.id, io.where(), what + " reads [" + io.sourceKey() + "], which no accepted PrefillCompleted holds");
        } else {
            if (src.instanceEpoch != o.getSourceInstanceEpoch()) {
                out.add(Rule.STALE_EPOCH, r.id, io.where(), what + " names prefill instance epoch " + o.getSourceInstanceEpoch()
                        + " but the pages are held by instance epoch " + src.instanceEpoch);
            }
            if (src.releasedAt >= 0) {
                out.add(Rule.STALE_EPOCH, r.id, io.where(), what + " reads prefill pages released at " + time(src.releasedAt));
            }
        }
        for (Fact f : r.facts) {
            if (f.kind == Kind.EPOCH && !f.rejected && f.idx <= io.anchor()
                    && ((f.engine.equals(o.getDestEngineId()) && f.epoch > o.getDestInstanceEpoch())
                    || (!io.ahead() && f.engine.equals(o.getSourceEngineId()) && f.epoch > o.getSourceInstanceEpoch()))) {
                out.add(Rule.STALE_EPOCH, r.id, io.where(), what + " after " + f.eventId + ": engine " + f.engine + " moved past the epoch"
                        + " the order names");
                break;
            }
        }
    }

    /** {@code releasedAt} from the release itself: the order may name pages no accepted DecodeReady held ({@code a.dest} null). */
    private static void staleAck(RequestHistory r, Attempt a, long releasedAt, String where, Violations out) {
        a.staleAckReported = true;
        out.add(Rule.PUSH_ACK_STALE_EPOCH, r.id, where, "TransferCompleted of " + a.order.getOrderId() + " acknowledged at "
                + time(a.ackedAt) + ", after lease " + a.order.getLeaseId() + "@" + a.order.getLeaseEpoch() + " was released at "
                + time(releasedAt) + ": a push landed with a stale epoch");
    }
}
