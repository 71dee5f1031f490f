package io.orbitkv.pd.logtools.trace;

import com.fasterxml.jackson.core.JsonGenerator;
import io.orbitkv.pd.events.DeadLetter;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.DecodeReady;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.PhaseTimings;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestAnswered;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.logtools.EventJson;
import io.orbitkv.pd.logtools.LogRecord;
import io.orbitkv.pd.logtools.LogSlice;
import io.orbitkv.pd.logtools.LogSource;
import io.orbitkv.pd.logtools.Partitioning;
import io.orbitkv.pd.logtools.Progress;
import io.orbitkv.pd.logtools.TopicRole;
import io.orbitkv.pd.logtools.internal.JsonReport;
import io.orbitkv.pd.schemas.EventDecodingException;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.EventText;
import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.kafka.common.serialization.Deserializer;

/**
 * One request's whole story from the log: every fact about it, every decision, every dead letter of its records,
 * in the order they happened, with the component that wrote each and where it sits; the engines it used; and the
 * time spent in each phase (from the outcome's stream-time milestones, or from the records while it is still in
 * flight). Reads only the request's partition of each per-request topic (Kafka's default partitioner puts it there).
 */
public final class RequestTrace {

    /** What an entry is: a fact, a decision, a dead letter of one of its records, or what the proxy answered. */
    public enum Kind { FACT, DECISION, DEAD_LETTER, ANSWER }

    /**
     * One record of the story.
     *
     * @param kind      fact, decision or dead letter
     * @param record    the record as stored
     * @param event     the decoded value, or null when it does not decode
     * @param component who wrote it (a fact's {@code source}, "decider", a dead letter's component)
     * @param type      the event type (payload record name), or "undecodable"
     * @param text      one-line description ({@code EventText}) or why it does not decode
     */
    public record Entry(Kind kind, LogRecord record, Object event, String component, String type, String text) { }

    /** A phase of the request: from one stream-time milestone to the next; null ends where it did not happen. */
    public record Phase(String name, String meaning, Long fromMs, Long toMs) {
        public Long durationMs() {
            return fromMs == null || toMs == null ? null : toMs - fromMs;
        }
    }

    private final String requestId;
    private final LogSlice slice;
    private final List<Entry> entries;
    private final Map<String, EngineRegistration> engines;
    private final Map<TopicRole, Integer> partitions;

    private RequestTrace(String requestId, LogSlice slice, List<Entry> entries, Map<String, EngineRegistration> engines,
                         Map<TopicRole, Integer> partitions) {
        this.requestId = requestId;
        this.slice = slice;
        this.entries = List.copyOf(entries);
        this.engines = engines;
        this.partitions = partitions;
    }

