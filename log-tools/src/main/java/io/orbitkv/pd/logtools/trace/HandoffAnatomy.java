package io.orbitkv.pd.logtools.trace;

import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.DecodeCompleted;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestAnswered;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferFailed;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.events.TransferStarted;
import io.orbitkv.pd.tracing.Hop;
import io.orbitkv.pd.tracing.Marks;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.OptionalLong;

/**
 * One request's handoff laid out on the wall clock, hop by hop ({@link Hop}), from the timing marks its records carry
 * (docs/topics.md, "Timing marks"): the proxy's admission and answer, the engines' facts, the decider's decisions
 * and the worker's reports. Each hop runs from a mark of one record to a mark of the next, so the hops from the fact
 * that completed the pair to the first token at the proxy add up exactly to that span. A hop whose marks are missing
 * (an older component, a request that ended early) is left out, never guessed.
 *
 * <p>The path has two shortcuts, each taken per request and read from the marks: an order issued ahead of the prefill
 * that the worker started from its engine's own fact ({@link Hop#PREFILL_TO_WORKER} instead of the decider's three hops),
 * and KV handed to the decode engine by its worker when the bytes landed ({@link Hop#LANDED_TO_ENGINE} instead of the
 * report's way through the decider). {@link #path} lists the hops of the path a request took.
 */
public final class HandoffAnatomy {

    /** One record of the request as far as timing goes: its decoded value and its marks. */
    public record Observation(Object event, Marks marks) { }

    /** One hop: from one mark to another (µs since the epoch, each on the clock of the process that marked it). */
    public record Span(Hop hop, long fromMicros, long toMicros) {
        public long micros() {
            return toMicros - fromMicros;
        }
    }

    private final List<Span> spans;
    private final long ttftMicros;
    private final long handoffMicros;
    private final long transferMicros;
    private final long transferBytes;
    private final long startMicros;
    private final String route;

    private HandoffAnatomy(List<Span> spans, long ttftMicros, long handoffMicros, long transferMicros, long transferBytes, long startMicros,
                           String route) {
        this.spans = List.copyOf(spans);
        this.ttftMicros = ttftMicros;
        this.handoffMicros = handoffMicros;
        this.transferMicros = transferMicros;
        this.transferBytes = transferBytes;
        this.startMicros = startMicros;
        this.route = route;
    }

