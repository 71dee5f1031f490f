package io.orbitkv.pd.logtools.audit;

import com.fasterxml.jackson.core.JsonGenerator;
import io.orbitkv.pd.logtools.LogSlice;
import io.orbitkv.pd.logtools.TopicRole;
import io.orbitkv.pd.logtools.internal.JsonReport;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;

/**
 * What an audit found: counts of what the log holds, and every violation (each listed up to a limit, all
 * counted per rule). Filled by {@link Auditor}; rendered as text for a terminal or as one JSON document.
 */
public final class AuditReport {

    /** A record that did not decode. */
    public record Undecodable(String where, String reason) { }

    final LogSlice slice;
    final int maxListed;
    final Map<TopicRole, Long> records = new EnumMap<>(TopicRole.class);
    final Map<TopicRole, Long> undecodable = new EnumMap<>(TopicRole.class);
    final List<Undecodable> undecodableSamples = new ArrayList<>();
    long streamTimeMarks;
    final Map<String, Long> factTypes = new TreeMap<>();
    final Map<String, Long> decisionTypes = new TreeMap<>();
    final Map<String, Long> outcomes = new TreeMap<>();
    final Map<Integer, Long> attempts = new TreeMap<>();
    final Map<String, Long> deadLetters = new TreeMap<>();
    long requests;
    long admitted;
    long checked;
    long openAtEnd;
    long partial;
    long withoutFacts;
    long pagesHeld;
    long pagesReleased;
    long pendingReleases;
    long rejectedInputs;
    long keyMismatches;
    long duplicateFacts;
    long duplicateDecisions;
    long evicted;
    long peakOpenRequests;
    final Map<Rule, Long> violationsByRule = new EnumMap<>(Rule.class);
    final List<Violation> violations = new ArrayList<>();
    long elapsedNanos;

    AuditReport(LogSlice slice, int maxListed) {
        this.slice = slice;
        this.maxListed = maxListed;
    }

    void add(Violation v) {
        violationsByRule.merge(v.rule(), 1L, Long::sum);
        if (violations.size() < maxListed) {
            violations.add(v);
        }
    }

    /** Every violation found (may exceed {@link #violations()}, which lists at most the limit). */
    public long violationCount() {
        return violationsByRule.values().stream().mapToLong(Long::longValue).sum();
    }

    public boolean clean() {
        return violationCount() == 0;
    }

    public List<Violation> violations() {
        return List.copyOf(violations);
    }

    public Map<Rule, Long> violationsByRule() {
        return Map.copyOf(violationsByRule);
    }

    public long recordCount() {
        return records.values().stream().mapToLong(Long::longValue).sum();
    }

    public long undecodableCount() {
        return undecodable.values().stream().mapToLong(Long::longValue).sum();
    }

    public List<Undecodable> undecodableSamples() {
        return List.copyOf(undecodableSamples);
    }

    public long requests() {
        return requests;
    }

    public long admitted() {
        return admitted;
    }

    /** Requests whose invariants were checked (not partial, not without facts). */
    public long checked() {
        return checked;
    }

    /** Admitted requests still in flight at the end of the slice (within their deadlines). */
    public long openAtEnd() {
        return openAtEnd;
    }

    /** Requests that began before the slice (left out of the checks). */
    public long partial() {
        return partial;
    }

    public Map<String, Long> outcomes() {
        return Map.copyOf(outcomes);
    }

    public long pagesHeld() {
        return pagesHeld;
    }

    public long pagesReleased() {
        return pagesReleased;
    }

    public long elapsedNanos() {
        return elapsedNanos;
    }

    /** Records per second of the whole audit (reading, decoding, checking). */
    public double recordsPerSecond() {
        return elapsedNanos == 0 ? 0 : recordCount() / (elapsedNanos / 1e9);
    }

    // ------------------------------------------------------------------------------------------------ text

