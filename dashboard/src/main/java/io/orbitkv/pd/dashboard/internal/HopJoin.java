package io.orbitkv.pd.dashboard.internal;

import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.DecodeCompleted;
import io.orbitkv.pd.events.DecodeReady;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.tracing.Hop;
import io.orbitkv.pd.tracing.Marks;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * The hops of one request's handoff ({@link Hop}) as the dashboard reads its facts and decisions, in whatever order
 * the two topics deliver them: each record's timing marks ({@link Marks}) give the hops inside its writer at once, and
 * the marks that end or start a hop between two records are kept (a small string per request) until the other end
 * arrives. A hop is counted once. The proxy's own hops (its answer is on another topic) come from the proxy's
 * {@code /metrics}. Pure: the stats processor stores the state and records what comes out.
 */
final class HopJoin {

    /** One measured hop. */
    record Measured(Hop hop, long micros) { }

    /** The request's new state (null: nothing worth keeping) and the hops the record completed. */
    record Step(String state, List<Measured> hops) { }

    private HopJoin() { }

    /** A slot: a named mark of one of the request's records. */
    private static final String AD_OUT = "ad.out";
    private static final String PC_IN = "pc.in";
    private static final String PC_OUT = "pc.out";
    private static final String PC_C1 = "pc.c1";
    private static final String DR_OUT = "dr.out";
    private static final String ORDER_IN = "or.in";
    private static final String ORDER_OUT = "or.out";
    private static final String ORDER_ATTEMPT = "or.a";
    private static final String ORDER_CAUSE = "or.c"; // 1: the prefill fact completed the pair, 2: the decode-ready fact
    private static final String TC_IN = "tc.in";
    private static final String TC_OUT = "tc.out";
    private static final String TC_ATTEMPT = "tc.a";
    private static final String TC_ACK = "tc.ack";
    private static final String TC_EF = "tc.ef"; // the worker started on its engine's own prefill fact (engine API)
    private static final String KV_IN = "kv.in";
    private static final String KV_OUT = "kv.out";
    private static final String DC_KV = "dc.kv";
    private static final String DC_LAND = "dc.land"; // the decode engine had its KV from its worker on landing (engine API)
    private static final String SEEN = "seen";

    /** Folds one record into the request's {@code state} (null when none yet); {@code ts} is the record's timestamp. */
    static Step apply(String state, Object value, Marks m, long ts) {
        Map<String, Long> slots = new LinkedHashMap<>();
        Set<Hop> done = EnumSet.noneOf(Hop.class);
        parse(state, slots, done);
        slots.putIfAbsent(SEEN, ts);
        List<Measured> out = new ArrayList<>();
        switch (value) {
            case RequestEvent e -> {
                switch (e.getPayload()) {
                    case RequestAdmitted a -> {
                        inside(out, Hop.ADMIT, m, Marks.IN, Marks.OUT);
                        put(slots, AD_OUT, m, Marks.OUT);
                    }
                    case PrefillCompleted p -> {
                        inside(out, Hop.PREFILL_QUEUE, m, Marks.IN, Marks.COMPUTE_START);
                        inside(out, Hop.PREFILL_COMPUTE, m, Marks.COMPUTE_START, Marks.COMPUTE_END);
                        inside(out, Hop.PREFILL_REPORT, m, Marks.COMPUTE_END, Marks.OUT);
                        put(slots, PC_IN, m, Marks.IN);
                        put(slots, PC_OUT, m, Marks.OUT);
                        put(slots, PC_C1, m, Marks.COMPUTE_END);
                    }
                    case DecodeReady d -> put(slots, DR_OUT, m, Marks.OUT);
                    case TransferCompleted c -> {
                        inside(out, Hop.WORKER_QUEUE, m, Marks.IN, Marks.RUN);
                        inside(out, Hop.TRANSFER_SETUP, m, Marks.RUN, Marks.CONNECTED);
                        inside(out, Hop.TRANSFER_ADMISSION, m, Marks.CONNECTED, Marks.ADMITTED);
                        inside(out, Hop.TRANSFER_WIRE, m, Marks.ADMITTED, Marks.WRITTEN);
                        inside(out, Hop.TRANSFER_APPLY, m, Marks.WRITTEN, Marks.ACKED);
                        inside(out, Hop.TRANSFER_REPORT, m, Marks.ACKED, Marks.OUT);
                        put(slots, TC_IN, m, Marks.IN);
                        put(slots, TC_OUT, m, Marks.OUT);
                        put(slots, TC_ACK, m, Marks.ACKED);
                        put(slots, TC_EF, m, Marks.ENGINE_FACT);
                        slots.put(TC_ATTEMPT, (long) c.getAttempt());
                    }
                    case DecodeCompleted d -> {
                        inside(out, Hop.ENGINE_FIRST_TOKEN, m, Marks.KV_READY, Marks.FIRST_TOKEN);
                        put(slots, DC_KV, m, Marks.KV_READY);
                        put(slots, DC_LAND, m, Marks.LANDED);
                    }
                    default -> { }
                }
            }
            case Decision d -> {
                switch (d.getPayload()) {
                    case TransferOrder o when o.getAwaitPrefill() -> { } // ahead of the prefill: its copy with the pages is the order timed
                    case TransferOrder o -> {
                        inside(out, Hop.DECIDER_ORDER, m, Marks.IN, Marks.OUT);
                        put(slots, ORDER_IN, m, Marks.IN);
                        put(slots, ORDER_OUT, m, Marks.OUT);
                        slots.put(ORDER_ATTEMPT, (long) o.getAttempt());
                        String cause = d.getCauseEventId();
                        slots.put(ORDER_CAUSE, cause == null ? 0L : cause.endsWith("/prefill-completed") ? 1L : cause.endsWith("/decode-ready") ? 2L : 0L);
                    }
                    case KvReady k -> {
                        inside(out, Hop.DECIDER_KV_READY, m, Marks.IN, Marks.OUT);
                        put(slots, KV_IN, m, Marks.IN);
                        put(slots, KV_OUT, m, Marks.OUT);
                    }
                    default -> { }
                }
            }
            case null, default -> { }
        }
        between(out, done, slots, Hop.PREFILL_REQUEST, AD_OUT, PC_IN);
        // Which path the handoff took, as the anatomy reads it: the worker's report says whether it started on its engine's
        // own fact, the decode engine's whether its worker handed it the KV on landing. The hops of the other path are
        // beside this handoff: marked done, not counted. Each path's hops wait until the record that tells the path is in.
        if (slots.containsKey(TC_IN)) {
            if (slots.containsKey(TC_EF)) {
                done.add(Hop.FACT_TO_DECIDER);
                done.add(Hop.ORDER_TO_WORKER);
                between(out, done, slots, Hop.PREFILL_TO_WORKER, PC_C1, TC_EF);
            } else {
                long cause = slots.getOrDefault(ORDER_CAUSE, 0L);
                between(out, done, slots, Hop.FACT_TO_DECIDER, cause == 1 ? PC_OUT : cause == 2 ? DR_OUT : null, ORDER_IN);
                if (slots.containsKey(ORDER_ATTEMPT) && slots.get(ORDER_ATTEMPT).equals(slots.get(TC_ATTEMPT))) {
                    between(out, done, slots, Hop.ORDER_TO_WORKER, ORDER_OUT, TC_IN); // the attempt that moved the KV
                }
            }
        }
        if (slots.containsKey(DC_KV)) {
            if (slots.containsKey(DC_LAND)) {
                done.add(Hop.REPORT_TO_DECIDER);
                done.add(Hop.KV_READY_TO_ENGINE);
                landed(out, done, slots);
            } else {
                between(out, done, slots, Hop.REPORT_TO_DECIDER, TC_OUT, KV_IN);
                between(out, done, slots, Hop.KV_READY_TO_ENGINE, KV_OUT, DC_KV);
            }
        }
        boolean complete = done.containsAll(EnumSet.of(Hop.FACT_TO_DECIDER, Hop.ORDER_TO_WORKER, Hop.REPORT_TO_DECIDER, Hop.KV_READY_TO_ENGINE))
                && (!slots.containsKey(TC_EF) || done.contains(Hop.PREFILL_TO_WORKER))
                && (!slots.containsKey(DC_LAND) || done.contains(Hop.LANDED_TO_ENGINE));
        return new Step(complete ? null : format(slots, done), out);
    }

