package io.orbitkv.pd.kvbridge;

import io.orbitkv.pd.events.AllBlocksCleared;
import io.orbitkv.pd.events.BlockRemoved;
import io.orbitkv.pd.events.BlockStored;
import java.io.IOException;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import org.msgpack.core.MessageFormat;
import org.msgpack.core.MessagePack;
import org.msgpack.core.MessageUnpacker;
import org.msgpack.value.ValueType;

/**
 * Reads the payload of one message of a vLLM engine's KV-cache event publisher ({@code --kv-events-config}, ZMQ PUB frames
 * {@code [topic, 8-byte big-endian sequence, payload]}): a msgpack {@code KVEventBatch}, i.e. the array
 * {@code [ts, events, data_parallel_rank]} (vllm/distributed/kv_events.py, {@code EventBatch}, {@code array_like}), into the
 * project's {@code KvCacheEvent} payloads, field for field.
 *
 * <p>Both encodings of an event that vLLM releases have used are read: the positional array with the class name first
 * ({@code ["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium, lora_name, ...]}, up to
 * v0.23) and the map tagged by {@code "type"} with named fields (from vLLM PR #42892, v0.24 on), whose fields that default
 * to None are left out when None. Trailing fields a release added (medium, lora_name, extra_keys, group_idx, ...) are
 * optional; fields the project's schema has no place for (group_idx, kv_cache_spec_*, locality) and unknown map keys are
 * skipped. A block hash is vLLM's {@code ExternalBlockHash}: an integer (the default: the low 64 bits of the hash,
 * {@code VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES}) becomes its 8 bytes big-endian; bytes stay bytes.
 *
 * <p>Anything else is refused with an {@link Invalid} that names where (e.g. {@code events[3].token_ids}) and what.
 */
public final class VllmKvEvents {

    private VllmKvEvents() {
    }

    /** A decoded batch: vLLM's timestamp (seconds), the events in order, the data-parallel rank (null: not sent). */
    public record Batch(double ts, List<Object> events, Integer dataParallelRank) { }

    /** A payload this reader refuses, with where and why. */
    public static final class Invalid extends Exception {
        Invalid(String message) {
            super(message);
        }
    }

    /** Decodes one publisher payload. */
    public static Batch decode(byte[] payload) throws Invalid {
        try (MessageUnpacker u = MessagePack.newDefaultUnpacker(payload)) {
            if (!u.hasNext() || u.getNextFormat().getValueType() != ValueType.ARRAY) {
                throw new Invalid("a KVEventBatch is a msgpack array [ts, events, data_parallel_rank], got " + (u.hasNext() ? kind(u) : "nothing"));
            }
            int n = u.unpackArrayHeader();
            if (n < 2) {
                throw new Invalid("a KVEventBatch has at least [ts, events], got an array of " + n);
            }
            double ts = number(u, "ts");
            if (u.getNextFormat().getValueType() != ValueType.ARRAY) {
                throw new Invalid("events: an array, got " + kind(u));
            }
            int count = u.unpackArrayHeader();
            List<Object> events = new ArrayList<>(count);
            for (int i = 0; i < count; i++) {
                events.add(event(u, "events[" + i + "]"));
            }
            Integer rank = null;
            if (n >= 3) {
                rank = u.tryUnpackNil() ? null : (int) integer(u, "data_parallel_rank");
            }
            for (int i = 3; i < n; i++) {
                u.skipValue(); // a later release's batch field
            }
            if (u.hasNext()) {
                throw new Invalid("bytes after the KVEventBatch");
            }
            return new Batch(ts, events, rank);
        } catch (IOException | RuntimeException e) {
            throw new Invalid("not a msgpack KVEventBatch: " + e.getMessage());
        }
    }

    private static Object event(MessageUnpacker u, String at) throws IOException, Invalid {
        ValueType t = u.getNextFormat().getValueType();
        if (t == ValueType.ARRAY) {
            return positional(u, at);
        }
        if (t == ValueType.MAP) {
            return named(u, at);
        }
        throw new Invalid(at + ": an event is an array [\"BlockStored\", ...] or a map {\"type\": ...}, got " + kind(u));
    }

