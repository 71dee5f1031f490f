package io.orbitkv.pd.dashboard.internal;

import static io.orbitkv.pd.dashboard.internal.StatsKeys.*;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.dashboard.stats.Aggregate;
import io.orbitkv.pd.dashboard.stats.LogHistogram;
import io.orbitkv.pd.dashboard.stats.StatsWindow;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.TreeSet;

/**
 * Turns the partial aggregates of every task of every instance into what the API answers and the page shows: a pure
 * function (no Kafka), so the merge and the numbers are tested on their own. Partials of the same window and key are
 * added; the totals of the range are the merge of all its windows, and percentiles are computed once, from the merged
 * histograms. Durations are reported in milliseconds (3 decimals: the histograms keep microseconds), rates per second
 * of the range, GB/s in decimal gigabytes.
 */
public final class Overview {

    private static final ObjectMapper JSON = new ObjectMapper();

    /** One task's (or one instance's) aggregate of one key in one window. */
    public record Partial(long start, String key, Aggregate aggregate) { }

    private Overview() { }

    /**
     * @param window       the window size the range is made of
     * @param from         range start (aligned down to a window start)
     * @param to           range end, exclusive (aligned up)
     * @param partials     aggregates from every task and instance, any order; those outside the range are ignored
     * @param inflight     in-flight requests per engine, summed over instances
     * @param failures     recent failures from every instance (JSON objects with a {@code time})
     * @param traceCommand the command a failure links to, {@code {id}} replaced by the request id
     * @param maxFailures  how many of the newest failures in the range to list
     */
    public static ObjectNode build(StatsWindow window, long fromMs, long toMs, Collection<Partial> partials, Map<String, Long> inflight,
                                   Collection<? extends JsonNode> failures, String traceCommand, int maxFailures) {
        long from = window.start(fromMs);
        long to = Math.max(from + window.sizeMs(), window.start(toMs - 1) + window.sizeMs());
        TreeMap<Long, Map<String, Aggregate>> byWindow = new TreeMap<>();
        Map<String, Aggregate> totals = new TreeMap<>();
        for (Partial p : partials) {
            if (p.start() < from || p.start() >= to) {
                continue;
            }
            byWindow.computeIfAbsent(p.start(), k -> new HashMap<>()).computeIfAbsent(p.key(), k -> new Aggregate()).merge(p.aggregate());
            totals.computeIfAbsent(p.key(), k -> new Aggregate()).merge(p.aggregate());
        }
        double spanSeconds = (to - from) / 1000.0;
        ObjectNode out = JSON.createObjectNode();
        out.put("window", window.label()).put("window_ms", window.sizeMs()).put("from", from).put("to", to);
        out.set("totals", totals(totals, spanSeconds));
        ArrayNode series = out.putArray("series");
        for (long start : window.starts(from, to)) {
            series.add(seriesPoint(start, byWindow.getOrDefault(start, Map.of()), window.sizeMs() / 1000.0));
        }
        out.set("engines", engines(totals, inflight, spanSeconds));
        out.set("failures", failures(failures, from, to, traceCommand, maxFailures));
        return out;
    }