    /**
     * Reads the request's story from {@code source}.
     *
     * @param allPartitions read every partition instead of the one the default partitioner picks (for producers
     *                      that partition differently)
     */
    public static RequestTrace collect(LogSource source, String requestId, EventSerdes serdes, boolean allPartitions, Progress progress) {
        LogSlice slice = source.slice();
        byte[] key = requestId.getBytes(StandardCharsets.UTF_8);
        Map<TopicRole, Integer> partitions = new LinkedHashMap<>();
        for (TopicRole role : new TopicRole[] {TopicRole.REQUEST_EVENTS, TopicRole.DECISIONS, TopicRole.ANSWERS}) {
            int n = topicPartitions(slice, role);
            if (n > 0 && !allPartitions) {
                partitions.put(role, Partitioning.partitionOf(key, n));
            }
        }
        List<Entry> entries = new ArrayList<>();
        Map<String, List<EngineRegistration>> registrations = new LinkedHashMap<>();
        source.read(new LogSource.RecordFilter() {
            @Override
            public boolean wantsPartition(TopicRole role, int partition) {
                return switch (role) {
                    case REQUEST_EVENTS, DECISIONS, ANSWERS -> !partitions.containsKey(role) || partitions.get(role) == partition;
                    case DEAD_LETTERS, ENGINES -> true;
                    case ENGINE_COMMANDS -> false;
                };
            }

            @Override
            public boolean wants(LogRecord r) {
                return !r.streamTimeMark() && (r.role() == TopicRole.ENGINES || Arrays.equals(r.key(), key));
            }
        }, r -> {
            switch (r.role()) {
                case REQUEST_EVENTS -> {
                    RequestEvent e = decode(r, serdes.requestEvent().deserializer(), entries, Kind.FACT);
                    if (e != null) {
                        entries.add(new Entry(Kind.FACT, r, e, e.getSource(), EventText.typeOf(e), EventText.describe(e)));
                    }
                }
                case DECISIONS -> {
                    Decision d = decode(r, serdes.decision().deserializer(), entries, Kind.DECISION);
                    if (d != null) {
                        entries.add(new Entry(Kind.DECISION, r, d, "decider", EventText.typeOf(d), EventText.describe(d)));
                    }
                }
                case DEAD_LETTERS -> {
                    DeadLetter dl = decode(r, serdes.deadLetter().deserializer(), entries, Kind.DEAD_LETTER);
                    if (dl != null) {
                        entries.add(new Entry(Kind.DEAD_LETTER, r, dl, dl.getComponent(), "DeadLetter", dl.getErrorType() + " of "
                                + dl.getTopic() + "-" + dl.getPartition() + "@" + dl.getOffset() + ": " + dl.getReason()));
                    }
                }
                case ANSWERS -> {
                    RequestAnswered a = decode(r, serdes.requestAnswered().deserializer(), entries, Kind.ANSWER);
                    if (a != null) {
                        entries.add(new Entry(Kind.ANSWER, r, a, a.getProxyId(), "RequestAnswered", EventText.describe(a)));
                    }
                }
                case ENGINES -> {
                    try {
                        EngineRegistration reg = serdes.engineRegistration().deserializer().deserialize(r.topic(), r.value());
                        if (reg != null) {
                            registrations.computeIfAbsent(reg.getEngineId(), k -> new ArrayList<>()).add(reg);
                        }
                    } catch (EventDecodingException ignored) {
                        // context only: an undecodable registration is simply not shown
                    }
                }
                default -> { }
            }
        }, progress);
        Map<String, EngineRegistration> used = new LinkedHashMap<>();
        long first = entries.isEmpty() ? Long.MAX_VALUE : entries.get(0).record().timestamp();
        for (String engine : enginesOf(entries)) {
            List<EngineRegistration> regs = registrations.getOrDefault(engine, List.of());
            EngineRegistration pick = null;
            for (EngineRegistration reg : regs) {
                if (pick == null || reg.getRegisteredAtMs() <= first) {
                    pick = reg;
                }
            }
            if (pick != null) {
                used.put(engine, pick);
            }
        }
        return new RequestTrace(requestId, slice, entries, used, partitions);
    }

    private static int topicPartitions(LogSlice slice, TopicRole role) {
        return slice.partitionCount(role);
    }

    private static <T> T decode(LogRecord r, Deserializer<T> d, List<Entry> entries, Kind kind) {
        try {
            T v = d.deserialize(r.topic(), r.value());
            if (v == null) {
                entries.add(new Entry(kind, r, null, "?", "undecodable", "null value (tombstone)"));
            }
            return v;
        } catch (EventDecodingException e) {
            entries.add(new Entry(kind, r, null, "?", "undecodable", e.reason() + ": " + e.detail()));
        } catch (RuntimeException e) {
            entries.add(new Entry(kind, r, null, "?", "undecodable", e.toString()));
        }
        return null;
    }

    private static Set<String> enginesOf(List<Entry> entries) {
        Set<String> out = new LinkedHashSet<>();
        for (Entry e : entries) {
            Object inner = EventText.unwrap(e.event());
            switch (inner) {
                case RequestAdmitted a -> {
                    out.add(a.getPrefillEngineId());
                    out.add(a.getDecodeEngineId());
                }
                case PrefillCompleted pc -> out.add(pc.getEngineId());
                case DecodeReady dr -> out.add(dr.getEngineId());
                case null, default -> { }
            }
        }
        return out;
    }

    public String requestId() {
        return requestId;
    }

    public boolean found() {
        return !entries.isEmpty();
    }

    public List<Entry> entries() {
        return entries;
    }

    /** The request's outcome, if the log has it. */
    public RequestOutcome outcome() {
        for (Entry e : entries) {
            if (e.event() instanceof Decision d && d.getPayload() instanceof RequestOutcome o) {
                return o;
            }
        }
        return null;
    }