    /** The anatomy of the request whose records (facts, decisions, its answer; any order) are {@code records}. */
    public static HandoffAnatomy of(List<Observation> records) {
        Map<Class<?>, Observation> first = new HashMap<>();
        Map<String, Observation> factsById = new HashMap<>();
        Map<String, List<Observation>> copies = new HashMap<>();
        Map<String, Observation> started = new HashMap<>();
        Map<String, Observation> failed = new HashMap<>();
        for (Observation o : records) {
            switch (o.event()) {
                case RequestEvent e -> {
                    factsById.putIfAbsent(e.getEventId(), o);
                    first.putIfAbsent(e.getPayload().getClass(), o);
                    if (e.getPayload() instanceof TransferStarted s) {
                        started.putIfAbsent(s.getOrderId() + "#" + s.getAttempt(), o);
                    } else if (e.getPayload() instanceof TransferFailed f) {
                        failed.putIfAbsent(f.getOrderId() + "#" + f.getAttempt(), o);
                    }
                }
                case Decision d -> {
                    first.putIfAbsent(d.getPayload().getClass(), o);
                    if (d.getPayload() instanceof TransferOrder t) {
                        // Every copy of an attempt's order (an order ahead of the prefill and its copy with the pages; a
                        // copy the decider wrote again): the one the worker acted on is picked below.
                        copies.computeIfAbsent(t.getOrderId() + "#" + t.getAttempt(), x -> new ArrayList<>()).add(o);
                    }
                }
                case RequestAnswered a -> first.putIfAbsent(RequestAnswered.class, o);
                case null, default -> { }
            }
        }
        Observation admitted = first.get(RequestAdmitted.class);
        Observation prefill = first.get(PrefillCompleted.class);
        Observation completed = first.get(TransferCompleted.class);
        Observation kvReady = first.get(KvReady.class);
        Observation decoded = first.get(DecodeCompleted.class);
        Observation answer = first.get(RequestAnswered.class);
        // The attempt that moved the KV (the only one, unless earlier attempts failed).
        Observation order = null;
        TransferCompleted done = completed == null ? null : (TransferCompleted) ((RequestEvent) completed.event()).getPayload();
        if (done != null) {
            List<Observation> c = copies.get(done.getOrderId() + "#" + done.getAttempt());
            order = c == null ? null : c.get(0);
        } else if (!copies.isEmpty()) {
            order = copies.values().stream().map(c -> c.get(0))
                    .max((a, b) -> Long.compare(((Decision) a.event()).getSeq(), ((Decision) b.event()).getSeq())).get();
        }
        // The worker's record of the measured attempt: its completion, else its start, else its failure report.
        Observation worker = completed != null ? completed : order == null ? null
                : started.containsKey(key(order)) ? started.get(key(order)) : failed.get(key(order));
        if (order != null && worker != null) {
            order = actedOn(copies.get(key(order)), worker.marks().get(Marks.IN).orElse(Long.MAX_VALUE), order);
        }
        Observation cause = order == null ? null : factsById.get(((Decision) order.event()).getCauseEventId());
        // Order-ahead: the worker started the order it held when its engine's own prefill fact reached it.
        boolean byEngine = worker != null && worker.marks().get(Marks.ENGINE_FACT).isPresent();
        // Ready on landing: the decode engine had its KV from its worker. Its fact says so (the worker's land mark carried
        // on); a log written before engines carried it is judged by time: the KV read before the decider's KvReady was out.
        boolean onLanding = decoded != null && completed != null && decoded.marks().get(Marks.KV_READY).isPresent()
                && (decoded.marks().get(Marks.LANDED).isPresent()
                || kvReady == null || kvReady.marks().get(Marks.OUT).orElse(Long.MAX_VALUE) > decoded.marks().get(Marks.KV_READY).getAsLong());

        List<Span> spans = new ArrayList<>();
        add(spans, Hop.ADMIT, admitted, Marks.IN, admitted, Marks.OUT);
        add(spans, Hop.PREFILL_REQUEST, admitted, Marks.OUT, prefill, Marks.IN);
        add(spans, Hop.PREFILL_QUEUE, prefill, Marks.IN, prefill, Marks.COMPUTE_START);
        add(spans, Hop.PREFILL_COMPUTE, prefill, Marks.COMPUTE_START, prefill, Marks.COMPUTE_END);
        add(spans, Hop.PREFILL_REPORT, prefill, Marks.COMPUTE_END, prefill, Marks.OUT);
        add(spans, Hop.PREFILL_ANSWER, prefill, Marks.OUT, answer, Marks.PREFILL_ANSWERED);
        if (byEngine) {
            add(spans, Hop.PREFILL_TO_WORKER, prefill, Marks.COMPUTE_END, worker, Marks.ENGINE_FACT);
        } else {
            add(spans, Hop.FACT_TO_DECIDER, cause, Marks.OUT, order, Marks.IN);
            add(spans, Hop.DECIDER_ORDER, order, Marks.IN, order, Marks.OUT);
            add(spans, Hop.ORDER_TO_WORKER, order, Marks.OUT, worker, Marks.IN);
        }
        add(spans, Hop.WORKER_QUEUE, worker, Marks.IN, worker, Marks.RUN);
        add(spans, Hop.TRANSFER_SETUP, completed, Marks.RUN, completed, Marks.CONNECTED);
        add(spans, Hop.TRANSFER_ADMISSION, completed, Marks.CONNECTED, completed, Marks.ADMITTED);
        add(spans, Hop.TRANSFER_WIRE, completed, Marks.ADMITTED, completed, Marks.WRITTEN);
        if (onLanding) {
            // The receiver hands its engine the KV when the last part lands, before or after the sender reads the ACK
            // (tcp: both follow the landing, over two sockets): apply ends at the earlier of the two, and the engine's
            // hop is what it waited beyond the ACK (0 when it heard first). The two still add up to w1 → kv.
            OptionalLong w1 = completed.marks().get(Marks.WRITTEN);
            OptionalLong ack = completed.marks().get(Marks.ACKED);
            OptionalLong kv = decoded.marks().get(Marks.KV_READY);
            if (w1.isPresent() && ack.isPresent() && kv.isPresent() && w1.getAsLong() > 0 && ack.getAsLong() > 0) {
                long landed = Math.min(ack.getAsLong(), kv.getAsLong());
                spans.add(new Span(Hop.TRANSFER_APPLY, w1.getAsLong(), landed));
                spans.add(new Span(Hop.LANDED_TO_ENGINE, landed, kv.getAsLong()));
            }
        } else {
            add(spans, Hop.TRANSFER_APPLY, completed, Marks.WRITTEN, completed, Marks.ACKED);
            add(spans, Hop.TRANSFER_REPORT, completed, Marks.ACKED, completed, Marks.OUT);
            add(spans, Hop.REPORT_TO_DECIDER, completed, Marks.OUT, kvReady, Marks.IN);
            add(spans, Hop.DECIDER_KV_READY, kvReady, Marks.IN, kvReady, Marks.OUT);
            add(spans, Hop.KV_READY_TO_ENGINE, kvReady, Marks.OUT, decoded, Marks.KV_READY);
        }
        add(spans, Hop.ENGINE_FIRST_TOKEN, decoded, Marks.KV_READY, decoded, Marks.FIRST_TOKEN);
        add(spans, Hop.FIRST_TOKEN_TO_PROXY, decoded, Marks.FIRST_TOKEN, answer, Marks.FIRST_TOKEN);

        long ttft = -1;
        long handoff = -1;
        String route = null;
        if (answer != null) {
            RequestAnswered a = (RequestAnswered) answer.event();
            ttft = a.getTtftUs() == null ? -1 : a.getTtftUs();
            handoff = a.getHandoffUs() == null ? -1 : a.getHandoffUs();
            route = a.getRoute();
        }
        long start = Long.MAX_VALUE;
        for (Observation o : records) {
            OptionalLong in = o.marks().get(Marks.IN);
            if (in.isPresent()) {
                start = Math.min(start, in.getAsLong());
            }
        }
        return new HandoffAnatomy(spans, ttft, handoff, done == null ? -1 : done.getDurationUs(), done == null ? -1 : done.getBytes(),
                start == Long.MAX_VALUE ? -1 : start, route);
    }

