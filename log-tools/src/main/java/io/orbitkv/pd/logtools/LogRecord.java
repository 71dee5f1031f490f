package io.orbitkv.pd.logtools;

import io.orbitkv.pd.tracing.Marks;
import java.nio.charset.StandardCharsets;
import java.util.Objects;

/**
 * One record of the log as it was stored: where it was (topic, partition, offset), its timestamp and its raw key
 * and value bytes. The tools decode values with the deployment's real serdes, so a record that does not decode is
 * reported where it is instead of being lost.
 *
 * <p>A <em>stream-time mark</em> ({@link #streamTimeMark()}) has no key and no value: in an export filtered to
 * some requests it stands for a record of another request that advanced the partition's stream time, so that a
 * replay of the filtered file fires the same timers at the same stream times as the original run.
 *
 * @param role      what the topic is (facts, decisions, ...)
 * @param topic     the topic's name in the deployment it came from
 * @param partition partition
 * @param offset    offset in that partition
 * @param timestamp record timestamp (ms); for decisions this is the decider's stream time
 * @param key       raw key bytes, or null
 * @param value     raw value bytes, or null (tombstone, or a stream-time mark)
 * @param streamTimeMark true for a stream-time mark
 * @param timing    the record's {@code orbitkv-timing} header (its writer's wall-clock marks, {@code Marks}), or null
 */
public record LogRecord(TopicRole role, String topic, int partition, long offset, long timestamp, byte[] key, byte[] value,
                        boolean streamTimeMark, String timing) {

    public LogRecord {
        Objects.requireNonNull(role, "role");
        Objects.requireNonNull(topic, "topic");
    }

    public static LogRecord of(TopicRole role, String topic, int partition, long offset, long timestamp, byte[] key, byte[] value) {
        return new LogRecord(role, topic, partition, offset, timestamp, key, value, false, null);
    }

    /** A record with its timing marks ({@code orbitkv-timing} header value, or null). */
    public static LogRecord of(TopicRole role, String topic, int partition, long offset, long timestamp, byte[] key, byte[] value, String timing) {
        return new LogRecord(role, topic, partition, offset, timestamp, key, value, false, timing);
    }

    /** A stream-time mark: a record of another request at this offset advanced stream time to {@code timestamp}. */
    public static LogRecord mark(String topic, int partition, long offset, long timestamp) {
        return new LogRecord(TopicRole.REQUEST_EVENTS, topic, partition, offset, timestamp, null, null, true, null);
    }

    /** The writer's timing marks (none when the record carries no {@code orbitkv-timing} header). */
    public Marks marks() {
        return Marks.parse(timing);
    }

    /** The key as a string (keys are UTF-8 request or engine ids), or null. */
    public String keyString() {
        return key == null ? null : new String(key, StandardCharsets.UTF_8);
    }

    /** {@code topic-partition@offset}, the way Kafka tools name a record. */
    public String where() {
        return topic + "-" + partition + "@" + offset;
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof LogRecord r && role == r.role && topic.equals(r.topic) && partition == r.partition && offset == r.offset
                && timestamp == r.timestamp && streamTimeMark == r.streamTimeMark && java.util.Arrays.equals(key, r.key)
                && java.util.Arrays.equals(value, r.value) && Objects.equals(timing, r.timing);
    }

    @Override
    public int hashCode() {
        return Objects.hash(role, topic, partition, offset, timestamp, streamTimeMark, java.util.Arrays.hashCode(key),
                java.util.Arrays.hashCode(value), timing);
    }

    @Override
    public String toString() {
        return (streamTimeMark ? "mark " : "") + where() + " ts=" + timestamp + " key=" + keyString() + " value="
                + (value == null ? "null" : value.length + " bytes");
    }
}