    /** The request's handoff on the wall clock, hop by hop, from its records' timing marks. */
    public HandoffAnatomy anatomy() {
        List<HandoffAnatomy.Observation> obs = new ArrayList<>();
        for (Entry e : entries) {
            if (e.event() != null && e.kind() != Kind.DEAD_LETTER) {
                obs.add(new HandoffAnatomy.Observation(e.event(), e.record().marks()));
            }
        }
        return HandoffAnatomy.of(obs);
    }

    /** The phases, from the outcome's timings or, while the request is in flight, from the records. */
    public List<Phase> phases() {
        RequestOutcome out = outcome();
        Long admitted;
        Long prefill;
        Long ready;
        Long order;
        Long transfer;
        Long finished;
        if (out != null) {
            PhaseTimings t = out.getTimings();
            admitted = t.getAdmittedMs();
            prefill = t.getPrefillCompletedMs();
            ready = t.getDecodeReadyMs();
            order = t.getOrderIssuedMs();
            transfer = t.getTransferCompletedMs();
            finished = t.getFinishedMs();
        } else {
            admitted = firstFact(RequestAdmitted.class);
            prefill = firstFact(PrefillCompleted.class);
            ready = firstFact(DecodeReady.class);
            order = firstDecision(TransferOrder.class);
            transfer = firstDecision(KvReady.class);
            finished = null;
        }
        Long bothIn = prefill == null || ready == null ? null : Math.max(prefill, ready);
        List<Phase> phases = new ArrayList<>();
        phases.add(new Phase("prefill", "admitted → prompt KV computed", admitted, prefill));
        phases.add(new Phase("decode pages", "admitted → decode engine holds pages", admitted, ready));
        phases.add(new Phase("match", "both sides in → transfer order", bothIn, order));
        phases.add(new Phase("transfer", "order → KV in the decode pages", order, transfer));
        phases.add(new Phase("decode", "KV ready → finished", transfer, finished));
        phases.add(new Phase("total", "admitted → outcome", admitted, finished));
        return phases;
    }

    private Long firstFact(Class<?> type) {
        for (Entry e : entries) {
            if (e.event() instanceof RequestEvent ev && type.isInstance(ev.getPayload())) {
                return e.record().timestamp();
            }
        }
        return null;
    }

    private Long firstDecision(Class<?> type) {
        for (Entry e : entries) {
            if (e.event() instanceof Decision d && type.isInstance(d.getPayload())) {
                return d.getStreamTimeMs();
            }
        }
        return null;
    }

    // ------------------------------------------------------------------------------------------------ text