    /** {@code [tag, field, field, ...]}: the fields in declaration order, trailing ones optional. */
    private static Object positional(MessageUnpacker u, String at) throws IOException, Invalid {
        int n = u.unpackArrayHeader();
        if (n < 1) {
            throw new Invalid(at + ": an empty event array (no type)");
        }
        String type = string(u, at + "[0] (type)");
        switch (type) {
            case "BlockStored" -> {
                if (n < 5) {
                    throw new Invalid(at + ": BlockStored needs [type, block_hashes, parent_block_hash, token_ids, block_size], got " + n + " elements");
                }
                BlockStored.Builder b = BlockStored.newBuilder().setBlockHashes(hashes(u, at + ".block_hashes"))
                        .setParentBlockHash(u.tryUnpackNil() ? null : hash(u, at + ".parent_block_hash")).setTokenIds(ints(u, at + ".token_ids"))
                        .setBlockSize((int) integer(u, at + ".block_size"));
                int i = 5;
                if (i++ < n) {
                    b.setLoraId(u.tryUnpackNil() ? null : (int) integer(u, at + ".lora_id"));
                }
                if (i++ < n) {
                    b.setMedium(u.tryUnpackNil() ? null : string(u, at + ".medium"));
                }
                if (i++ < n) {
                    b.setLoraName(u.tryUnpackNil() ? null : string(u, at + ".lora_name"));
                }
                if (i++ < n) {
                    b.setExtraKeys(u.tryUnpackNil() ? null : extraKeys(u, at + ".extra_keys"));
                }
                for (; i < n; i++) {
                    u.skipValue(); // group_idx, kv_cache_spec_kind, kv_cache_spec_sliding_window, locality, later fields
                }
                return checked(b.build(), at);
            }
            case "BlockRemoved" -> {
                if (n < 2) {
                    throw new Invalid(at + ": BlockRemoved needs [type, block_hashes], got " + n + " elements");
                }
                BlockRemoved.Builder b = BlockRemoved.newBuilder().setBlockHashes(hashes(u, at + ".block_hashes"));
                if (n >= 3) {
                    b.setMedium(u.tryUnpackNil() ? null : string(u, at + ".medium"));
                }
                for (int i = 3; i < n; i++) {
                    u.skipValue(); // group_idx, locality, later fields
                }
                return b.build();
            }
            case "AllBlocksCleared" -> {
                for (int i = 1; i < n; i++) {
                    u.skipValue();
                }
                return AllBlocksCleared.newBuilder().setReason("reset").build();
            }
            default -> throw new Invalid(at + ": unknown event type '" + type + "' (BlockStored, BlockRemoved or AllBlocksCleared)");
        }
    }

    /** {@code {"type": ..., name: value, ...}}: fields by name, any order; None-valued optional fields may be absent. */
    private static Object named(MessageUnpacker u, String at) throws IOException, Invalid {
        int n = u.unpackMapHeader();
        String type = null;
        List<ByteBuffer> hashes = null;
        ByteBuffer parent = null;
        List<Integer> tokens = null;
        Integer blockSize = null;
        Integer loraId = null;
        String medium = null;
        String loraName = null;
        List<List<String>> extra = null;
        for (int i = 0; i < n; i++) {
            String key = string(u, at + " key");
            String f = at + "." + key;
            switch (key) {
                case "type" -> type = string(u, f);
                case "block_hashes" -> hashes = hashes(u, f);
                case "parent_block_hash" -> parent = u.tryUnpackNil() ? null : hash(u, f);
                case "token_ids" -> tokens = ints(u, f);
                case "block_size" -> blockSize = (int) integer(u, f);
                case "lora_id" -> loraId = u.tryUnpackNil() ? null : (int) integer(u, f);
                case "medium" -> medium = u.tryUnpackNil() ? null : string(u, f);
                case "lora_name" -> loraName = u.tryUnpackNil() ? null : string(u, f);
                case "extra_keys" -> extra = u.tryUnpackNil() ? null : extraKeys(u, f);
                default -> u.skipValue(); // group_idx, kv_cache_spec_*, locality, a later release's field
            }
        }
        if (type == null) {
            throw new Invalid(at + ": a map event without \"type\"");
        }
        switch (type) {
            case "BlockStored" -> {
                require(hashes, at, "block_hashes");
                require(tokens, at, "token_ids");
                require(blockSize, at, "block_size");
                return checked(BlockStored.newBuilder().setBlockHashes(hashes).setParentBlockHash(parent).setTokenIds(tokens).setBlockSize(blockSize)
                        .setLoraId(loraId).setMedium(medium).setLoraName(loraName).setExtraKeys(extra).build(), at);
            }
            case "BlockRemoved" -> {
                require(hashes, at, "block_hashes");
                return BlockRemoved.newBuilder().setBlockHashes(hashes).setMedium(medium).build();
            }
            case "AllBlocksCleared" -> {
                return AllBlocksCleared.newBuilder().setReason("reset").build();
            }
            default -> throw new Invalid(at + ": unknown event type '" + type + "' (BlockStored, BlockRemoved or AllBlocksCleared)");
        }
    }

    private static void require(Object v, String at, String field) throws Invalid {
        if (v == null) {
            throw new Invalid(at + ": " + field + " missing");
        }
    }

