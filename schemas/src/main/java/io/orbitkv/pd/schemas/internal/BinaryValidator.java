package io.orbitkv.pd.schemas.internal;

import io.orbitkv.pd.schemas.EventDecodingException;
import io.orbitkv.pd.schemas.EventDecodingException.Reason;
import org.apache.avro.Schema;

/**
 * Walks Avro binary data against its writer schema and checks every length, count, union branch and enum
 * ordinal against the bytes actually present, before any decoder allocates anything. Avro's own decoder
 * allocates a buffer of the declared length first, so a forged length of 2 GiB in a 20-byte record would
 * cost 2 GiB of heap; after this walk every declared size is bounded by the record's real size.
 *
 * <p>Errors name the field by path (for example {@code RequestEvent.payload[PrefillCompleted].source_blocks}).
 */
public final class BinaryValidator {

    /** No collection in our contracts comes near this; a larger count is hostile. */
    public static final long MAX_COLLECTION_ITEMS = 1 << 20;
    private static final int MAX_DEPTH = 64;

    private final String topic;
    private final byte[] buf;
    private final int end;
    private int pos;

    private BinaryValidator(String topic, byte[] buf, int start, int end) {
        this.topic = topic;
        this.buf = buf;
        this.pos = start;
        this.end = end;
    }

    /**
     * Validates {@code buf[start, end)} as exactly one datum of {@code schema}.
     *
     * @throws EventDecodingException naming the field and what was wrong
     */
    public static void validate(String topic, Schema schema, byte[] buf, int start, int end) {
        BinaryValidator v = new BinaryValidator(topic, buf, start, end);
        v.walk(schema, schema.getName(), 0);
        if (v.pos != end) {
            throw new EventDecodingException(Reason.TRAILING_BYTES, topic,
                    (end - v.pos) + " bytes left after a complete " + schema.getName() + " record");
        }
    }

    private void walk(Schema s, String path, int depth) {
        if (depth > MAX_DEPTH) {
            throw fail(Reason.MALFORMED, path, "nesting deeper than " + MAX_DEPTH);
        }
        switch (s.getType()) {
            case NULL -> { }
            case BOOLEAN -> {
                int b = readByte(path);
                if (b != 0 && b != 1) {
                    throw fail(Reason.MALFORMED, path, "boolean byte must be 0 or 1, got " + b);
                }
            }
            case INT -> {
                long v = readVarLong(path);
                if (v < Integer.MIN_VALUE || v > Integer.MAX_VALUE) {
                    throw fail(Reason.MALFORMED, path, "int out of range: " + v);
                }
            }
            case LONG -> readVarLong(path);
            case FLOAT -> skipExactly(4, path);
            case DOUBLE -> skipExactly(8, path);
            case STRING, BYTES -> skipSized(path);
            case FIXED -> skipExactly(s.getFixedSize(), path);
            case ENUM -> {
                long i = readVarLong(path);
                if (i < 0 || i >= s.getEnumSymbols().size()) {
                    throw fail(Reason.MALFORMED, path, "enum ordinal " + i + " outside 0.." + (s.getEnumSymbols().size() - 1));
                }
            }
            case UNION -> {
                long i = readVarLong(path);
                if (i < 0 || i >= s.getTypes().size()) {
                    throw fail(Reason.MALFORMED, path, "union branch " + i + " outside 0.." + (s.getTypes().size() - 1));
                }
                Schema branch = s.getTypes().get((int) i);
                walk(branch, path + "[" + branchName(branch) + "]", depth + 1);
            }
            case RECORD -> {
                for (Schema.Field f : s.getFields()) {
                    walk(f.schema(), path + "." + f.name(), depth + 1);
                }
            }
            case ARRAY -> walkBlocks(path, depth, s.getElementType(), null);
            case MAP -> walkBlocks(path, depth, s.getValueType(), Schema.create(Schema.Type.STRING));
        }
    }

    private void walkBlocks(String path, int depth, Schema item, Schema key) {
        long total = 0;
        while (true) {
            long count = readVarLong(path);
            if (count == 0) {
                return;
            }
            if (count < 0) {
                if (count == Long.MIN_VALUE) {
                    throw fail(Reason.FORGED_LENGTH, path, "block count " + count);
                }
                count = -count;
                long blockBytes = readVarLong(path);
                if (blockBytes < 0 || blockBytes > remaining()) {
                    throw fail(Reason.FORGED_LENGTH, path, "block size " + blockBytes + " with " + remaining() + " bytes left");
                }
            }
            total += count;
            if (total > MAX_COLLECTION_ITEMS) {
                throw fail(Reason.FORGED_LENGTH, path, "collection of " + total + " items exceeds " + MAX_COLLECTION_ITEMS);
            }
            // Each item of a non-empty type needs at least one byte; a count above the bytes left is forged.
            if (minBytes(item) + (key == null ? 0 : 1) > 0 && count > remaining()) {
                throw fail(Reason.FORGED_LENGTH, path, "collection count " + count + " with " + remaining() + " bytes left");
            }
            for (long i = 0; i < count; i++) {
                if (key != null) {
                    walk(key, path + ".key", depth + 1);
                }
                walk(item, path + "[]", depth + 1);
            }
        }
    }

    private static int minBytes(Schema s) {
        return switch (s.getType()) {
            case NULL -> 0;
            case FIXED -> s.getFixedSize();
            case RECORD -> s.getFields().stream().mapToInt(f -> minBytes(f.schema())).sum();
            default -> 1;
        };
    }

    private static String branchName(Schema s) {
        return s.getType() == Schema.Type.RECORD || s.getType() == Schema.Type.ENUM || s.getType() == Schema.Type.FIXED
                ? s.getName() : s.getType().getName();
    }

    private int remaining() {
        return end - pos;
    }

    private int readByte(String path) {
        if (pos >= end) {
            throw fail(Reason.TRUNCATED, path, "record ends early");
        }
        return buf[pos++] & 0xff;
    }

    private long readVarLong(String path) {
        long raw = 0;
        int shift = 0;
        while (true) {
            int b = readByte(path);
            raw |= (long) (b & 0x7f) << shift;
            if ((b & 0x80) == 0) {
                break;
            }
            shift += 7;
            if (shift > 63) {
                throw fail(Reason.MALFORMED, path, "varint longer than 10 bytes");
            }
        }
        return (raw >>> 1) ^ -(raw & 1);
    }

    private void skipSized(String path) {
        long len = readVarLong(path);
        if (len < 0) {
            throw fail(Reason.FORGED_LENGTH, path, "negative length " + len);
        }
        if (len > remaining()) {
            throw fail(Reason.FORGED_LENGTH, path, "length " + len + " with only " + remaining() + " bytes left");
        }
        pos += (int) len;
    }

    private void skipExactly(int n, String path) {
        if (n > remaining()) {
            throw fail(Reason.TRUNCATED, path, "needs " + n + " bytes, " + remaining() + " left");
        }
        pos += n;
    }

    private EventDecodingException fail(Reason reason, String path, String what) {
        return new EventDecodingException(reason, topic, "field " + path + ": " + what);
    }
}
