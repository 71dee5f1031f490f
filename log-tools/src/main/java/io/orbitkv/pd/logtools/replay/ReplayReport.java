package io.orbitkv.pd.logtools.replay;

import com.fasterxml.jackson.core.JsonGenerator;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.logtools.EventJson;
import io.orbitkv.pd.logtools.LogSlice;
import io.orbitkv.pd.logtools.internal.JsonReport;
import io.orbitkv.pd.schemas.EventText;
import java.io.OutputStream;
import java.io.PrintStream;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;

/** What a replay found: per partition how many requests were reproduced, and the first difference of each request that was not. */
public final class ReplayReport {

    /** A decision as recorded in the log, with where it is. */
    public record Recorded(Decision decision, String where) { }

    /**
     * The first decision where the replay and the log disagree for one request.
     *
     * @param requestId     the request
     * @param partition     its request-events partition
     * @param index         position in the request's decisions (its seq when the log is complete)
     * @param recordedCount decisions the log has for it
     * @param replayedCount decisions the fresh decider made
     * @param recorded      the recorded decision there, or null (the log has fewer)
     * @param replayed      the replayed decision there, or null (the replay made fewer)
     * @param fields        differing fields, {@code path: recorded → replayed}
     */
    public record Difference(String requestId, int partition, int index, int recordedCount, int replayedCount, Recorded recorded,
                             Decision replayed, List<String> fields) { }

    /** Counts for one partition. */
    public static final class PartitionResult {
        final int partition;
        final int facts;
        long recordedDecisions;
        long replayedDecisions;
        long compared;
        long identical;
        long different;
        long partial;

        PartitionResult(int partition, int facts) {
            this.partition = partition;
            this.facts = facts;
        }

        public int partition() {
            return partition;
        }

        public long compared() {
            return compared;
        }

        public long identical() {
            return identical;
        }
    }

    final LogSlice slice;
    final int maxListed;
    final List<PartitionResult> partitions = new ArrayList<>();
    final List<Difference> differences = new ArrayList<>();
    long differencesTotal;
    long undecodable;
    long afterSlice;
    long elapsedNanos;
    boolean tokenHint;

    ReplayReport(LogSlice slice, int maxListed) {
        this.slice = slice;
        this.maxListed = maxListed;
    }

    void addDifference(Difference d) {
        differencesTotal++;
        if (differences.size() < maxListed) {
            differences.add(d);
        }
    }

    public boolean identical() {
        return differencesTotal == 0 && undecodable == 0;
    }

    public long requestsCompared() {
        return partitions.stream().mapToLong(p -> p.compared).sum();
    }

    public long requestsIdentical() {
        return partitions.stream().mapToLong(p -> p.identical).sum();
    }

    public long requestsDifferent() {
        return differencesTotal;
    }

    public long requestsPartial() {
        return partitions.stream().mapToLong(p -> p.partial).sum();
    }

    public long decisionsRecorded() {
        return partitions.stream().mapToLong(p -> p.recordedDecisions).sum();
    }

    public long decisionsReplayed() {
        return partitions.stream().mapToLong(p -> p.replayedDecisions).sum();
    }

    /** Recorded decisions later than the last fact of their partition in the slice (decided on records the slice lacks): not compared. */
    public long decisionsAfterSlice() {
        return afterSlice;
    }

    public List<Difference> differences() {
        return List.copyOf(differences);
    }

    public List<PartitionResult> partitions() {
        return List.copyOf(partitions);
    }

    // ------------------------------------------------------------------------------------------------ text

