package io.orbitkv.pd.engine.sim.model;

import java.nio.ByteBuffer;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;

/**
 * An engine's prefix cache, as vLLM's (docs/engine-model.md, "The prefix cache"): the hashes of the full blocks it
 * computed or received ({@link io.orbitkv.pd.engine.client.cache.BlockHashes}), least recently used first. A block keeps its hash after its request ends
 * and serves later requests with the same prefix until it is evicted. Pure; the Python engine model's
 * {@code PrefixCache} is the same.
 *
 * <p>The cache holds {@code capacity} blocks: the engine's whole KV pool. vLLM evicts a cached block only when the pool
 * needs it for another request; counting the cache against the pool's size, not its free part, is the simplification
 * (a busy engine keeps somewhat more cached here than vLLM could).
 */
public final class PrefixCache {

    private final int capacity;
    private final LinkedHashMap<ByteBuffer, Boolean> lru = new LinkedHashMap<>(16, 0.75f, true);

    public PrefixCache(int capacityBlocks) {
        if (capacityBlocks < 1) {
            throw new IllegalArgumentException("prefix cache capacity must be >= 1 block, got " + capacityBlocks);
        }
        this.capacity = capacityBlocks;
    }

    /** How many of {@code hashes}, from the first, are cached (stops at the first miss); the hits become the most recent, as in {@link #insert}. */
    public int lookup(List<byte[]> hashes) {
        int hits = 0;
        for (byte[] h : hashes) {
            if (!lru.containsKey(ByteBuffer.wrap(h))) {
                break;
            }
            hits++;
        }
        for (int i = hits - 1; i >= 0; i--) {
            lru.get(ByteBuffer.wrap(hashes.get(i))); // touched last block first: see insert
        }
        return hits;
    }

    /** What an insert changed: the positions of {@code hashes} that were not cached before, and the hashes evicted for them. */
    public record Change(List<Integer> added, List<byte[]> evicted) { }

    /**
     * Caches {@code hashes}, each the most recent — the last block first, so the chain's head ends most recent and its
     * tail is evicted before it (as vLLM frees a request's blocks in reverse order: a head evicted first would break the
     * chain for every prompt that shares it, and a shared prefix would be lost a block at a time from its front) — then
     * evicts the least recently used beyond capacity.
     */
    public Change insert(List<byte[]> hashes) {
        List<Integer> added = new java.util.ArrayList<>();
        for (int i = hashes.size() - 1; i >= 0; i--) {
            if (lru.put(ByteBuffer.wrap(hashes.get(i).clone()), Boolean.TRUE) == null) {
                added.add(0, i);
            }
        }
        List<byte[]> evicted = new java.util.ArrayList<>();
        for (Iterator<ByteBuffer> it = lru.keySet().iterator(); lru.size() > capacity && it.hasNext(); ) {
            evicted.add(it.next().array());
            it.remove();
        }
        return new Change(added, evicted);
    }

    public int size() {
        return lru.size();
    }

    /**
     * The prompt tokens a hit of {@code hitBlocks} blocks saves: all of them, except that a prompt wholly cached still
     * computes its last token (to sample the first output token), as vLLM does.
     */
    public static int cachedTokens(int hitBlocks, int blockTokens, int promptTokens) {
        return Math.max(0, Math.min(hitBlocks * blockTokens, promptTokens - 1));
    }
}