    /**
     * @param full print every event in full (default: descriptions cut at {@code width} characters)
     */
    public void writeText(PrintStream out, boolean full, int width) {
        if (!found()) {
            out.printf("request %s: no record in %s%s%n", requestId, slice.origin(), partitions.isEmpty() ? ""
                    : " (read partition " + partitions.values().stream().distinct().map(String::valueOf).reduce((a, b) -> a + "/" + b).orElse("")
                    + " of the per-request topics, where the default partitioner puts it; --all-partitions reads every partition)");
            return;
        }
        RequestOutcome o = outcome();
        StringBuilder head = new StringBuilder("request ").append(requestId).append(" — ");
        if (o == null) {
            head.append("IN FLIGHT (no outcome in the log yet)");
        } else {
            head.append(o.getKind()).append(": ").append(o.getReason()).append(" · ").append(o.getAttempts())
                    .append(o.getAttempts() == 1 ? " attempt" : " attempts");
            if (o.getKvBytes() > 0) {
                head.append(" · ").append(bytes(o.getKvBytes())).append(" of KV");
            }
            if (o.getPrefillEngineId() != null) {
                head.append(" · ").append(o.getPrefillEngineId()).append(" → ").append(o.getDecodeEngineId());
            }
        }
        out.println(head);
        long t0 = entries.get(0).record().timestamp();
        long tEnd = entries.get(entries.size() - 1).record().timestamp();
        Set<String> where = new TreeSet<>();
        entries.forEach(e -> where.add(e.record().topic() + "-" + e.record().partition()));
        long facts = entries.stream().filter(e -> e.kind() == Kind.FACT).count();
        long decisions = entries.stream().filter(e -> e.kind() == Kind.DECISION).count();
        long dead = entries.stream().filter(e -> e.kind() == Kind.DEAD_LETTER).count();
        out.printf("  %d facts, %d decisions%s in %s, %s … %s%n", facts, decisions, dead > 0 ? ", " + dead + " dead letter(s)" : "",
                String.join(", ", where), Instant.ofEpochMilli(t0), Instant.ofEpochMilli(tEnd));
        for (EngineRegistration e : engines.values()) {
            out.printf("  engine %s: %s, instance epoch %d, %s%s%n", e.getEngineId(), e.getRole(), e.getInstanceEpoch(), e.getModel(),
                    e.getEndpoints().isEmpty() ? "" : ", " + e.getEndpoints().get(0).getTransport() + " " + e.getEndpoints().get(0).getAddress());
        }
        out.println();
        out.printf("  %9s  %-8s %-22s %-30s %s%n", "T+ms", "KIND", "COMPONENT", "WHERE", "EVENT");
        for (Entry e : entries) {
            String text = e.text();
            if (e.event() instanceof Decision d) {
                text = "#" + d.getSeq() + " " + text + (d.getCauseEventId() == null ? "  (timer)" : "  (cause " + d.getCauseEventId() + ")");
            }
            if (!full && text.length() > width) {
                text = text.substring(0, Math.max(10, width - 1)) + "…";
            }
            out.printf(Locale.ROOT, "  %9d  %-8s %-22s %-30s %s%n", e.record().timestamp() - t0, kindName(e.kind()), e.component(),
                    e.record().where(), text);
        }
        out.println();
        out.println("  phases (stream time" + (o == null ? ", from the records so far" : ", from the outcome's timings") + "):");
        List<Phase> phases = phases();
        long longest = phases.stream().filter(p -> !p.name().equals("total")).map(Phase::durationMs)
                .filter(d -> d != null && d > 0).mapToLong(Long::longValue).max().orElse(1);
        for (Phase p : phases) {
            Long d = p.durationMs();
            String bar = d == null || p.name().equals("total") ? "" : "█".repeat((int) Math.max(d > 0 ? 1 : 0, Math.round(30.0 * Math.max(0, d) / longest)));
            out.printf(Locale.ROOT, "    %-13s %-38s %10s  %s%n", p.name(), p.meaning(), d == null ? "—" : d + " ms", bar);
        }
        writeHops(out);
    }

    /** The wall-clock hops (timing marks), when the records carry them. */
    private void writeHops(PrintStream out) {
        HandoffAnatomy a = anatomy();
        if (a.spans().isEmpty()) {
            out.println();
            out.println("  hops (wall clock): none — the records carry no timing marks (written by an older orbitkv-pd?)");
            return;
        }
        long t0 = a.startMicros() > 0 ? a.startMicros() : a.spans().get(0).fromMicros();
        out.println();
        out.println("  hops (wall clock, from the records' timing marks; T+ from the first process receiving the request):");
        out.printf("  %9s %9s  %-22s %s%n", "T+ms", "took ms", "HOP", "FROM → TO");
        long longest = a.spans().stream().mapToLong(HandoffAnatomy.Span::micros).max().orElse(1);
        for (HandoffAnatomy.Span s : a.spans()) {
            String bar = "█".repeat((int) Math.max(s.micros() > 0 ? 1 : 0, Math.round(24.0 * Math.max(0, s.micros()) / Math.max(1, longest))));
            out.printf(Locale.ROOT, "  %9.2f %9.2f%s %-22s %-42s %s%n", (s.fromMicros() - t0) / 1e3, s.micros() / 1e3,
                    s.hop().crossProcess() ? "*" : " ", s.hop().key(), s.hop().label(), bar);
        }
        StringBuilder sum = new StringBuilder("  ");
        if (a.ttftMicros() >= 0) {
            sum.append(String.format(Locale.ROOT, "TTFT at the proxy %.2f ms", a.ttftMicros() / 1e3));
        }
        if (a.handoffMicros() >= 0) {
            sum.append(String.format(Locale.ROOT, " · handoff at the proxy (prefill answered → first token) %.2f ms", a.handoffMicros() / 1e3));
        }
        if (a.transferMicros() > 0) {
            sum.append(String.format(Locale.ROOT, " · push of %s in %.2f ms (%.2f GB/s)", bytes(a.transferBytes()), a.transferMicros() / 1e3,
                    a.transferBytes() / (a.transferMicros() * 1e3)));
        }
        if (sum.length() > 2) {
            out.println(sum);
        }
        out.println("  * between two processes: two clocks (one on one host; across hosts the hop includes their skew, see docs/log-tools.md)");
    }