    /** When the request's state was first seen (for the time-to-live purge), or -1. */
    static long seen(String state) {
        Map<String, Long> slots = new LinkedHashMap<>();
        parse(state, slots, EnumSet.noneOf(Hop.class));
        return slots.getOrDefault(SEEN, -1L);
    }

    private static void inside(List<Measured> out, Hop hop, Marks m, String from, String to) {
        long a = m.get(from).orElse(0);
        long b = m.get(to).orElse(0);
        if (a > 0 && b >= a) {
            out.add(new Measured(hop, b - a));
        }
    }

    private static void put(Map<String, Long> slots, String slot, Marks m, String mark) {
        m.get(mark).ifPresent(v -> slots.put(slot, v));
    }

    /**
     * Ready on landing, as the anatomy measures it: the bytes landed at the earlier of the sender's ACK and the engine's
     * notice, and the hop is what the engine waited beyond the ACK (0 when it heard first).
     */
    private static void landed(List<Measured> out, Set<Hop> done, Map<String, Long> slots) {
        Long ack = slots.get(TC_ACK);
        Long kv = slots.get(DC_KV);
        if (done.contains(Hop.LANDED_TO_ENGINE) || ack == null || kv == null) {
            return;
        }
        done.add(Hop.LANDED_TO_ENGINE);
        out.add(new Measured(Hop.LANDED_TO_ENGINE, kv - Math.min(ack, kv)));
    }

    private static void between(List<Measured> out, Set<Hop> done, Map<String, Long> slots, Hop hop, String from, String to) {
        if (from == null || done.contains(hop)) {
            return;
        }
        Long a = slots.get(from);
        Long b = slots.get(to);
        if (a != null && b != null) {
            done.add(hop);
            if (b >= a) {
                out.add(new Measured(hop, b - a));
            }
        }
    }

    private static void parse(String state, Map<String, Long> slots, Set<Hop> done) {
        if (state == null || state.isEmpty()) {
            return;
        }
        int bar = state.indexOf('|');
        String s = bar < 0 ? state : state.substring(0, bar);
        for (String kv : s.split(";")) {
            int eq = kv.indexOf('=');
            if (eq > 0) {
                try {
                    slots.put(kv.substring(0, eq), Long.parseLong(kv.substring(eq + 1)));
                } catch (NumberFormatException e) {
                    // a damaged entry: that slot is simply missing
                }
            }
        }
        if (bar >= 0) {
            for (String h : state.substring(bar + 1).split(",")) {
                for (Hop hop : Hop.values()) {
                    if (hop.key().equals(h)) {
                        done.add(hop);
                    }
                }
            }
        }
    }

    private static String format(Map<String, Long> slots, Set<Hop> done) {
        StringBuilder b = new StringBuilder();
        slots.forEach((k, v) -> b.append(b.isEmpty() ? "" : ";").append(k).append('=').append(v));
        b.append('|');
        boolean first = true;
        for (Hop h : done) {
            b.append(first ? "" : ",").append(h.key());
            first = false;
        }
        return b.toString();
    }
}