    /** The schema's rule: block_hashes[i] holds token_ids[i*block_size, (i+1)*block_size). */
    private static BlockStored checked(BlockStored s, String at) throws Invalid {
        if (s.getBlockSize() < 1) {
            throw new Invalid(at + ".block_size: must be positive, got " + s.getBlockSize());
        }
        if (s.getBlockHashes().isEmpty()) {
            throw new Invalid(at + ".block_hashes: a BlockStored stores at least one block");
        }
        long want = (long) s.getBlockHashes().size() * s.getBlockSize();
        if (s.getTokenIds().size() != want) {
            throw new Invalid(at + ".token_ids: " + s.getTokenIds().size() + " token ids for " + s.getBlockHashes().size() + " blocks of "
                    + s.getBlockSize() + " (" + want + " expected)");
        }
        return s;
    }

    private static List<ByteBuffer> hashes(MessageUnpacker u, String at) throws IOException, Invalid {
        if (u.getNextFormat().getValueType() != ValueType.ARRAY) {
            throw new Invalid(at + ": an array of block hashes, got " + kind(u));
        }
        int n = u.unpackArrayHeader();
        List<ByteBuffer> out = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            out.add(hash(u, at + "[" + i + "]"));
        }
        return out;
    }

    /** An ExternalBlockHash: an integer as its 8 bytes big-endian (uint64 as is), bytes as they are. */
    private static ByteBuffer hash(MessageUnpacker u, String at) throws IOException, Invalid {
        MessageFormat f = u.getNextFormat();
        switch (f.getValueType()) {
            case INTEGER -> {
                long v = f == MessageFormat.UINT64 ? u.unpackBigInteger().longValue() : u.unpackLong(); // a uint64's bits
                return ByteBuffer.wrap(ByteBuffer.allocate(8).putLong(v).array());
            }
            case BINARY -> {
                int len = u.unpackBinaryHeader();
                if (len < 8) {
                    throw new Invalid(at + ": a block hash of " + len + " bytes (at least 8)");
                }
                return ByteBuffer.wrap(u.readPayload(len));
            }
            default -> throw new Invalid(at + ": a block hash is an integer or bytes, got " + kind(u));
        }
    }

    private static List<Integer> ints(MessageUnpacker u, String at) throws IOException, Invalid {
        if (u.getNextFormat().getValueType() != ValueType.ARRAY) {
            throw new Invalid(at + ": an array of integers, got " + kind(u));
        }
        int n = u.unpackArrayHeader();
        List<Integer> out = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            long v = integer(u, at + "[" + i + "]");
            if (v < Integer.MIN_VALUE || v > Integer.MAX_VALUE) {
                throw new Invalid(at + "[" + i + "]: " + v + " does not fit a token id");
            }
            out.add((int) v);
        }
        return out;
    }

    /** Per block, the extra keys its hash covered (a tuple of anything in vLLM), each as text. */
    private static List<List<String>> extraKeys(MessageUnpacker u, String at) throws IOException, Invalid {
        if (u.getNextFormat().getValueType() != ValueType.ARRAY) {
            throw new Invalid(at + ": an array (one entry a block), got " + kind(u));
        }
        int n = u.unpackArrayHeader();
        List<List<String>> out = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            if (u.tryUnpackNil()) {
                out.add(null);
                continue;
            }
            if (u.getNextFormat().getValueType() != ValueType.ARRAY) {
                throw new Invalid(at + "[" + i + "]: a tuple of keys or None, got " + kind(u));
            }
            int k = u.unpackArrayHeader();
            List<String> keys = new ArrayList<>(k);
            for (int j = 0; j < k; j++) {
                keys.add(u.unpackValue().toString());
            }
            out.add(keys);
        }
        return out;
    }

    private static long integer(MessageUnpacker u, String at) throws IOException, Invalid {
        MessageFormat f = u.getNextFormat();
        if (f.getValueType() != ValueType.INTEGER) {
            throw new Invalid(at + ": an integer, got " + kind(u));
        }
        if (f == MessageFormat.UINT64) {
            BigInteger v = u.unpackBigInteger();
            if (v.bitLength() > 63) {
                throw new Invalid(at + ": " + v + " is out of range");
            }
            return v.longValue();
        }
        return u.unpackLong();
    }

    private static double number(MessageUnpacker u, String at) throws IOException, Invalid {
        ValueType t = u.getNextFormat().getValueType();
        if (t == ValueType.FLOAT) {
            return u.unpackDouble();
        }
        if (t == ValueType.INTEGER) {
            return integer(u, at);
        }
        throw new Invalid(at + ": a number, got " + kind(u));
    }

    private static String string(MessageUnpacker u, String at) throws IOException, Invalid {
        ValueType t = u.getNextFormat().getValueType();
        if (t == ValueType.STRING) {
            return u.unpackString();
        }
        if (t == ValueType.BINARY) { // msgspec writes str as str; a publisher that sends bytes for a name is read leniently
            int len = u.unpackBinaryHeader();
            return new String(u.readPayload(len), java.nio.charset.StandardCharsets.UTF_8);
        }
        throw new Invalid(at + ": a string, got " + kind(u));
    }

    private static String kind(MessageUnpacker u) throws IOException {
        return u.getNextFormat().getValueType().name().toLowerCase(java.util.Locale.ROOT);
    }
}