    public void writeText(PrintStream out) {
        out.printf(Locale.ROOT, "audit of %s%s%n", slice.origin(), slice.filter() == null ? "" : " (filtered: " + slice.filter() + ")");
        StringBuilder recs = new StringBuilder();
        for (Map.Entry<TopicRole, Long> e : records.entrySet()) {
            recs.append(recs.isEmpty() ? "" : ", ").append(e.getKey().id()).append(' ').append(n(e.getValue()));
        }
        out.printf(Locale.ROOT, "  read       %s records in %.1f s (%s records/s): %s%n", n(recordCount()), elapsedNanos / 1e9,
                n((long) recordsPerSecond()), recs);
        if (undecodableCount() > 0) {
            out.printf(Locale.ROOT, "  undecodable %s records (facts are dead-lettered by the decider; first %d below)%n", n(undecodableCount()),
                    undecodableSamples.size());
        }
        out.printf(Locale.ROOT, "  requests   %s seen, %s admitted, %s checked; %s in flight at the end of the log, %s began before the slice%s%n",
                n(requests), n(admitted), n(checked), n(openAtEnd), n(partial), withoutFacts > 0 ? ", " + n(withoutFacts)
                        + " with decisions but no facts in the slice" : "");
        out.printf(Locale.ROOT, "  outcomes   %s%n", outcomes.isEmpty() ? "none" : join(outcomes));
        out.printf(Locale.ROOT, "  memory     at most %s requests held at once (finished ones are dropped a deadline-span after their last event)%n",
                n(peakOpenRequests));
        out.printf(Locale.ROOT, "  pages      %s page sets held, %s released%s%n", n(pagesHeld), n(pagesReleased),
                pendingReleases > 0 ? ", " + n(pendingReleases) + " release(s) pending at the end of the log" : "");
        StringBuilder att = new StringBuilder();
        attempts.forEach((a, c) -> att.append(att.isEmpty() ? "" : ", ").append("attempt ").append(a).append(": ").append(n(c)));
        out.printf(Locale.ROOT, "  orders     %s (%s); %s rejected inputs; dead letters %s%n", n(attempts.values().stream().mapToLong(Long::longValue).sum()),
                att.isEmpty() ? "none" : att, n(rejectedInputs), deadLetters.isEmpty() ? "none" : join(deadLetters));
        if (duplicateFacts + duplicateDecisions + keyMismatches > 0) {
            out.printf(Locale.ROOT, "  repeats    %s redelivered facts, %s identical redelivered decisions, %s facts keyed by another id%n",
                    n(duplicateFacts), n(duplicateDecisions), n(keyMismatches));
        }
        out.println();
        out.printf("  %-26s %-12s %10s  %s%n", "RULE", "GROUP", "VIOLATIONS", "WHAT IT MEANS");
        for (Rule r : Rule.values()) {
            out.printf(Locale.ROOT, "  %-26s %-12s %10s  %s%n", r, r.group(), n(violationsByRule.getOrDefault(r, 0L)), r.description());
        }
        if (!undecodableSamples.isEmpty()) {
            out.println();
            out.println("undecodable records:");
            undecodableSamples.forEach(u -> out.println("  " + u.where() + "  " + u.reason()));
        }
        if (!violations.isEmpty()) {
            out.println();
            out.printf(Locale.ROOT, "violations%s:%n", violationCount() > violations.size() ? " (first " + violations.size() + " of "
                    + n(violationCount()) + "; --max-violations shows more)" : "");
            for (Violation v : violations) {
                out.printf("  %-24s %-24s %-30s %s%n", v.requestId(), v.rule(), v.where(), v.message());
            }
        }
        out.println();
        out.println(clean() ? "CLEAN: every invariant holds for " + n(checked) + " request(s)."
                : "VIOLATIONS: " + n(violationCount()) + " in " + violationsByRule.size() + " rule(s).");
    }

