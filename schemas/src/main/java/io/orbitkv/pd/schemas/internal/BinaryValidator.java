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
    private static final Schema STRING = Schema.create(Schema.Type.STRING);

    private final String topic;
    /** Field names from the root to the current position; joined only when reporting an error. */
    private final String[] names = new String[MAX_DEPTH + 2];
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
        v.names[0] = schema.getName();
        v.walk(schema, 0);
        if (v.pos != end) {
            throw new EventDecodingException(Reason.TRAILING_BYTES, topic,
                    (end - v.pos) + " bytes left after a complete " + schema.getName() + " record");
        }
    }

    private void walk(Schema s, int depth) {
        if (depth > MAX_DEPTH) {
            throw fail(Reason.MALFORMED, depth, "nesting deeper than " + MAX_DEPTH);
        }
        switch (s.getType()) {
            case NULL -> { }
            case BOOLEAN -> {
                int b = readByte(depth);
                if (b != 0 && b != 1) {
                    throw fail(Reason.MALFORMED, depth, "boolean byte must be 0 or 1, got " + b);
                }
            }
            case INT -> {
                long v = readVarLong(depth);
                if (v < Integer.MIN_VALUE || v > Integer.MAX_VALUE) {
                    throw fail(Reason.MALFORMED, depth, "int out of range: " + v);
                }
            }
            case LONG -> readVarLong(depth);
            case FLOAT -> skipExactly(4, depth);
            case DOUBLE -> skipExactly(8, depth);
            case STRING, BYTES -> skipSized(depth);
            case FIXED -> skipExactly(s.getFixedSize(), depth);
            case ENUM -> {
                long i = readVarLong(depth);
                if (i < 0 || i >= s.getEnumSymbols().size()) {
                    throw fail(Reason.MALFORMED, depth, "enum ordinal " + i + " outside 0.." + (s.getEnumSymbols().size() - 1));
                }
            }
            case UNION -> {
                long i = readVarLong(depth);
                if (i < 0 || i >= s.getTypes().size()) {
                    throw fail(Reason.MALFORMED, depth, "union branch " + i + " outside 0.." + (s.getTypes().size() - 1));
                }
                Schema branch = s.getTypes().get((int) i);
                names[depth + 1] = "[" + branchName(branch) + "]";
                walk(branch, depth + 1);
            }
            case RECORD -> {
                for (Schema.Field f : s.getFields()) {
                    names[depth + 1] = f.name();
                    walk(f.schema(), depth + 1);
                }
            }
            case ARRAY -> walkBlocks(depth, s.getElementType(), null);
            case MAP -> walkBlocks(depth, s.getValueType(), STRING);
        }
    }

    private void walkBlocks(int depth, Schema item, Schema key) {
        long total = 0;
        while (true) {
            long count = readVarLong(depth);
            if (count == 0) {
                return;
            }
            if (count < 0) {
                if (count == Long.MIN_VALUE) {
                    throw fail(Reason.FORGED_LENGTH, depth, "block count " + count);
                }
                count = -count;
                long blockBytes = readVarLong(depth);
                if (blockBytes < 0 || blockBytes > remaining()) {
                    throw fail(Reason.FORGED_LENGTH, depth, "block size " + blockBytes + " with " + remaining() + " bytes left");
                }
            }
            total += count;
            if (total > MAX_COLLECTION_ITEMS) {
                throw fail(Reason.FORGED_LENGTH, depth, "collection of " + total + " items exceeds " + MAX_COLLECTION_ITEMS);
            }
            // Each item of a non-empty type needs at least one byte; a count above the bytes left is forged.
            if (minBytes(item) + (key == null ? 0 : 1) > 0 && count > remaining()) {
                throw fail(Reason.FORGED_LENGTH, depth, "collection count " + count + " with " + remaining() + " bytes left");
            }
            for (long i = 0; i < count; i++) {
                if (key != null) {
                    names[depth + 1] = "key";
                    walk(key, depth + 1);
                }
                names[depth + 1] = "[]";
                walk(item, depth + 1);
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

    private int readByte(int depth) {
        if (pos >= end) {
            throw fail(Reason.TRUNCATED, depth, "record ends early");
        }
        return buf[pos++] & 0xff;
    }

    private long readVarLong(int depth) {
        long raw = 0;
        int shift = 0;
        while (true) {
            int b = readByte(depth);
            raw |= (long) (b & 0x7f) << shift;
            if ((b & 0x80) == 0) {
                break;
            }
            shift += 7;
            if (shift > 63) {
                throw fail(Reason.MALFORMED, depth, "varint longer than 10 bytes");
            }
        }
        return (raw >>> 1) ^ -(raw & 1);
    }

    private void skipSized(int depth) {
        long len = readVarLong(depth);
        if (len < 0) {
            throw fail(Reason.FORGED_LENGTH, depth, "negative length " + len);
        }
        if (len > remaining()) {
            throw fail(Reason.FORGED_LENGTH, depth, "length " + len + " with only " + remaining() + " bytes left");
        }
        pos += (int) len;
    }

    private void skipExactly(int n, int depth) {
        if (n > remaining()) {
            throw fail(Reason.TRUNCATED, depth, "needs " + n + " bytes, " + remaining() + " left");
        }
        pos += n;
    }

    private EventDecodingException fail(Reason reason, int depth, String what) {
        StringBuilder path = new StringBuilder(names[0]);
        for (int i = 1; i <= depth && i < names.length; i++) {
            if (!names[i].startsWith("[")) {
                path.append('.');
            }
            path.append(names[i]);
        }
        return new EventDecodingException(reason, topic, "field " + path + ": " + what);
    }
}
