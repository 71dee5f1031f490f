package io.orbitkv.pd.decider;

import io.orbitkv.pd.events.AbortTransfer;
import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.DecodeReady;
import io.orbitkv.pd.events.EngineEpochChanged;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.Tick;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferFailed;
import io.orbitkv.pd.events.TransferOrder;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

/**
 * Checks the decider's invariants on a trace: the facts fed in (with their dead-letter verdict) interleaved, in
 * processing order, with the decisions that came out. Used by {@link DeciderInvariantsPropertyTest}.
 *
 * <ol type="a">
 *   <li>exactly one RequestOutcome per request the decider kept state for (admitted, or facts that came before an
 *       admission that never came: FAILED "never admitted"), none for one whose every fact was refused;</li>
 *   <li>every accepted held page set (PrefillCompleted.source_blocks / DecodeReady.dest_blocks of a fact that was
 *       not dead-lettered, counted once per event id) released exactly once by a ReleaseDecided of the same
 *       engine, side and blocks; nothing released that was never held;</li>
 *   <li>no TransferOrder after the outcome;</li>
 *   <li>every order's lease epoch is the epoch of the accepted DecodeReady of its lease and destination pages;
 *       attempts 1, 2, … ≤ maxAttempts (an order issued ahead of the prefill may be sent once more, with its source
 *       pages, under the same attempt);</li>
 *   <li>no release of pages an order pushes into / reads from while an attempt may still push: every order of
 *       the request reported (completed / failed), or aborted and drain-grace past min(its deadline, the abort) (releases caused by an
 *       EngineEpochChanged of that engine are exempt: its memory is gone);</li>
 *   <li>decision seq 0, 1, 2, … and id {@code <request>/<seq>} per request.</li>
 * </ol>
 */
final class DeciderInvariants {

    /** One item of a trace, in processing order. */
    sealed interface Item permits Fact, Dec { }

    record Fact(long streamTime, RequestEvent event, boolean deadLettered) implements Item { }

    record Dec(Decision decision) implements Item { }

    private final DeciderPolicy policy;

    DeciderInvariants(DeciderPolicy policy) {
        this.policy = policy;
    }

    private static final class Order {
        TransferOrder order;
        boolean reported;
        Long abortedAt;

        Order(TransferOrder order) {
            this.order = order;
        }
    }

    private static final class Req {
        final String id;
        boolean admitted;
        /** A fact the decider keeps state for was accepted (one that may precede the admission). */
        boolean stored;
        int outcomes;
        int nextSeq;
        final Set<String> seenIds = new HashSet<>();
        final Map<String, Integer> held = new TreeMap<>();
        final Map<String, Integer> released = new TreeMap<>();
        final Map<String, Long> leaseEpochs = new HashMap<>(); // lease id + dest blocks -> epoch of accepted DecodeReady
        final Map<String, String> eventTypes = new HashMap<>();
        final Map<String, String> epochEngine = new HashMap<>(); // EngineEpochChanged event id -> engine
        final Map<Integer, Order> orders = new LinkedHashMap<>();
        int lastAttempt;

        Req(String id) {
            this.id = id;
        }
    }

    static String pages(String engine, ReleaseSide side, List<BlockRun> blocks) {
        StringBuilder b = new StringBuilder(engine).append(' ').append(side);
        for (BlockRun r : blocks) {
            b.append(' ').append(r.getStart()).append('+').append(r.getCount());
        }
        return b.toString();
    }

    /** Violations, each naming the request; empty when every invariant holds. */
    List<String> check(List<Item> trace) {
        Map<String, Req> reqs = new LinkedHashMap<>();
        List<String> bad = new ArrayList<>();
        for (Item item : trace) {
            switch (item) {
                case Fact f -> fact(reqs, f);
                case Dec d -> decision(reqs.computeIfAbsent(d.decision().getRequestId(), Req::new), d.decision(), bad);
            }
        }
        for (Req r : reqs.values()) {
            // every request the decider created state for ends with one outcome; a request known only by a fact that
            // was refused outright (dead-lettered, never stored) has none
            int want = r.admitted || r.stored ? 1 : 0;
            if (r.outcomes != want) {
                bad.add(r.id + ": (a) " + r.outcomes + " RequestOutcome(s) for a request " + (r.admitted ? "admitted" : "never admitted"));
            }
            Set<String> keys = new HashSet<>(r.held.keySet());
            keys.addAll(r.released.keySet());
            for (String k : keys) {
                int h = r.held.getOrDefault(k, 0);
                int rel = r.released.getOrDefault(k, 0);
                if (h != rel) {
                    bad.add(r.id + ": (b) pages [" + k + "] held " + h + "× but released " + rel + "×");
                }
            }
        }
        return bad;
    }