    private static ObjectNode totals(Map<String, Aggregate> totals, double spanSeconds) {
        Aggregate outcomes = get(totals, OUTCOMES);
        Aggregate transfers = get(totals, TRANSFERS);
        Aggregate orders = get(totals, ORDERS);
        ObjectNode t = JSON.createObjectNode();
        t.put("admitted", get(totals, REQUESTS).counter(ADMITTED));
        ObjectNode kinds = t.putObject("outcomes");
        long handoffs = 0;
        for (String k : KINDS) {
            kinds.put(k, outcomes.counter(k));
            handoffs += outcomes.counter(k);
        }
        t.put("handoffs", handoffs).put("handoffs_per_s", round(handoffs / spanSeconds, 3))
                .put("completed_per_s", round(outcomes.counter(KINDS[0]) / spanSeconds, 3))
                .put("kv_bytes", outcomes.counter(KV_BYTES)).put("attempts", outcomes.counter(ATTEMPTS))
                .put("orders", orders.counter(ORDERS_COUNT)).put("retries", orders.counter(RETRIES))
                .put("rejected_inputs", get(totals, INPUTS).counter(REJECTED_INPUTS));
        LogHistogram duration = transfers.histogram(H_TRANSFER);
        long bytes = transfers.counter(BYTES);
        t.putObject("transfer").put("completed", transfers.counter(COMPLETED)).put("failed", transfers.counter(FAILED))
                .put("failed_retriable", transfers.counter(FAILED_RETRIABLE)).put("bytes", bytes)
                .put("gbps", round(bytes / spanSeconds / 1e9, 4))
                .put("gbps_while_transferring", duration.sum() == 0 ? 0.0 : round(bytes / (duration.sum() / 1e6) / 1e9, 4));
        ObjectNode latency = t.putObject("latency_ms");
        latency.set("handoff", summary(outcomes.histogram(H_HANDOFF)));
        latency.set("decision", summary(orders.histogram(H_DECISION)));
        latency.set("transfer", summary(duration));
        latency.set("prefill", summary(outcomes.histogram(H_PREFILL)));
        latency.set("decode_ready", summary(outcomes.histogram(H_DECODE_READY)));
        latency.set("decode", summary(outcomes.histogram(H_DECODE)));
        latency.set("end_to_end", summary(outcomes.histogram(H_END_TO_END)));
        // The handoff hop by hop (wall clock, from the records' timing marks), in the order a request crosses them.
        Aggregate hops = get(totals, HOPS);
        ObjectNode hopNode = t.putObject("hops_ms");
        for (io.orbitkv.pd.tracing.Hop h : io.orbitkv.pd.tracing.Hop.values()) {
            LogHistogram hh = hops.histogram(h.key());
            if (hh.count() > 0) {
                hopNode.set(h.key(), summary(hh));
            }
        }
        ArrayNode reasons = t.putArray("failures_by_reason");
        List<Map.Entry<String, Long>> rs = new ArrayList<>(get(totals, FAILURES).counters().entrySet());
        rs.sort(Map.Entry.<String, Long>comparingByValue().reversed().thenComparing(Map.Entry.comparingByKey()));
        for (Map.Entry<String, Long> r : rs) {
            String[] parts = r.getKey().split("\\|", 3);
            reasons.addObject().put("source", parts[0]).put("kind", parts.length > 1 ? parts[1] : "").put("reason", parts.length > 2 ? parts[2] : "")
                    .put("count", r.getValue());
        }
        return t;
    }

    private static ObjectNode seriesPoint(long start, Map<String, Aggregate> keys, double windowSeconds) {
        Aggregate outcomes = get(keys, OUTCOMES);
        Aggregate transfers = get(keys, TRANSFERS);
        ObjectNode p = JSON.createObjectNode();
        p.put("start", start);
        ObjectNode kinds = p.putObject("outcomes");
        long handoffs = 0;
        for (String k : KINDS) {
            kinds.put(k, outcomes.counter(k));
            handoffs += outcomes.counter(k);
        }
        p.put("handoffs", handoffs).put("per_s", round(handoffs / windowSeconds, 3))
                .put("transfer_bytes", transfers.counter(BYTES)).put("gbps", round(transfers.counter(BYTES) / windowSeconds / 1e9, 4))
                .put("transfer_failed", transfers.counter(FAILED));
        p.set("handoff", summary(outcomes.histogram(H_HANDOFF)));
        p.set("decision", summary(get(keys, ORDERS).histogram(H_DECISION)));
        p.set("transfer", summary(transfers.histogram(H_TRANSFER)));
        return p;
    }