    private static String join(Map<String, Long> m) {
        StringBuilder b = new StringBuilder();
        m.forEach((k, v) -> b.append(b.isEmpty() ? "" : ", ").append(k).append(' ').append(n(v)));
        return b.toString();
    }

    private static String n(long v) {
        return String.format(Locale.ROOT, "%,d", v);
    }

    // ------------------------------------------------------------------------------------------------ JSON

    public void writeJson(OutputStream os) {
        JsonReport.write(os, g -> {
            g.writeStringField("origin", slice.origin());
            g.writeStringField("filter", slice.filter());
            g.writeBooleanField("clean", clean());
            g.writeNumberField("violations_total", violationCount());
            g.writeNumberField("elapsed_ms", elapsedNanos / 1_000_000);
            g.writeNumberField("records_per_second", Math.round(recordsPerSecond()));
            g.writeObjectFieldStart("records");
            for (Map.Entry<TopicRole, Long> e : records.entrySet()) {
                g.writeNumberField(e.getKey().id(), e.getValue());
            }
            g.writeEndObject();
            g.writeNumberField("stream_time_marks", streamTimeMarks);
            g.writeObjectFieldStart("undecodable");
            for (Map.Entry<TopicRole, Long> e : undecodable.entrySet()) {
                g.writeNumberField(e.getKey().id(), e.getValue());
            }
            g.writeEndObject();
            g.writeArrayFieldStart("undecodable_samples");
            for (Undecodable u : undecodableSamples) {
                g.writeStartObject();
                g.writeStringField("where", u.where());
                g.writeStringField("reason", u.reason());
                g.writeEndObject();
            }
            g.writeEndArray();
            g.writeObjectFieldStart("requests");
            g.writeNumberField("seen", requests);
            g.writeNumberField("admitted", admitted);
            g.writeNumberField("checked", checked);
            g.writeNumberField("open_at_end", openAtEnd);
            g.writeNumberField("partial", partial);
            g.writeNumberField("without_facts", withoutFacts);
            g.writeNumberField("peak_held", peakOpenRequests);
            g.writeEndObject();
            map(g, "outcomes", outcomes);
            g.writeObjectFieldStart("pages");
            g.writeNumberField("held", pagesHeld);
            g.writeNumberField("released", pagesReleased);
            g.writeNumberField("pending_at_end", pendingReleases);
            g.writeEndObject();
            g.writeObjectFieldStart("orders_by_attempt");
            for (Map.Entry<Integer, Long> e : attempts.entrySet()) {
                g.writeNumberField(Integer.toString(e.getKey()), e.getValue());
            }
            g.writeEndObject();
            map(g, "facts", factTypes);
            map(g, "decisions", decisionTypes);
            map(g, "dead_letters", deadLetters);
            g.writeNumberField("rejected_inputs", rejectedInputs);
            g.writeNumberField("duplicate_facts", duplicateFacts);
            g.writeNumberField("duplicate_decisions", duplicateDecisions);
            g.writeNumberField("key_mismatches", keyMismatches);
            g.writeObjectFieldStart("violations_by_rule");
            for (Rule r : Rule.values()) {
                g.writeNumberField(r.name(), violationsByRule.getOrDefault(r, 0L));
            }
            g.writeEndObject();
            g.writeArrayFieldStart("violations");
            for (Violation v : violations) {
                g.writeStartObject();
                g.writeStringField("rule", v.rule().name());
                g.writeStringField("request_id", v.requestId());
                g.writeStringField("where", v.where());
                g.writeStringField("message", v.message());
                g.writeEndObject();
            }
            g.writeEndArray();
        });
    }

    private static void map(JsonGenerator g, String name, Map<String, Long> m) throws IOException {
        g.writeObjectFieldStart(name);
        for (Map.Entry<String, Long> e : m.entrySet()) {
            g.writeNumberField(e.getKey(), e.getValue());
        }
        g.writeEndObject();
    }
}
