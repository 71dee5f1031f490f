package io.orbitkv.pd.proxy.routing;

import io.orbitkv.pd.events.BlockRemoved;
import io.orbitkv.pd.events.BlockStored;
import io.orbitkv.pd.events.KvCacheEvent;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

/** KV cache events for the index's tests: block {@code i}'s hash, and events storing or removing numbered blocks. */
final class KvEvents {

    private KvEvents() { }

    /** Block {@code i}'s 32-byte hash (its number in the first two bytes, so every block's 64-bit key differs). */
    static byte[] h(int i) {
        byte[] b = new byte[32];
        b[0] = (byte) (i >> 8);
        b[1] = (byte) i;
        b[31] = 1;
        return b;
    }

    static KvCacheEvent ev(String engine, long epoch, long seq, Object payload) {
        return KvCacheEvent.newBuilder().setEngineId(engine).setInstanceEpoch(epoch).setSeq(seq).setEventTimeMs(0).setPayload(payload).build();
    }

    /** Blocks {@code ids} stored, 16 tokens each. */
    static BlockStored stored(int... ids) {
        List<Integer> tokens = new ArrayList<>();
        for (int k = 0; k < ids.length * 16; k++) {
            tokens.add(k % 16);
        }
        return BlockStored.newBuilder().setBlockHashes(hashes(ids)).setTokenIds(tokens).setBlockSize(16).build();
    }

    static BlockRemoved removed(int... ids) {
        return BlockRemoved.newBuilder().setBlockHashes(hashes(ids)).build();
    }

    private static List<ByteBuffer> hashes(int... ids) {
        List<ByteBuffer> out = new ArrayList<>();
        for (int i : ids) {
            out.add(ByteBuffer.wrap(h(i)));
        }
        return out;
    }
}