    private static String kindName(Kind k) {
        return switch (k) {
            case FACT -> "fact";
            case DECISION -> "decision";
            case DEAD_LETTER -> "DEAD";
            case ANSWER -> "answer";
        };
    }

    private static String bytes(long b) {
        return b >= 1 << 30 ? String.format(Locale.ROOT, "%.1f GiB", b / (double) (1 << 30))
                : b >= 1 << 20 ? String.format(Locale.ROOT, "%.1f MiB", b / (double) (1 << 20)) : String.format(Locale.ROOT, "%.1f KiB", b / 1024.0);
    }

    // ------------------------------------------------------------------------------------------------ JSON

    public void writeJson(OutputStream os) {
        JsonReport.write(os, g -> {
            g.writeStringField("request_id", requestId);
            g.writeBooleanField("found", found());
            g.writeStringField("origin", slice.origin());
            g.writeObjectFieldStart("partitions");
            for (Map.Entry<TopicRole, Integer> e : partitions.entrySet()) {
                g.writeNumberField(e.getKey().id(), e.getValue());
            }
            g.writeEndObject();
            g.writeFieldName("outcome");
            EventJson.write(g, outcome());
            g.writeArrayFieldStart("phases");
            for (Phase p : phases()) {
                g.writeStartObject();
                g.writeStringField("name", p.name());
                g.writeStringField("meaning", p.meaning());
                writeLong(g, "from_ms", p.fromMs());
                writeLong(g, "to_ms", p.toMs());
                writeLong(g, "duration_ms", p.durationMs());
                g.writeEndObject();
            }
            g.writeEndArray();
            HandoffAnatomy a = anatomy();
            g.writeArrayFieldStart("hops");
            for (HandoffAnatomy.Span s : a.spans()) {
                g.writeStartObject();
                g.writeStringField("hop", s.hop().key());
                g.writeStringField("label", s.hop().label());
                g.writeBooleanField("cross_process", s.hop().crossProcess());
                g.writeNumberField("from_us", s.fromMicros());
                g.writeNumberField("to_us", s.toMicros());
                g.writeNumberField("us", s.micros());
                g.writeEndObject();
            }
            g.writeEndArray();
            writeLong(g, "ttft_us", a.ttftMicros() < 0 ? null : a.ttftMicros());
            writeLong(g, "handoff_us", a.handoffMicros() < 0 ? null : a.handoffMicros());
            g.writeArrayFieldStart("engines");
            for (EngineRegistration e : engines.values()) {
                EventJson.write(g, e);
            }
            g.writeEndArray();
            long t0 = entries.isEmpty() ? 0 : entries.get(0).record().timestamp();
            g.writeArrayFieldStart("entries");
            for (Entry e : entries) {
                g.writeStartObject();
                g.writeNumberField("t_ms", e.record().timestamp() - t0);
                g.writeNumberField("timestamp", e.record().timestamp());
                g.writeStringField("kind", e.kind().name().toLowerCase(Locale.ROOT).replace('_', '-'));
                g.writeStringField("component", e.component());
                g.writeStringField("topic", e.record().topic());
                g.writeNumberField("partition", e.record().partition());
                g.writeNumberField("offset", e.record().offset());
                g.writeStringField("type", e.type());
                g.writeStringField("text", e.text());
                if (e.record().timing() != null) {
                    g.writeObjectFieldStart("marks_us");
                    for (Map.Entry<String, Long> m : e.record().marks().asMap().entrySet()) {
                        g.writeNumberField(m.getKey(), m.getValue());
                    }
                    g.writeEndObject();
                }
                g.writeFieldName("event");
                EventJson.write(g, e.event());
                g.writeEndObject();
            }
            g.writeEndArray();
        });
    }

    private static void writeLong(JsonGenerator g, String name, Long v) throws IOException {
        if (v == null) {
            g.writeNullField(name);
        } else {
            g.writeNumberField(name, v);
        }
    }
}
