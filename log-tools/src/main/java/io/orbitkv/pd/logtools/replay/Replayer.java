package io.orbitkv.pd.logtools.replay;

import io.orbitkv.pd.decider.DeciderPolicy;
import io.orbitkv.pd.decider.DeciderReplay;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.Tick;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.logtools.LogRecord;
import io.orbitkv.pd.logtools.LogSlice;
import io.orbitkv.pd.logtools.LogSource;
import io.orbitkv.pd.logtools.Partitioning;
import io.orbitkv.pd.logtools.Progress;
import io.orbitkv.pd.logtools.TopicRole;
import io.orbitkv.pd.schemas.EventDecodingException;
import io.orbitkv.pd.schemas.Topics;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;

/**
 * Feeds a recorded log into a fresh decider ({@link DeciderReplay}, one partition at a time, as the decider
 * itself works) and compares what it decides with the decisions recorded in the log, request by request: the
 * proof that a run can be reproduced from its log alone. Memory: one partition's facts and decisions.
 *
 * <p>Which requests are compared: those whose recorded decisions start at seq 0 in the slice; when the slice
 * does not start at the partition's log start, also only those admitted inside it (a request begun before the
 * slice cannot be reproduced from the slice). Recorded decisions later than the last replayed fact's stream time
 * belong to facts after the slice and are left out; a replayed decision missing from the log is a difference.
 */
public final class Replayer {

    private Replayer() { }

    /**
     * @param policy the policy of the recorded decider (timeouts, retries and the token key shape every decision)
     * @param topics the topic registry to replay under (the records' own topic names do not matter)
     * @param maxListed differences listed (all are counted)
     */
    public static ReplayReport replay(LogSource source, DeciderPolicy policy, Topics topics, int maxListed, Progress progress) {
        long t0 = System.nanoTime();
        LogSlice slice = source.slice();
        LogSlice.TopicSlice facts = slice.topic(TopicRole.REQUEST_EVENTS).orElseThrow(() -> new IllegalArgumentException(
                "the log has no request-events topic: nothing to replay"));
        LogSlice.TopicSlice decisions = slice.topic(TopicRole.DECISIONS).orElseThrow(() -> new IllegalArgumentException(
                "the log has no decisions topic: nothing to compare the replay with"));
        int factPartitions = slice.partitionCount(TopicRole.REQUEST_EVENTS);
        boolean samePartitioning = slice.partitionCount(TopicRole.DECISIONS) == factPartitions;
        ReplayReport report = new ReplayReport(slice, maxListed);
        for (LogSlice.PartitionRange range : facts.partitions()) {
            int p = range.partition();
            if (range.count() == 0) {
                continue;
            }
            List<ConsumerRecord<byte[], byte[]>> input = new ArrayList<>();
            Map<String, List<ReplayReport.Recorded>> recorded = new LinkedHashMap<>();
            Set<String> admittedInSlice = new HashSet<>();
            long[] lastFactTs = {Long.MIN_VALUE};
            long[] firstFactTs = {Long.MIN_VALUE};
            long grace = policy.admissionGrace().toMillis();
            boolean fromStart = range.fromLogStart();
            source.read(new LogSource.RecordFilter() {
                @Override
                public boolean wantsPartition(TopicRole role, int partition) {
                    return role == TopicRole.REQUEST_EVENTS ? partition == p : role == TopicRole.DECISIONS && (!samePartitioning || partition == p);
                }

                @Override
                public boolean wants(LogRecord r) {
                    return r.role() != TopicRole.DECISIONS || samePartitioning || (r.key() != null
                            && Partitioning.partitionOf(r.key(), factPartitions) == p);
                }
            }, r -> {
                if (r.role() == TopicRole.REQUEST_EVENTS) {
                    lastFactTs[0] = Math.max(lastFactTs[0], r.timestamp());
                    if (firstFactTs[0] == Long.MIN_VALUE) {
                        firstFactTs[0] = r.timestamp();
                    }
                    ConsumerRecord<byte[], byte[]> in = r.streamTimeMark() ? tick(topics, p, r) : consumerRecord(r);
                    input.add(in);
                    // whole only if facts that may precede the admission (by the admission grace at most) are in the slice too
                    if (!fromStart && !r.streamTimeMark() && lastFactTs[0] >= firstFactTs[0] + grace) {
                        noteAdmission(topics, r, admittedInSlice);
                    }
                } else {
                    try {
                        Decision d = topics.decisions().valueSerde().deserializer().deserialize(r.topic(), r.value());
                        if (d != null) {
                            recorded.computeIfAbsent(d.getRequestId(), k -> new ArrayList<>()).add(new ReplayReport.Recorded(d, r.where()));
                        }
                    } catch (EventDecodingException e) {
                        report.undecodable++;
                    }
                }
            }, progress);
            progress.start("replaying " + facts.name() + "-" + p + " (" + input.size() + " facts) in a fresh decider", -1);
            List<Decision> replayedList;
            try {
                replayedList = DeciderReplay.replayPartition(policy, topics, input);
            } finally {
                progress.done();
            }
            Map<String, List<Decision>> replayed = new LinkedHashMap<>();
            for (Decision d : replayedList) {
                replayed.computeIfAbsent(d.getRequestId(), k -> new ArrayList<>()).add(d);
            }
            compare(report, p, input.size(), recorded, replayed, fromStart, admittedInSlice, lastFactTs[0]);
        }
        report.elapsedNanos = System.nanoTime() - t0;
        report.tokenHint = tokenOnlyDifferences(report);
        return report;
    }

