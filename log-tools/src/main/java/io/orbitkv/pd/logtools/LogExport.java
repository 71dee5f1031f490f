package io.orbitkv.pd.logtools;

import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

/**
 * Writes a slice of the log to an export file ({@link LogFile}): everything the source holds, or only what
 * concerns some requests. A filtered export keeps, for each partition a kept request lives in, a
 * <em>stream-time mark</em> for every record of other requests that advanced the partition's stream time while the
 * request lived: a replay of the small file then fires the request's timers at the same stream times as the
 * original run and reproduces its decisions exactly.
 */
public final class LogExport {

    /** Most stream-time marks a filtered export keeps (beyond that, its timers may replay at other stream times). */
    static final int MAX_MARKS = 2_000_000;

    /** What was written. */
    public record Result(Path file, long records, long marks, Map<TopicRole, Long> byRole) { }

    private LogExport() { }

    /**
     * @param requestIds null for everything; else only these requests' facts, decisions and dead letters (plus
     *                   the engine registrations and the stream-time marks their replay needs)
     * @param allPartitions with {@code requestIds}: read every partition, not only the one the default
     *                      partitioner picks for each id
     */
    public static Result export(LogSource source, Path file, Set<String> requestIds, boolean allPartitions, Progress progress) {
        LogSlice in = source.slice();
        if (requestIds == null) {
            LogSlice header = new LogSlice(in.origin(), in.serdeMode(), System.currentTimeMillis(), in.filter(), in.topics());
            Map<TopicRole, Long> byRole = new HashMap<>();
            LogFileWriter w = LogFile.create(file, header);
            try {
                source.read(LogSource.RecordFilter.ALL, r -> {
                    w.write(r);
                    byRole.merge(r.role(), 1L, Long::sum);
                }, progress);
                w.close();
            } catch (RuntimeException e) {
                w.abandon();
                throw e;
            }
            return new Result(w.target(), w.records(), 0, byRole);
        }
        Set<ByteKey> keys = new HashSet<>();
        requestIds.forEach(id -> keys.add(new ByteKey(id.getBytes(StandardCharsets.UTF_8))));
        Map<TopicRole, Set<Integer>> wanted = new HashMap<>();
        if (!allPartitions) {
            for (TopicRole role : new TopicRole[] {TopicRole.REQUEST_EVENTS, TopicRole.DECISIONS, TopicRole.ENGINE_COMMANDS, TopicRole.ANSWERS}) {
                int n = in.partitionCount(role);
                Set<Integer> ps = new HashSet<>();
                for (String id : requestIds) {
                    if (n > 0) {
                        ps.add(Partitioning.partitionOf(id, n));
                    }
                }
                wanted.put(role, ps);
            }
        }
        List<LogRecord> kept = new ArrayList<>();
        Map<Integer, Long> streamTime = new HashMap<>();
        Map<Integer, LogRecord> pendingMark = new HashMap<>();
        Set<Integer> started = new HashSet<>();
        long[] lastKept = {Long.MIN_VALUE};
        long[] marks = {0};
        source.read(new LogSource.RecordFilter() {
            @Override
            public boolean wantsPartition(TopicRole role, int partition) {
                Set<Integer> ps = wanted.get(role);
                return role != TopicRole.ENGINE_COMMANDS && (ps == null || ps.contains(partition));
            }
        }, r -> {
            boolean mine = r.key() != null && keys.contains(new ByteKey(r.key()));
            if (r.role() == TopicRole.REQUEST_EVENTS) {
                long before = streamTime.getOrDefault(r.partition(), Long.MIN_VALUE);
                streamTime.put(r.partition(), Math.max(before, r.timestamp()));
                if (!mine) {
                    if (r.timestamp() > before) {
                        LogRecord mark = LogRecord.mark(r.topic(), r.partition(), r.offset(), r.timestamp());
                        if (started.contains(r.partition())) {
                            if (marks[0] < MAX_MARKS) {
                                kept.add(mark);
                                marks[0]++;
                            }
                        } else {
                            pendingMark.put(r.partition(), mark);
                        }
                    }
                    return;
                }
                if (started.add(r.partition())) {
                    LogRecord mark = pendingMark.remove(r.partition());
                    if (mark != null) {
                        kept.add(mark);
                        marks[0]++;
                    }
                }
            }
            if (mine || r.role() == TopicRole.ENGINES) {
                kept.add(r);
                if (mine) {
                    lastKept[0] = Math.max(lastKept[0], r.timestamp());
                }
            }
        }, progress);
        kept.removeIf(r -> r.streamTimeMark() && r.timestamp() > lastKept[0]);
        LogSlice header = new LogSlice(in.origin(), in.serdeMode(), System.currentTimeMillis(), "requests " + String.join(", ",
                new TreeSet<>(requestIds)), in.topics());
        Map<TopicRole, Long> byRole = new HashMap<>();
        LogFileWriter w = LogFile.create(file, header);
        long m = 0;
        try {
            for (LogRecord r : kept) {
                w.write(r);
                if (r.streamTimeMark()) {
                    m++;
                } else {
                    byRole.merge(r.role(), 1L, Long::sum);
                }
            }
            w.close();
        } catch (RuntimeException e) {
            w.abandon();
            throw e;
        }
        return new Result(w.target(), w.records(), m, byRole);
    }

    private record ByteKey(byte[] bytes) {
        @Override
        public boolean equals(Object o) {
            return o instanceof ByteKey k && Arrays.equals(bytes, k.bytes);
        }

        @Override
        public int hashCode() {
            return Arrays.hashCode(bytes);
        }
    }
}