    public void writeText(PrintStream out) {
        out.printf("replay of %s%s into a fresh decider%n", slice.origin(), slice.filter() == null ? "" : " (filtered: " + slice.filter() + ")");
        out.printf("  %-10s %10s %12s %12s %10s %10s %10s %10s%n", "PARTITION", "FACTS", "RECORDED", "REPLAYED", "REQUESTS", "IDENTICAL",
                "DIFFERENT", "PARTIAL");
        for (PartitionResult p : partitions) {
            out.printf(Locale.ROOT, "  %-10d %,10d %,12d %,12d %,10d %,10d %,10d %,10d%n", p.partition, p.facts, p.recordedDecisions,
                    p.replayedDecisions, p.compared, p.identical, p.different, p.partial);
        }
        if (undecodable > 0) {
            out.printf(Locale.ROOT, "  %,d recorded decisions do not decode%n", undecodable);
        }
        if (afterSlice > 0) {
            out.printf(Locale.ROOT, "  %,d recorded decisions came after the last fact of their partition in the slice (made on records the"
                    + " slice does not have): not compared%n", afterSlice);
        }
        if (!differences.isEmpty()) {
            out.println();
            out.printf(Locale.ROOT, "first difference of each request%s:%n", differencesTotal > differences.size()
                    ? " (first " + differences.size() + " of " + differencesTotal + " requests)" : "");
            for (Difference d : differences) {
                out.printf(Locale.ROOT, "  %s (partition %d) at decision #%d (log has %d, replay made %d):%n", d.requestId(), d.partition(),
                        d.index(), d.recordedCount(), d.replayedCount());
                out.printf("    recorded  %-28s %s%n", d.recorded() == null ? "-" : d.recorded().where(), d.recorded() == null
                        ? "(no decision: the log ends here)" : line(d.recorded().decision()));
                out.printf("    replayed  %-28s %s%n", "", d.replayed() == null ? "(no decision: the replay ends here)" : line(d.replayed()));
                for (String f : d.fields()) {
                    out.println("      " + f);
                }
            }
            if (tokenHint) {
                out.println();
                out.println("  every difference is an order's auth_token: the log was written with another auth.key;"
                        + " pass the decider's --config (auth.key) to replay with it.");
            }
        }
        out.println();
        out.printf(Locale.ROOT, "%s %,d request(s) compared in %.1f s: %,d reproduced exactly, %,d decided differently%s.%n",
                identical() ? "IDENTICAL:" : "DIFFERENT:", requestsCompared(), elapsedNanos / 1e9, requestsIdentical(), differencesTotal,
                requestsPartial() > 0 ? ", " + requestsPartial() + " began before the slice (not compared)" : "");
    }

    private static String line(Decision d) {
        return "seq " + d.getSeq() + " @" + Instant.ofEpochMilli(d.getStreamTimeMs()) + " " + EventText.describe(d)
                + (d.getCauseEventId() == null ? " (timer)" : " (cause " + d.getCauseEventId() + ")");
    }

    // ------------------------------------------------------------------------------------------------ JSON

    public void writeJson(OutputStream os) {
        JsonReport.write(os, g -> {
            g.writeStringField("origin", slice.origin());
            g.writeBooleanField("identical", identical());
            g.writeNumberField("requests_compared", requestsCompared());
            g.writeNumberField("requests_identical", requestsIdentical());
            g.writeNumberField("requests_different", differencesTotal);
            g.writeNumberField("requests_partial", requestsPartial());
            g.writeNumberField("decisions_recorded", decisionsRecorded());
            g.writeNumberField("decisions_replayed", decisionsReplayed());
            g.writeNumberField("undecodable_decisions", undecodable);
            g.writeNumberField("decisions_after_slice", afterSlice);
            g.writeNumberField("elapsed_ms", elapsedNanos / 1_000_000);
            g.writeArrayFieldStart("partitions");
            for (PartitionResult p : partitions) {
                g.writeStartObject();
                g.writeNumberField("partition", p.partition);
                g.writeNumberField("facts", p.facts);
                g.writeNumberField("recorded", p.recordedDecisions);
                g.writeNumberField("replayed", p.replayedDecisions);
                g.writeNumberField("compared", p.compared);
                g.writeNumberField("identical", p.identical);
                g.writeNumberField("different", p.different);
                g.writeNumberField("partial", p.partial);
                g.writeEndObject();
            }
            g.writeEndArray();
            g.writeArrayFieldStart("differences");
            for (Difference d : differences) {
                g.writeStartObject();
                g.writeStringField("request_id", d.requestId());
                g.writeNumberField("partition", d.partition());
                g.writeNumberField("index", d.index());
                g.writeNumberField("recorded_count", d.recordedCount());
                g.writeNumberField("replayed_count", d.replayedCount());
                g.writeFieldName("recorded");
                if (d.recorded() == null) {
                    g.writeNull();
                } else {
                    g.writeStartObject();
                    g.writeStringField("where", d.recorded().where());
                    g.writeFieldName("decision");
                    EventJson.write(g, d.recorded().decision());
                    g.writeEndObject();
                }
                g.writeFieldName("replayed");
                EventJson.write(g, d.replayed());
                g.writeArrayFieldStart("fields");
                for (String f : d.fields()) {
                    g.writeString(f);
                }
                g.writeEndArray();
                g.writeEndObject();
            }
            g.writeEndArray();
        });
    }
}
