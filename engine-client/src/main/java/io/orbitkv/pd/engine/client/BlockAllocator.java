package io.orbitkv.pd.engine.client;

import java.util.BitSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Optional;

/**
 * The engine's block table: which KV blocks are free and which request holds which. An engine in P/D mode never
 * frees a reported block by itself: it frees them when a {@code ReleaseDecided} names the request (see
 * {@link EngineClient}), so a late push can never land in a block given to another request.
 *
 * <p>Allocation prefers one contiguous run (fewer runs per transfer), else takes the lowest free blocks. Thread-safe.
 */
public final class BlockAllocator {

    private final int numBlocks;
    private final BitSet used;
    private final Map<String, int[]> held = new HashMap<>();
    private long allocations;
    private long releases;
    private final java.util.List<Runnable> onFree = new java.util.concurrent.CopyOnWriteArrayList<>();

    public BlockAllocator(int numBlocks) {
        this.numBlocks = numBlocks;
        this.used = new BitSet(numBlocks);
    }

    /** Allocates {@code n} blocks for {@code owner} (a request id), or empty when the pool has fewer free blocks. */
    public synchronized Optional<int[]> allocate(String owner, int n) {
        if (n < 1) {
            throw new IllegalArgumentException("need at least one block, got " + n);
        }
        if (held.containsKey(owner)) {
            throw new IllegalStateException("request " + owner + " already holds blocks");
        }
        if (numBlocks - used.cardinality() < n) {
            return Optional.empty();
        }
        int[] blocks = new int[n];
        int start = contiguous(n);
        if (start >= 0) {
            for (int i = 0; i < n; i++) {
                blocks[i] = start + i;
            }
        } else {
            int b = -1;
            for (int i = 0; i < n; i++) {
                b = used.nextClearBit(b + 1);
                blocks[i] = b;
            }
        }
        for (int b : blocks) {
            used.set(b);
        }
        held.put(owner, blocks);
        allocations++;
        return Optional.of(blocks);
    }

    private int contiguous(int n) {
        int from = 0;
        while (from + n <= numBlocks) {
            int start = used.nextClearBit(from);
            if (start + n > numBlocks) {
                return -1;
            }
            int nextUsed = used.nextSetBit(start);
            if (nextUsed < 0 || nextUsed - start >= n) {
                return start;
            }
            from = nextUsed + 1;
        }
        return -1;
    }

    /** Runs {@code r} after every free that gave blocks back (outside the allocator's lock): what waits for pages retries. */
    public void onFree(Runnable r) {
        onFree.add(r);
    }

    /** Frees what {@code owner} holds; returns the blocks freed (empty when it held none). */
    public int[] free(String owner) {
        int[] blocks;
        synchronized (this) {
            blocks = held.remove(owner);
            if (blocks == null) {
                return new int[0];
            }
            for (int b : blocks) {
                used.clear(b);
            }
            releases++;
        }
        onFree.forEach(Runnable::run);
        return blocks;
    }

    public synchronized Optional<int[]> blocksOf(String owner) {
        return Optional.ofNullable(held.get(owner)).map(int[]::clone);
    }

    public synchronized int usedBlocks() {
        return used.cardinality();
    }

    public int numBlocks() {
        return numBlocks;
    }

    /** Requests holding blocks now. */
    public synchronized int holders() {
        return held.size();
    }

    public synchronized long allocations() {
        return allocations;
    }

    public synchronized long releases() {
        return releases;
    }
}
