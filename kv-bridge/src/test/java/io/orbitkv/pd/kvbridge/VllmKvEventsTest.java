package io.orbitkv.pd.kvbridge;

import static io.orbitkv.pd.kvbridge.VllmWire.batch;
import static io.orbitkv.pd.kvbridge.VllmWire.clearedNamed;
import static io.orbitkv.pd.kvbridge.VllmWire.clearedPositional;
import static io.orbitkv.pd.kvbridge.VllmWire.removedNamed;
import static io.orbitkv.pd.kvbridge.VllmWire.removedPositional;
import static io.orbitkv.pd.kvbridge.VllmWire.storedNamed;
import static io.orbitkv.pd.kvbridge.VllmWire.storedPositional;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.events.AllBlocksCleared;
import io.orbitkv.pd.events.BlockRemoved;
import io.orbitkv.pd.events.BlockStored;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** vLLM's KV-event batches, in both encodings its releases used, into the project's KvCacheEvent payloads — or refused by name. */
class VllmKvEventsTest {

    private static ByteBuffer h(long v) {
        return ByteBuffer.wrap(ByteBuffer.allocate(8).putLong(v).array());
    }

    @Test
    void positionalAndNamedEventsReadTheSame() throws Exception {
        long top = 0xF123_4567_89AB_CDEFL; // a hash with its top bit set: a msgpack uint64
        VllmKvEvents.Batch a = VllmKvEvents.decode(batch(1.5, List.of(storedPositional(0, 16, 100, 11, top), removedPositional(11),
                clearedPositional()), 0));
        VllmKvEvents.Batch b = VllmKvEvents.decode(batch(1.5, List.of(storedNamed(0, 16, 100, 11, top), removedNamed(11), clearedNamed()), 0));
        assertThat(a).isEqualTo(b);
        assertThat(a.ts()).isEqualTo(1.5);
        assertThat(a.dataParallelRank()).isZero();
        BlockStored s = (BlockStored) a.events().get(0);
        assertThat(s.getBlockHashes()).containsExactly(h(11), h(top));
        assertThat(s.getParentBlockHash()).isNull();
        assertThat(s.getTokenIds()).hasSize(32).startsWith(100, 101).endsWith(131);
        assertThat(s.getBlockSize()).isEqualTo(16);
        assertThat(s.getMedium()).isEqualTo("GPU");
        assertThat(((BlockRemoved) a.events().get(1)).getBlockHashes()).containsExactly(h(11));
        assertThat(((AllBlocksCleared) a.events().get(2)).getReason()).isEqualTo("reset");
    }

    @Test
    void olderReleasesFewerTrailingFieldsAndLaterReleasesMoreAreRead() throws Exception {
        // before `medium` (vLLM #19737): 5 elements; a future release's extra trailing fields and map keys are skipped
        List<Object> old = new ArrayList<>(Arrays.asList("BlockStored", VllmWire.longs(7), 3L, VllmWire.tokens(0, 16), 16));
        List<Object> future = storedPositional(7, 16, 0, 8);
        future.addAll(List.of("LOCAL", "something new"));
        Map<String, Object> futureMap = new LinkedHashMap<>(storedNamed(7, 16, 0, 8));
        futureMap.put("locality", "REMOTE");
        futureMap.put("a_new_field", List.of(1, 2));
        VllmKvEvents.Batch b = VllmKvEvents.decode(batch(2.0, List.of(old, future, futureMap, List.of("BlockRemoved", VllmWire.longs(7))), null));
        assertThat(b.events()).hasSize(4);
        assertThat(((BlockStored) b.events().get(0)).getParentBlockHash()).isEqualTo(h(3));
        assertThat(((BlockStored) b.events().get(0)).getMedium()).isNull();
        assertThat(b.events().get(1)).isEqualTo(b.events().get(2));
        assertThat(b.dataParallelRank()).isNull();
        // bytes hashes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0) stay bytes
        byte[] sha = new byte[32];
        sha[31] = 5;
        Map<String, Object> bytesHash = new LinkedHashMap<>(storedNamed(0, 16, 0, 1));
        bytesHash.put("block_hashes", List.of(sha));
        assertThat(((BlockStored) VllmKvEvents.decode(batch(0.0, List.of(bytesHash), 0)).events().get(0)).getBlockHashes())
                .containsExactly(ByteBuffer.wrap(sha));
        // the timestamp may come as an integer
        assertThat(VllmKvEvents.decode(VllmWire.pack(List.of(3, List.of()))).ts()).isEqualTo(3.0);
    }