    private void fact(Map<String, Req> reqs, Fact f) {
        Object p = f.event().getPayload();
        if (p instanceof Tick) {
            return;
        }
        Req r = reqs.computeIfAbsent(f.event().getRequestId(), Req::new);
        // a redelivery (same event id) is ignored by the decider, whatever the verdict on the first delivery
        boolean first = r.seenIds.add(f.event().getEventId());
        if (f.deadLettered() || !first) {
            return;
        }
        r.eventTypes.put(f.event().getEventId(), p.getClass().getSimpleName());
        if (RequestStateMachine.mayPrecedeAdmission(p)) {
            r.stored = true;
        }
        switch (p) {
            case RequestAdmitted a -> r.admitted = true;
            case PrefillCompleted pc -> r.held.merge(pages(pc.getEngineId(), ReleaseSide.PREFILL, pc.getSourceBlocks()), 1, Integer::sum);
            case DecodeReady dr -> {
                r.held.merge(pages(dr.getEngineId(), ReleaseSide.DECODE, dr.getDestBlocks()), 1, Integer::sum);
                r.leaseEpochs.putIfAbsent(dr.getLeaseId() + " " + pages("", ReleaseSide.DECODE, dr.getDestBlocks()), dr.getLeaseEpoch());
            }
            case TransferCompleted tc -> settle(r, tc.getAttempt());
            case TransferFailed tf -> settle(r, tf.getAttempt());
            case EngineEpochChanged ec -> r.epochEngine.put(f.event().getEventId(), ec.getEngineId());
            default -> { }
        }
    }

    private static void settle(Req r, int attempt) {
        Order o = r.orders.get(attempt);
        if (o != null) {
            o.reported = true;
        }
    }

    private void decision(Req r, Decision d, List<String> bad) {
        String at = r.id + " decision " + d.getDecisionId() + " (" + d.getPayload().getClass().getSimpleName() + " @" + d.getStreamTimeMs() + ")";
        if (d.getSeq() != r.nextSeq || !d.getDecisionId().equals(r.id + "/" + d.getSeq())) {
            bad.add(at + ": (f) seq " + d.getSeq() + " where " + r.nextSeq + " was next");
        }
        r.nextSeq = d.getSeq() + 1;
        switch (d.getPayload()) {
            case RequestOutcome o -> r.outcomes++;
            case TransferOrder o -> {
                if (r.outcomes > 0) {
                    bad.add(at + ": (c) order after the outcome");
                }
                Long epoch = r.leaseEpochs.get(o.getLeaseId() + " " + pages("", ReleaseSide.DECODE, o.getDestBlocks()));
                if (epoch == null || epoch != o.getLeaseEpoch()) {
                    bad.add(at + ": (d) lease epoch " + o.getLeaseEpoch() + " but the accepted DecodeReady of that lease had " + epoch);
                }
                Order ahead = r.orders.get(o.getAttempt());
                if (ahead != null && ahead.order.getAwaitPrefill() && !o.getAwaitPrefill() && o.getAttempt() == r.lastAttempt
                        && ahead.order.getOrderId().equals(o.getOrderId())) {
                    ahead.order = o; // the order issued ahead of the prefill, sent again with its source pages
                    break;
                }
                if (o.getAttempt() != r.lastAttempt + 1 || o.getAttempt() > policy.maxAttempts()) {
                    bad.add(at + ": (d) attempt " + o.getAttempt() + " after attempt " + r.lastAttempt + " (max " + policy.maxAttempts() + ")");
                }
                r.lastAttempt = Math.max(r.lastAttempt, o.getAttempt());
                r.orders.put(o.getAttempt(), new Order(o));
            }
            case AbortTransfer a -> {
                Order o = r.orders.get(a.getAttempt());
                if (o == null) {
                    bad.add(at + ": abort of attempt " + a.getAttempt() + " that was never ordered");
                } else if (o.abortedAt == null) {
                    o.abortedAt = d.getStreamTimeMs();
                }
            }
            case ReleaseDecided rd -> {
                r.released.merge(pages(rd.getEngineId(), rd.getSide(), rd.getBlocks()), 1, Integer::sum);
                String cause = d.getCauseEventId();
                boolean engineGone = cause != null && rd.getEngineId().equals(r.epochEngine.get(cause));
                if (!engineGone) {
                    for (Order o : r.orders.values()) {
                        boolean touches = rd.getSide() == ReleaseSide.DECODE
                                ? o.order.getDestEngineId().equals(rd.getEngineId()) && o.order.getDestBlocks().equals(rd.getBlocks())
                                : o.order.getSourceEngineId().equals(rd.getEngineId()) && o.order.getSourceBlocks().equals(rd.getBlocks());
                        // an aborted attempt may push until the drain grace after its deadline, which the abort
                        // pulls in to the abort time (the receiver refuses pushes past deadline + drain)
                        boolean drained = o.reported || (o.abortedAt != null
                                && d.getStreamTimeMs() >= Math.min(o.order.getDeadlineMs(), o.abortedAt) + policy.drainGrace().toMillis());
                        if (touches && !drained) {
                            bad.add(at + ": (e) " + rd.getSide() + " pages released while attempt " + o.order.getAttempt()
                                    + " may still push (reported " + o.reported + ", aborted at " + o.abortedAt + ")");
                        }
                    }
                }
            }
            default -> { }
        }
    }
}
