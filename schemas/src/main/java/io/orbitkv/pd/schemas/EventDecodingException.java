package io.orbitkv.pd.schemas;

import java.util.Objects;

/**
 * A record that cannot be turned into an event. Carries where the bytes came from (topic, partition, offset
 * where known) and a typed {@link Reason}, so that the component that refused it can dead-letter it with a
 * reason a user can act on instead of crashing.
 */
public final class EventDecodingException extends RuntimeException {

    /** Why the bytes were refused. */
    public enum Reason {
        /** Null or zero-length value where an event was expected. */
        EMPTY,
        /** The first bytes are not this format's header (wrong magic byte, wrong serde mode, garbage). */
        BAD_HEADER,
        /** The header names a schema (fingerprint or registry id) that is not known. */
        UNKNOWN_SCHEMA,
        /** The payload ends before the schema says it should. */
        TRUNCATED,
        /** A length or count in the payload is negative or larger than the bytes that follow. */
        FORGED_LENGTH,
        /** The record is larger than the configured maximum. */
        OVERSIZED,
        /** Bytes are left over after the record was read. */
        TRAILING_BYTES,
        /** The payload is structurally wrong for its schema (bad union index, bad enum ordinal, bad UTF-8...). */
        MALFORMED,
        /** The schema registry could not be reached or answered an error. */
        REGISTRY_UNAVAILABLE
    }

    private final Reason reason;
    private final String topic;
    private final int partition;
    private final long offset;

    public EventDecodingException(Reason reason, String topic, String detail) {
        this(reason, topic, -1, -1L, detail, null);
    }

    public EventDecodingException(Reason reason, String topic, String detail, Throwable cause) {
        this(reason, topic, -1, -1L, detail, cause);
    }

    private EventDecodingException(Reason reason, String topic, int partition, long offset, String detail, Throwable cause) {
        super(message(reason, topic, partition, offset, detail), cause);
        this.reason = Objects.requireNonNull(reason, "reason");
        this.topic = topic;
        this.partition = partition;
        this.offset = offset;
    }

    /** The same failure, located at a partition and offset (known to the consumer, not to the deserializer). */
    public EventDecodingException at(int partition, long offset) {
        return new EventDecodingException(reason, topic, partition, offset, detail(), getCause());
    }

    public Reason reason() {
        return reason;
    }

    public String topic() {
        return topic;
    }

    /** Partition of the record, or -1 where unknown. */
    public int partition() {
        return partition;
    }

    /** Offset of the record, or -1 where unknown. */
    public long offset() {
        return offset;
    }

    /** The reason text without the location prefix. */
    public String detail() {
        String m = getMessage();
        int i = m.indexOf(": ");
        return i < 0 ? m : m.substring(i + 2);
    }

    private static String message(Reason reason, String topic, int partition, long offset, String detail) {
        StringBuilder b = new StringBuilder("cannot decode record from ").append(topic == null ? "?" : topic);
        if (partition >= 0) {
            b.append('-').append(partition);
        }
        if (offset >= 0) {
            b.append('@').append(offset);
        }
        return b.append(" (").append(reason).append("): ").append(detail).toString();
    }
}