    @Test
    void extraKeysBecomeTextPerBlock() throws Exception {
        Map<String, Object> m = new LinkedHashMap<>(storedNamed(0, 16, 0, 1, 2));
        m.put("extra_keys", Arrays.asList(null, List.of("my-lora", 7)));
        BlockStored s = (BlockStored) VllmKvEvents.decode(batch(0.0, List.of(m), 0)).events().get(0);
        assertThat(s.getExtraKeys()).hasSize(2);
        assertThat(s.getExtraKeys().get(0)).isNull();
        assertThat(s.getExtraKeys().get(1)).containsExactly("my-lora", "7");
    }

    @Test
    void whatIsNotAKvEventBatchIsRefusedNamingWhereAndWhat() {
        List<Object> shortTokens = storedPositional(0, 16, 0, 1);
        shortTokens.set(3, VllmWire.tokens(0, 15));
        Map<String, Object> noHashes = new LinkedHashMap<>(storedNamed(0, 16, 0, 1));
        noHashes.remove("block_hashes");
        Map<String, Object> untyped = new LinkedHashMap<>(storedNamed(0, 16, 0, 1));
        untyped.remove("type");
        Map<String, Object> stringHash = new LinkedHashMap<>(storedNamed(0, 16, 0, 1));
        stringHash.put("block_hashes", List.of("abc"));
        Map<String, Object> zeroBlock = new LinkedHashMap<>(storedNamed(0, 16, 0, 1));
        zeroBlock.put("block_size", 0);
        Map<String, Object> tinyHash = new LinkedHashMap<>(storedNamed(0, 16, 0, 1));
        tinyHash.put("block_hashes", List.of(new byte[] {1, 2}));
        assertRefused(batch(0.0, List.of(clearedNamed(), shortTokens), 0), "events[1].token_ids: 15 token ids for 1 blocks of 16 (16 expected)");
        assertRefused(batch(0.0, List.of(noHashes), 0), "events[0]: block_hashes missing");
        assertRefused(batch(0.0, List.of(untyped), 0), "events[0]: a map event without \"type\"");
        assertRefused(batch(0.0, List.of(List.of("BlockEvicted", List.of())), 0), "events[0]: unknown event type 'BlockEvicted'");
        assertRefused(batch(0.0, List.of(stringHash), 0), "events[0].block_hashes[0]: a block hash is an integer or bytes, got string");
        assertRefused(batch(0.0, List.of(zeroBlock), 0), "events[0].block_size: must be positive, got 0");
        assertRefused(batch(0.0, List.of(tinyHash), 0), "events[0].block_hashes[0]: a block hash of 2 bytes (at least 8)");
        assertRefused(batch(0.0, List.of(List.of("BlockStored", List.of())), 0), "BlockStored needs [type, block_hashes, parent_block_hash");
        assertRefused(VllmWire.pack(Map.of("ts", 1)), "a KVEventBatch is a msgpack array");
        assertRefused(VllmWire.pack(List.of(1.0)), "at least [ts, events]");
        assertRefused(VllmWire.pack(List.of(1.0, "x")), "events: an array, got string");
        assertRefused(new byte[] {(byte) 0x93, (byte) 0xcb, 1}, "not a msgpack KVEventBatch");
        assertRefused(new byte[0], "got nothing");
        byte[] ok = batch(0.0, List.of(clearedNamed()), 0);
        byte[] trailing = Arrays.copyOf(ok, ok.length + 1);
        assertRefused(trailing, "bytes after the KVEventBatch");
    }

    private static void assertRefused(byte[] payload, String message) {
        assertThatThrownBy(() -> VllmKvEvents.decode(payload)).isInstanceOf(VllmKvEvents.Invalid.class).hasMessageContaining(message);
    }
}
