package io.orbitkv.pd.bench.chaos;

import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.logtools.LogRecord;
import io.orbitkv.pd.logtools.LogSource;
import io.orbitkv.pd.logtools.Progress;
import io.orbitkv.pd.logtools.TopicRole;
import io.orbitkv.pd.schemas.Topics;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;

/**
 * What the log says about each request of a chaos run: whether it knows the request (any fact), whether it was
 * admitted, and how many outcomes it got. Every request the log knows of must end in exactly one outcome; a
 * record that does not decode is counted, not skipped silently (the audit lists it).
 */
public final class ChaosLedger {

    /**
     * Per window of the run: requests the log knows, admitted, with exactly one outcome, with none, with more, and with a
     * failed push ({@code TransferFailed}: a push that had to be tried again or given up).
     */
    public record Counts(int known, int admitted, int oneOutcome, int lost, int doubled, int pushFailed) { }

    /**
     * The facts every request answered 200 through P/D (decoded on transferred KV) must have in the log: its admission,
     * its prefill report and its decode-ready fact were each acknowledged to their writer (the prefill engine waits for
     * its report's acknowledgement before it answers) and read by the decider before it ordered the push — a write lost
     * after its acknowledgement (an isolated leader with a lagging ISR, an unclean election) shows here.
     */
    static final java.util.List<String> ACKNOWLEDGED = java.util.List.of("RequestAdmitted", "PrefillCompleted", "DecodeReady");

    private final Set<String> known = new HashSet<>();
    private final Set<String> admitted = new HashSet<>();
    /** Per request, the decision ids of its outcomes (a copy of one decision, same id, is one outcome). */
    private final Map<String, Set<String>> outcomes = new HashMap<>();
    /** Per request, what the log holds about it in log order (fact and decision types), for the requests that need explaining. */
    private final Map<String, java.util.List<String>> story = new HashMap<>();
    private long undecodable;

    private ChaosLedger() { }

    /** Reads the request events and decisions of {@code log} (only the chaos run's requests: {@code chaos-…} keys). */
    public static ChaosLedger read(LogSource log, Topics topics) {
        ChaosLedger l = new ChaosLedger();
        log.read(LogSource.RecordFilter.ALL, r -> l.add(r, topics), Progress.NONE);
        return l;
    }

    private void add(LogRecord r, Topics topics) {
        String key = r.keyString();
        if (r.value() == null || key == null || ChaosRun.windowOf(key) < 0) {
            return;
        }
        try {
            if (r.role() == TopicRole.REQUEST_EVENTS) {
                RequestEvent e = topics.requestEvents().valueSerde().deserializer().deserialize(r.topic(), r.value());
                known.add(e.getRequestId());
                story.computeIfAbsent(e.getRequestId(), x -> new java.util.ArrayList<>()).add(e.getPayload().getClass().getSimpleName());
                if (e.getPayload() instanceof RequestAdmitted) {
                    admitted.add(e.getRequestId());
                }
            } else if (r.role() == TopicRole.DECISIONS) {
                Decision d = topics.decisions().valueSerde().deserializer().deserialize(r.topic(), r.value());
                known.add(d.getRequestId());
                story.computeIfAbsent(d.getRequestId(), x -> new java.util.ArrayList<>()).add("=>" + d.getPayload().getClass().getSimpleName());
                if (d.getPayload() instanceof RequestOutcome) {
                    outcomes.computeIfAbsent(d.getRequestId(), x -> new HashSet<>()).add(d.getDecisionId());
                }
            }
        } catch (RuntimeException e) {
            undecodable++;
        }
    }

    /** The counts of the requests of window {@code index}. */
    public Counts window(int index) {
        int k = 0;
        int a = 0;
        int one = 0;
        int lost = 0;
        int doubled = 0;
        int pushFailed = 0;
        for (String id : known) {
            if (ChaosRun.windowOf(id) != index) {
                continue;
            }
            k++;
            if (admitted.contains(id)) {
                a++;
            }
            int n = outcomesOf(id);
            if (n == 1) {
                one++;
            } else if (n == 0) {
                lost++;
            } else {
                doubled++;
            }
            if (story.getOrDefault(id, java.util.List.of()).contains("TransferFailed")) {
                pushFailed++;
            }
        }
        return new Counts(k, a, one, lost, doubled, pushFailed);
    }

    /** The requests of window {@code index} without exactly one outcome, each with what the log holds about it. */
    public Map<String, java.util.List<String>> unsettled(int index) {
        Map<String, java.util.List<String>> out = new java.util.TreeMap<>();
        for (String id : known) {
            if (ChaosRun.windowOf(id) == index && outcomesOf(id) != 1) {
                out.put(id, story.getOrDefault(id, java.util.List.of()));
            }
        }
        return out;
    }

    /**
     * Of {@code answered} (requests answered 200 after a decode on transferred KV, by the id that served them), those whose
     * log lacks one of the {@link #ACKNOWLEDGED} facts, each with the facts missing: acknowledged writes the log lost.
     */
    public Map<String, java.util.List<String>> acknowledgedMissing(java.util.Collection<String> answered) {
        Map<String, java.util.List<String>> out = new java.util.TreeMap<>();
        for (String id : answered) {
            java.util.List<String> have = story.getOrDefault(id, java.util.List.of());
            java.util.List<String> missing = ACKNOWLEDGED.stream().filter(f -> !have.contains(f)).toList();
            if (!missing.isEmpty()) {
                out.put(id, missing);
            }
        }
        return out;
    }

    /** Requests the log knows without exactly one outcome, over every window. */
    public long unsettledCount() {
        return known.stream().filter(id -> outcomesOf(id) != 1).count();
    }

    /** Distinct outcomes the log holds for request {@code id}. */
    private int outcomesOf(String id) {
        return outcomes.getOrDefault(id, Set.of()).size();
    }

    public long undecodable() {
        return undecodable;
    }
}
