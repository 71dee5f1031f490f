package io.orbitkv.pd.kvbridge;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.msgpack.core.MessageBufferPacker;
import org.msgpack.core.MessagePack;

/**
 * vLLM's KV-event payloads written as its publisher writes them (msgspec msgpack, vllm/distributed/kv_events.py at the
 * release docs/vllm.md pins): the batch {@code [ts, events, data_parallel_rank]}; an event positional
 * ({@code ["BlockStored", ...]}, up to v0.23) or a map tagged by {@code "type"} whose None-defaulted fields are left out
 * when None (from PR #42892). For the tests, the benchmark and a simulated engine that publishes as vLLM does; nothing of
 * vLLM's code.
 */
public final class VllmWire {

    private VllmWire() {
    }

    /** A BlockStored of {@code hashes} (ints, as vLLM's default int hashes), each block {@code blockSize} tokens from {@code firstToken}. */
    public static List<Object> storedPositional(long parent, int blockSize, int firstToken, long... hashes) {
        return new ArrayList<>(Arrays.asList("BlockStored", longs(hashes), parent == 0 ? null : parent, tokens(firstToken, hashes.length * blockSize),
                blockSize, null, "GPU", null, new ArrayList<>(java.util.Collections.nCopies(hashes.length, null)), 0, "full_attention", null));
    }

    public static Map<String, Object> storedNamed(long parent, int blockSize, int firstToken, long... hashes) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("type", "BlockStored");
        m.put("block_hashes", longs(hashes));
        m.put("parent_block_hash", parent == 0 ? null : parent);
        m.put("token_ids", tokens(firstToken, hashes.length * blockSize));
        m.put("block_size", blockSize);
        m.put("lora_id", null);
        m.put("medium", "GPU");
        m.put("lora_name", null);
        m.put("extra_keys", new ArrayList<>(java.util.Collections.nCopies(hashes.length, null)));
        m.put("group_idx", 0);
        m.put("kv_cache_spec_kind", "full_attention");
        return m;
    }

    public static List<Object> removedPositional(long... hashes) {
        return new ArrayList<>(Arrays.asList("BlockRemoved", longs(hashes), "GPU", 0));
    }

    public static Map<String, Object> removedNamed(long... hashes) {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("type", "BlockRemoved");
        m.put("block_hashes", longs(hashes));
        m.put("medium", "GPU");
        return m;
    }

    public static List<Object> clearedPositional() {
        return List.of("AllBlocksCleared");
    }

    public static Map<String, Object> clearedNamed() {
        return Map.of("type", "AllBlocksCleared");
    }

    public static List<Object> longs(long... v) {
        List<Object> out = new ArrayList<>();
        for (long x : v) {
            out.add(x < 0 ? new BigInteger(Long.toUnsignedString(x)) : x); // a hash with the top bit set: a msgpack uint64
        }
        return out;
    }

    public static List<Object> tokens(int first, int n) {
        List<Object> out = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            out.add(first + i);
        }
        return out;
    }

    /** The batch payload: {@code [ts, events, data_parallel_rank]}. */
    public static byte[] batch(double ts, List<?> events, Integer rank) {
        return pack(new ArrayList<>(Arrays.asList(ts, events, rank)));
    }

    public static byte[] pack(Object v) {
        try (MessageBufferPacker p = MessagePack.newDefaultBufferPacker()) {
            write(p, v);
            return p.toByteArray();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static void write(MessageBufferPacker p, Object v) throws IOException {
        switch (v) {
            case null -> p.packNil();
            case String s -> p.packString(s);
            case Integer i -> p.packInt(i);
            case Long l -> p.packLong(l);
            case BigInteger b -> p.packBigInteger(b);
            case Double d -> p.packDouble(d);
            case Boolean b -> p.packBoolean(b);
            case byte[] b -> p.packBinaryHeader(b.length).writePayload(b);
            case List<?> l -> {
                p.packArrayHeader(l.size());
                for (Object o : l) {
                    write(p, o);
                }
            }
            case Map<?, ?> m -> {
                p.packMapHeader(m.size());
                for (Map.Entry<?, ?> e : m.entrySet()) {
                    write(p, e.getKey());
                    write(p, e.getValue());
                }
            }
            default -> throw new IllegalArgumentException("cannot pack " + v.getClass());
        }
    }
}