    private static ObjectNode engines(Map<String, Aggregate> totals, Map<String, Long> inflight, double spanSeconds) {
        TreeSet<String> names = new TreeSet<>(inflight.keySet());
        totals.keySet().stream().filter(k -> k.startsWith(ENGINE_PREFIX)).map(k -> k.substring(ENGINE_PREFIX.length())).forEach(names::add);
        ObjectNode out = JSON.createObjectNode();
        for (String name : names) {
            Aggregate a = get(totals, ENGINE_PREFIX + name);
            long handoffs = 0;
            for (String k : KINDS) {
                handoffs += a.counter(k);
            }
            long completed = a.counter(KINDS[0]);
            String roles = a.counter(AS_PREFILL) > 0 && a.counter(AS_DECODE) > 0 ? "prefill+decode"
                    : a.counter(AS_PREFILL) > 0 ? "prefill" : a.counter(AS_DECODE) > 0 ? "decode" : "-";
            LogHistogram h = a.histogram(H_HANDOFF);
            ObjectNode e = out.putObject(name);
            e.put("roles", roles).put("in_flight", inflight.getOrDefault(name, 0L)).put("handoffs", handoffs)
                    .put("per_s", round(handoffs / spanSeconds, 3)).put("completed", completed).put("not_completed", handoffs - completed)
                    .put("transfer_failed", a.counter(TRANSFER_FAILED)).put("kv_bytes", a.counter(KV_BYTES));
            putMs(e, "handoff_p50", h, 50);
            putMs(e, "handoff_p99", h, 99);
            a.withPrefix(FAIL_PREFIX).entrySet().stream()
                    .max(Map.Entry.<String, Long>comparingByValue().thenComparing(Map.Entry.comparingByKey(Comparator.reverseOrder())))
                    .ifPresentOrElse(f -> e.put("top_failure", f.getKey() + " (" + f.getValue() + ")"), () -> e.put("top_failure", ""));
        }
        return out;
    }

    private static ArrayNode failures(Collection<? extends JsonNode> failures, long from, long to, String traceCommand, int max) {
        List<JsonNode> inRange = new ArrayList<>();
        for (JsonNode f : failures) {
            long t = f.path("time").asLong(-1);
            if (t >= from && t < to) {
                inRange.add(f);
            }
        }
        inRange.sort(Comparator.<JsonNode>comparingLong(f -> f.path("time").asLong()).reversed()
                .thenComparing(f -> f.path("request_id").asText()).thenComparing(f -> f.path("source").asText()));
        ArrayNode out = JSON.createArrayNode();
        for (JsonNode f : inRange.subList(0, Math.min(max, inRange.size()))) {
            ObjectNode copy = f.deepCopy();
            copy.put("trace_command", traceCommand.replace("{id}", f.path("request_id").asText()));
            out.add(copy);
        }
        return out;
    }

    /** count, p50, p90, p99, max, mean in ms; percentiles null when empty. */
    public static ObjectNode summary(LogHistogram h) {
        ObjectNode s = JSON.createObjectNode();
        s.put("count", h.count());
        for (int p : new int[] {50, 90, 99}) {
            putMs(s, "p" + p, h, p);
        }
        if (h.count() == 0) {
            s.putNull("max");
            s.putNull("mean");
        } else {
            s.put("max", round(h.max() / 1000.0, 3));
            s.put("mean", round(h.mean() / 1000.0, 3));
        }
        return s;
    }

    private static void putMs(ObjectNode n, String field, LogHistogram h, double p) {
        if (h.count() == 0) {
            n.putNull(field);
        } else {
            n.put(field, round(h.percentile(p) / 1000.0, 3));
        }
    }

    private static Aggregate get(Map<String, Aggregate> m, String key) {
        Aggregate a = m.get(key);
        return a == null ? new Aggregate() : a;
    }

    static double round(double v, int decimals) {
        if (!Double.isFinite(v)) {
            return 0.0;
        }
        double f = Math.pow(10, decimals);
        return Math.round(v * f) / f;
    }
}
