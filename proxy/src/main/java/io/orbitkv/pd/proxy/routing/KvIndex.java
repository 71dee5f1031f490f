package io.orbitkv.pd.proxy.routing;

import io.orbitkv.pd.events.AllBlocksCleared;
import io.orbitkv.pd.events.BlockRemoved;
import io.orbitkv.pd.events.BlockStored;
import io.orbitkv.pd.events.KvCacheEvent;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

/**
 * Which blocks every engine caches, rebuilt from {@code orbitkv.kv-events} (docs/routing.md, "The index"): per engine a
 * {@link BlockSet} of its cached block hashes, its instance epoch and the last event number applied. Applying the log
 * from its start gives the same index whatever happened before — a restarted router rebuilds it; a restarted engine's
 * old blocks go at its new instance's first event (or the worker's clear). Pure and deterministic; not thread-safe.
 *
 * <p>Rules: an event of an older instance than the engine's newest is stale (dropped); one of a newer instance starts
 * from an empty cache; within an instance a number at or below the last applied is a repeat (a report sent again after
 * a reconnect: dropped), one above the next is applied and counts a gap (events were lost: the index may hold blocks the
 * engine evicted, or miss some it stored); seq 0 is the worker's own clear.
 */
public final class KvIndex {

    /** What the index knows of one engine. */
    private static final class Engine {
        final BlockSet blocks = new BlockSet();
        long epoch;
        long lastSeq;
        long gaps;
    }

    private final Map<String, Engine> engines = new TreeMap<>();
    private long applied;
    private long dropped;

    /** Applies one event; false when it was dropped (stale or a repeat). */
    public boolean apply(KvCacheEvent e) {
        Engine g = engines.computeIfAbsent(e.getEngineId(), k -> new Engine());
        if (e.getInstanceEpoch() < g.epoch) {
            dropped++;
            return false;
        }
        if (e.getInstanceEpoch() > g.epoch) {
            g.blocks.clear();
            g.epoch = e.getInstanceEpoch();
            g.lastSeq = 0;
        }
        long seq = e.getSeq();
        if (seq > 0) {
            if (seq <= g.lastSeq) {
                dropped++;
                return false;
            }
            if (seq > g.lastSeq + 1) {
                g.gaps += seq - g.lastSeq - 1;
            }
            g.lastSeq = seq;
        }
        switch (e.getPayload()) {
            case BlockStored s -> s.getBlockHashes().forEach(h -> g.blocks.add(BlockSet.key(h)));
            case BlockRemoved r -> r.getBlockHashes().forEach(h -> g.blocks.remove(BlockSet.key(h)));
            case AllBlocksCleared c -> g.blocks.clear();
            default -> throw new IllegalArgumentException("not a KV cache event payload: " + e.getPayload());
        }
        applied++;
        return true;
    }

    /**
     * Per engine the index knows, how many of {@code promptHashes} (a prompt's block hashes, in order) it caches from the
     * first on: the longest cached prefix, in blocks. Engines in id order.
     */
    public Map<String, Integer> matches(List<byte[]> promptHashes) {
        long[] keys = new long[promptHashes.size()];
        for (int i = 0; i < keys.length; i++) {
            keys[i] = BlockSet.key(promptHashes.get(i));
        }
        Map<String, Integer> out = new LinkedHashMap<>();
        engines.forEach((id, g) -> {
            int n = 0;
            while (n < keys.length && g.blocks.contains(keys[n])) {
                n++;
            }
            out.put(id, n);
        });
        return out;
    }

    /** The engines the index has heard of, in id order. */
    public List<String> engineIds() {
        return List.copyOf(engines.keySet());
    }

    /** Blocks the index holds for {@code engineId} (0 when unknown). */
    public int blocks(String engineId) {
        Engine g = engines.get(engineId);
        return g == null ? 0 : g.blocks.size();
    }

    /** Events lost for {@code engineId} in its current instance, as the gaps in their numbers say. */
    public long gaps(String engineId) {
        Engine g = engines.get(engineId);
        return g == null ? 0 : g.gaps;
    }

    public long applied() {
        return applied;
    }

    public long dropped() {
        return dropped;
    }

    /** (engine, block) entries held, over all engines. */
    public long entries() {
        return engines.values().stream().mapToLong(g -> g.blocks.size()).sum();
    }

    /** Bytes of the block sets' arrays (the index's bulk). */
    public long bytes() {
        return engines.values().stream().mapToLong(g -> g.blocks.bytes()).sum();
    }
}
