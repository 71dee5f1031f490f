package io.orbitkv.pd.logtools.audit;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.logtools.audit.Observation.Ended;
import io.orbitkv.pd.logtools.audit.Observation.PushAcknowledged;
import io.orbitkv.pd.logtools.audit.RequestHistory.Attempt;
import io.orbitkv.pd.logtools.audit.RequestHistory.Fact;
import io.orbitkv.pd.logtools.audit.RequestHistory.Kind;
import java.util.Map;

/**
 * The transfer rule ({@link Rule#PUSH_PARTIAL}): a push that landed moved its order's destination pages whole — every
 * page in every layer — and a push of an order issued ahead of its prefill (which a worker may send layer by layer while
 * the prefill computes, docs/worker.md) landed for a prefill the source engine reported complete. Either way the decode
 * engine was handed a whole KV, never a part of one. The receiver's piece count makes this so; this rule checks it from
 * the log, where a push is one {@code TransferCompleted} with its bytes.
 */
final class TransferChecker implements RuleChecker {

    @Override
    public void check(RequestHistory r, Observation seen, Violations out) {
        switch (seen) {
            case PushAcknowledged(Attempt a, long bytes, String where) -> {
                long expected = bytesOf(a.order);
                if (expected > 0 && bytes != expected) {
                    out.add(Rule.PUSH_PARTIAL, r.id, where, "TransferCompleted of " + a.order.getOrderId() + " attempt " + a.order.getAttempt()
                            + " says " + bytes + " bytes moved; its order's " + blocks(a.order) + " destination pages in every layer are "
                            + expected + " bytes");
                }
            }
            case Ended e when !e.inFlight() -> {
                for (Map.Entry<Integer, Attempt> en : r.attempts.entrySet()) {
                    Attempt a = en.getValue();
                    if (a.ackedAt != null && a.ahead && !prefillReported(r)) {
                        out.add(Rule.PUSH_PARTIAL, r.id, "request " + r.id, "TransferCompleted of " + a.order.getOrderId() + " attempt "
                                + en.getKey() + ", an order ahead of its prefill, landed but the source never reported the prefill complete"
                                + " (a push sent layer by layer must end with the prefill's last layer)");
                    }
                }
            }
            default -> { }
        }
    }

    private static boolean prefillReported(RequestHistory r) {
        for (Fact f : r.facts) {
            if (f.kind == Kind.PREFILL) {
                return true;
            }
        }
        return false;
    }

    private static long blocks(TransferOrder o) {
        long n = 0;
        for (BlockRun run : o.getDestBlocks()) {
            n += run.getCount();
        }
        return n;
    }

    /** The bytes the order's destination pages hold in every layer; 0 when the order carries no layout to tell. */
    private static long bytesOf(TransferOrder o) {
        if (o.getLayout() == null) {
            return 0;
        }
        try {
            return blocks(o) * KvGeometry.of(o.getLayout()).bytesPerBlock();
        } catch (IllegalArgumentException e) {
            return 0; // a layout the validator would refuse: judged elsewhere
        }
    }
}