    private static void compare(ReplayReport report, int p, int factCount, Map<String, List<ReplayReport.Recorded>> recorded,
                                Map<String, List<Decision>> replayed, boolean fromStart, Set<String> admittedInSlice, long lastFactTs) {
        ReplayReport.PartitionResult pr = new ReplayReport.PartitionResult(p, factCount);
        Set<String> ids = new java.util.LinkedHashSet<>(recorded.keySet());
        ids.addAll(replayed.keySet());
        for (String id : ids) {
            List<ReplayReport.Recorded> rec = new ArrayList<>(recorded.getOrDefault(id, List.of()));
            int before = rec.size();
            rec.removeIf(r -> r.decision().getStreamTimeMs() > lastFactTs); // decided on facts after the slice
            report.afterSlice += before - rec.size();
            List<Decision> rep = replayed.getOrDefault(id, List.of());
            pr.recordedDecisions += rec.size();
            pr.replayedDecisions += rep.size();
            boolean beganBefore = (!rec.isEmpty() && rec.get(0).decision().getSeq() != 0) || (!fromStart && !admittedInSlice.contains(id));
            if (beganBefore) {
                pr.partial++;
                continue;
            }
            pr.compared++;
            int n = Math.max(rec.size(), rep.size());
            int diffAt = -1;
            for (int i = 0; i < n; i++) {
                Decision a = i < rec.size() ? rec.get(i).decision() : null;
                Decision b = i < rep.size() ? rep.get(i) : null;
                if (a == null || !a.equals(b)) {
                    diffAt = i;
                    break;
                }
            }
            if (diffAt < 0) {
                pr.identical++;
                continue;
            }
            pr.different++;
            ReplayReport.Recorded a = diffAt < rec.size() ? rec.get(diffAt) : null;
            Decision b = diffAt < rep.size() ? rep.get(diffAt) : null;
            report.addDifference(new ReplayReport.Difference(id, p, diffAt, rec.size(), rep.size(), a, b,
                    a != null && b != null ? RecordDiff.of(a.decision(), b) : List.of()));
        }
        report.partitions.add(pr);
    }

    /** True when every difference is a TransferOrder that differs in its auth_token alone: another auth.key. */
    private static boolean tokenOnlyDifferences(ReplayReport report) {
        if (report.differences.isEmpty()) {
            return false;
        }
        for (ReplayReport.Difference d : report.differences) {
            if (d.recorded() == null || d.replayed() == null || !(d.replayed().getPayload() instanceof TransferOrder)
                    || d.fields().size() != 1 || !d.fields().get(0).startsWith("payload.auth_token")) {
                return false;
            }
        }
        return true;
    }

    private static void noteAdmission(Topics topics, LogRecord r, Set<String> admitted) {
        try {
            RequestEvent e = topics.requestEvents().valueSerde().deserializer().deserialize(r.topic(), r.value());
            if (e != null && e.getPayload() instanceof RequestAdmitted) {
                admitted.add(e.getRequestId());
            }
        } catch (EventDecodingException ignored) {
            // the decider dead-letters it; nothing to note
        }
    }

    private static ConsumerRecord<byte[], byte[]> consumerRecord(LogRecord r) {
        return new ConsumerRecord<>(r.topic(), r.partition(), r.offset(), r.timestamp(), TimestampType.CREATE_TIME,
                r.key() == null ? -1 : r.key().length, r.value() == null ? -1 : r.value().length, r.key(), r.value(), new RecordHeaders(),
                Optional.empty());
    }

    /** A stream-time mark becomes a Tick: it advances stream time and fires timers, exactly what the original record did for this request. */
    private static ConsumerRecord<byte[], byte[]> tick(Topics topics, int p, LogRecord mark) {
        String key = "tick/" + p;
        RequestEvent e = RequestEvent.newBuilder().setRequestId(key).setEventId(key + "/mark/" + mark.offset()).setSource("stream-time-mark")
                .setEventTimeMs(mark.timestamp()).setPayload(Tick.newBuilder().setPartition(p).build()).build();
        byte[] k = key.getBytes(StandardCharsets.UTF_8);
        byte[] v = topics.requestEvents().valueSerde().serializer().serialize(topics.requestEvents().name(), e);
        return new ConsumerRecord<>(mark.topic(), p, mark.offset(), mark.timestamp(), TimestampType.CREATE_TIME, k.length, v.length, k, v,
                new RecordHeaders(), Optional.empty());
    }
}