    /**
     * The copy of an order the worker acted on: the last one out before the worker took it in (an order ahead is acted
     * on when it arrives if the engine had already reported, else its copy with the pages; a repeated copy after the
     * worker started is not), or {@code fallback} when no copy is marked.
     */
    private static Observation actedOn(List<Observation> copies, long workerIn, Observation fallback) {
        Observation best = null;
        long bestOut = Long.MIN_VALUE;
        for (Observation c : copies) {
            long out = c.marks().get(Marks.OUT).orElse(0);
            if (out > 0 && out <= workerIn && out > bestOut) {
                best = c;
                bestOut = out;
            }
        }
        return best != null ? best : fallback;
    }

    private static String key(Observation order) {
        TransferOrder t = (TransferOrder) ((Decision) order.event()).getPayload();
        return t.getOrderId() + "#" + t.getAttempt();
    }

    private static void add(List<Span> spans, Hop hop, Observation from, String fromMark, Observation to, String toMark) {
        if (from == null || to == null) {
            return;
        }
        OptionalLong a = from.marks().get(fromMark);
        OptionalLong b = to.marks().get(toMark);
        if (a.isPresent() && b.isPresent() && a.getAsLong() > 0 && b.getAsLong() > 0) {
            spans.add(new Span(hop, a.getAsLong(), b.getAsLong()));
        }
    }

    /** The hops that could be measured, in the order the request crossed them. */
    public List<Span> spans() {
        return spans;
    }

    /** The hops from the prefill's end (or the fact that completed the pair) to the first token at the proxy, in order. */
    public static List<Hop> path(boolean byEngine, boolean onLanding) {
        List<Hop> p = new ArrayList<>();
        for (Hop h : Hop.values()) {
            boolean decider = h == Hop.FACT_TO_DECIDER || h == Hop.DECIDER_ORDER || h == Hop.ORDER_TO_WORKER;
            boolean report = h == Hop.TRANSFER_REPORT || h == Hop.REPORT_TO_DECIDER || h == Hop.DECIDER_KV_READY || h == Hop.KV_READY_TO_ENGINE;
            boolean skip = h.ordinal() < Hop.FACT_TO_DECIDER.ordinal()
                    || (h == Hop.PREFILL_TO_WORKER ? !byEngine : decider && byEngine)
                    || (h == Hop.LANDED_TO_ENGINE ? !onLanding : report && onLanding);
            if (!skip) {
                p.add(h);
            }
        }
        return p;
    }

    /** The hops of the path this request took ({@link #path(boolean, boolean)}). */
    public List<Hop> path() {
        return path(spans.stream().anyMatch(x -> x.hop() == Hop.PREFILL_TO_WORKER), spans.stream().anyMatch(x -> x.hop() == Hop.LANDED_TO_ENGINE));
    }

    /** The hop's span, if measured. */
    public OptionalLong micros(Hop hop) {
        for (Span s : spans) {
            if (s.hop() == hop) {
                return OptionalLong.of(s.micros());
            }
        }
        return OptionalLong.empty();
    }

    /** Time to first token as the proxy measured it (µs), or -1 without an answer record. */
    public long ttftMicros() {
        return ttftMicros;
    }

    /** Prefill answered → the decode engine's first byte at the proxy (µs), or -1. */
    public long handoffMicros() {
        return handoffMicros;
    }

    /** The push as the worker timed it (start → every byte acknowledged, µs), or -1 without a completed transfer. */
    public long transferMicros() {
        return transferMicros;
    }

    public long transferBytes() {
        return transferBytes;
    }

    /** The earliest {@code in} mark of the request's records (µs since the epoch), or -1. */
    public long startMicros() {
        return startMicros;
    }

    /** The proxy's route (pd, colocated, recomputed), or null without an answer record. */
    public String route() {
        return route;
    }
}
