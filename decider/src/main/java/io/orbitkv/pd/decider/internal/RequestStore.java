package io.orbitkv.pd.decider.internal;

import io.orbitkv.pd.decider.RequestStateMachine;
import io.orbitkv.pd.state.DeciderState;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.processor.StateStore;
import org.apache.kafka.streams.processor.StateStoreContext;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.StoreBuilder;
import org.apache.kafka.streams.state.internals.WrappedStateStore;

/**
 * The request store as the processor sees it: request states as live objects, written to the Streams store below
 * (record cache if any, changelog, RocksDB or memory) about once per burst of a request's facts instead of once per
 * fact: behind, once a state has been dirty for {@link #writeBehind()} (see {@link #writeBehind(long)}), and whatever
 * is still dirty at each commit.
 *
 * <p>Why: a request gets ~5 facts within a few milliseconds, and serializing its whole state into the store at each
 * one is the stream thread's largest cost (measured: docs/decider.md, "Stores"). Here a put only marks the state
 * dirty; {@link #flushCache()},
 * which Streams calls on every registered caching store before it commits (ahead of the producer flush and the
 * offset commit, inside the transaction under exactly-once), writes each dirty state once and then flushes the
 * record cache below, so the changelog holds every committed state exactly as before. A crash loses only what was
 * not committed, which Streams replays from the input anyway.
 *
 * <p>This builds on Streams internals ({@link WrappedStateStore}, and through it the internal {@code CachedStateStore}
 * interface whose {@code flushCache()} Streams 4.4 calls at each commit); {@code DeciderTopologyTest} and the
 * restart ITs fail if a Streams upgrade stops calling it.
 *
 * <p>Threads: the stream thread processes each fact while holding {@link #lock()}, and interactive queries read
 * under the same lock, so a query never sees a state half-way through a step; a query gets a copy of a dirty state.
 */
public final class RequestStore extends WrappedStateStore<KeyValueStore<String, DeciderState>, String, DeciderState>
        implements KeyValueStore<String, DeciderState> {

    /** Marks a delete in {@link #dirty}. */
    private static final DeciderState DELETED = new DeciderState();
    private static final int CLEAN_ENTRIES = 10_000;

    /**
     * A changed state not yet written below: the latest value ({@link #DELETED} for a delete), when it first changed
     * since it was last written ({@link System#nanoTime()}), and, at-least-once, the number of its producer's sends it
     * waits for ({@link FlushAtCommitClients.Acks#sent()} at its latest change; -1 without acks).
     */
    private static final class Dirty {
        DeciderState state;
        final long sinceNanos;
        long ack;
        /** The store below holds a value for the key: a delete must be written; else there is nothing to delete. */
        final boolean below;

        Dirty(DeciderState state, long sinceNanos, long ack, boolean below) {
            this.state = state;
            this.sinceNanos = sinceNanos;
            this.ack = ack;
            this.below = below;
        }
    }

    /** Changed states not yet written below, in the order they first changed. */
    private final Map<String, Dirty> dirty = new LinkedHashMap<>();
    /**
     * Recently used states of requests still in flight that equal what is in the store below: a fact usually finds
     * its request here. Finished requests are not kept (they rarely get another fact, and a state kept for seconds
     * is copied by every young collection until it is promoted: with them the cache was most of what each young
     * collection copied).
     */
    private final Map<String, DeciderState> clean = new LinkedHashMap<>(1024, 0.75f, true) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, DeciderState> eldest) {
            return size() > CLEAN_ENTRIES;
        }
    };
    /** The acks of the thread that last used this store, and that thread (a task may move between stream threads). */
    private FlushAtCommitClients.Acks acks;
    private Thread acksThread;
    private long flushes;
    private final Duration writeBehind;

    public RequestStore(KeyValueStore<String, DeciderState> inner) {
        this(inner, Duration.ZERO);
    }

    public RequestStore(KeyValueStore<String, DeciderState> inner, Duration writeBehind) {
        super(inner);
        this.writeBehind = writeBehind;
    }

    /** How old a changed state may get before the processor writes it between commits (0: at commits only). */
    public Duration writeBehind() {
        return writeBehind;
    }

    /** Finds the request store behind what {@code context.getStateStore} returns (Streams wraps it in a decorator). */
    public static RequestStore of(StateStore store) {
        StateStore s = store;
        while (!(s instanceof RequestStore) && s instanceof WrappedStateStore<?, ?, ?> w) {
            s = w.wrapped();
        }
        if (!(s instanceof RequestStore r)) {
            throw new IllegalStateException("store " + store.name() + " is not a RequestStore: " + store.getClass().getName());
        }
        return r;
    }

    /** Held by the stream thread for a whole step, and by every read from another thread. */
    public Object lock() {
        return this;
    }

    @Override
    public void init(StateStoreContext context, StateStore root) {
        synchronized (this) {
            dirty.clear();
            clean.clear();
        }
        super.init(context, root);
    }

    /** The live state for the stream thread (mutate it, then {@link #put}); null if there is none. */
    public synchronized DeciderState live(String key) {
        Dirty d = dirty.get(key);
        if (d != null) {
            return d.state == DELETED ? null : d.state;
        }
        DeciderState s = clean.get(key);
        if (s == null) {
            s = wrapped().get(key);
            if (s != null) {
                clean.put(key, s);
            }
        }
        return s;
    }

    @Override
    public synchronized void put(String key, DeciderState value) {
        boolean wasClean = clean.remove(key) != null;
        DeciderState state = value == null ? DELETED : value;
        FlushAtCommitClients.Acks a = acks();
        // The processor forwards a step's decisions before it puts the state: they are all counted in sent().
        long ack = a == null ? -1 : a.sent();
        Dirty d = dirty.get(key);
        if (d == null) {
            // keeps its place (first change) until written
            dirty.put(key, new Dirty(state, System.nanoTime(), ack, wasClean || wrapped().get(key) != null));
        } else {
            d.state = state;
            d.ack = ack;
        }
    }

    /** The calling stream thread's producer acks (looked up again when the calling thread changes); null if none. */
    private FlushAtCommitClients.Acks acks() {
        Thread t = Thread.currentThread();
        if (t != acksThread) {
            acksThread = t;
            acks = FlushAtCommitClients.acksOf(t.getName());
        }
        return acks;
    }

    /** Whether the decisions a dirty state reflects have all been acknowledged (always, without acks). */
    private static boolean acknowledged(Dirty d, FlushAtCommitClients.Acks a) {
        return a == null || d.ack <= a.acknowledged();
    }

    // Writes come from the stream thread only, so they look at the live state; a query's copy would be wasted work.
    @Override
    public synchronized DeciderState putIfAbsent(String key, DeciderState value) {
        DeciderState old = live(key);
        if (old == null) {
            put(key, value);
        }
        return old;
    }

    @Override
    public synchronized void putAll(List<KeyValue<String, DeciderState>> entries) {
        entries.forEach(kv -> put(kv.key, kv.value));
    }

    @Override
    public synchronized DeciderState delete(String key) {
        DeciderState old = live(key);
        put(key, null);
        return old;
    }

    /** Writes every dirty state to the store below, once, then lets Streams flush its record cache to the changelog. */
    @Override
    public void flushCache() {
        synchronized (this) {
            writeDirty();
        }
        super.flushCache();
    }

    @Override
    public void commit(Map<org.apache.kafka.common.TopicPartition, Long> changelogOffsets) {
        synchronized (this) {
            writeDirty();
        }
        super.commit(changelogOffsets);
    }

    /**
     * The commit's write: every dirty state. At-least-once, the decisions they reflect must be acknowledged first (a
     * state in the changelog without its decisions would, after a crash, make their facts look already decided), so
     * this waits for the producer when any are still in flight. A state whose decisions failed stays dirty: the
     * commit that follows is refused ({@link FlushAtCommitClients}) and the task revived from the last commit.
     */
    private void writeDirty() {
        if (dirty.isEmpty()) {
            return;
        }
        flushes++;
        FlushAtCommitClients.Acks a = acks();
        if (a != null) {
            // Only for what these states need: the thread's other stores, flushed at the same commit, have just sent
            // their states, and waiting for those would be one flush per task again.
            long needed = 0;
            for (Dirty d : dirty.values()) {
                needed = Math.max(needed, d.ack);
            }
            if (needed > a.acknowledged()) {
                a.awaitAll();
            }
        }
        var it = dirty.entrySet().iterator();
        while (it.hasNext()) {
            Map.Entry<String, Dirty> e = it.next();
            if (acknowledged(e.getValue(), a)) {
                writeBelow(e.getKey(), e.getValue());
                it.remove();
            }
        }
    }

    /**
     * Writes the states that first changed at or before {@code cutoffNanos} ({@link System#nanoTime()}), oldest
     * first, so that a commit finds fewer to write; states that changed later wait, to take their request's next
     * facts in the same write.
     */
    public synchronized int writeBehind(long cutoffNanos) {
        int written = 0;
        FlushAtCommitClients.Acks a = acks();
        var it = dirty.entrySet().iterator();
        while (it.hasNext()) {
            Map.Entry<String, Dirty> e = it.next();
            if (e.getValue().sinceNanos > cutoffNanos || !acknowledged(e.getValue(), a)) {
                break; // younger than the cutoff, or its decisions still in flight (at-least-once): it and the rest wait
            }
            writeBelow(e.getKey(), e.getValue());
            it.remove();
            written++;
        }
        return written;
    }

    private void writeBelow(String key, Dirty d) {
        DeciderState state = d.state;
        if (state == DELETED) {
            // A request that began and ended between two writes never reached the store below: no tombstone for it
            // (most requests at low load live shorter than the write-behind, and each tombstone is a changelog record).
            if (d.below) {
                wrapped().delete(key);
            }
        } else {
            wrapped().put(key, state);
            if (!RequestStateMachine.isTerminal(state.getPhase())) {
                clean.put(key, state);
            }
        }
    }

    /** How many flushes wrote at least one state (for tests). */
    synchronized long flushes() {
        return flushes;
    }

    /** Uncommitted states waiting for the next flush (for tests). */
    synchronized int dirtyCount() {
        return dirty.size();
    }

    /** A copy of the current state (queries run on other threads; the stream thread uses {@link #live}). */
    @Override
    public synchronized DeciderState get(String key) {
        Dirty d = dirty.get(key);
        if (d != null) {
            return d.state == DELETED ? null : DeciderState.newBuilder(d.state).build();
        }
        return wrapped().get(key);
    }

    @Override
    public KeyValueIterator<String, DeciderState> range(String from, String to) {
        TreeMap<String, DeciderState> out = new TreeMap<>();
        synchronized (this) {
            try (KeyValueIterator<String, DeciderState> it = wrapped().range(from, to)) {
                it.forEachRemaining(kv -> out.put(kv.key, kv.value));
            }
            pending(from, to).forEach((k, v) -> {
                if (v == null) {
                    out.remove(k);
                } else {
                    out.put(k, v);
                }
            });
        }
        return iterator(new ArrayList<>(out.entrySet()));
    }

    /** Every state: the store below with the dirty states laid over it (copied, no ordering, as for in-memory stores). */
    @Override
    public KeyValueIterator<String, DeciderState> all() {
        Map<String, DeciderState> pending;
        synchronized (this) {
            if (dirty.isEmpty()) {
                return wrapped().all();
            }
            pending = pending(null, null);
        }
        List<Map.Entry<String, DeciderState>> out = new ArrayList<>();
        try (KeyValueIterator<String, DeciderState> it = wrapped().all()) {
            while (it.hasNext()) {
                KeyValue<String, DeciderState> kv = it.next();
                if (!pending.containsKey(kv.key)) {
                    out.add(Map.entry(kv.key, kv.value));
                }
            }
        }
        pending.forEach((k, v) -> {
            if (v != null) {
                out.add(Map.entry(k, v));
            }
        });
        return iterator(out);
    }

    /** Copies of the dirty states with keys in {@code [from, to]} (null bounds: open), a deleted one mapped to null. */
    private Map<String, DeciderState> pending(String from, String to) {
        Map<String, DeciderState> out = new HashMap<>();
        for (Map.Entry<String, Dirty> e : dirty.entrySet()) {
            String k = e.getKey();
            DeciderState s = e.getValue().state;
            if ((from == null || k.compareTo(from) >= 0) && (to == null || k.compareTo(to) <= 0)) {
                out.put(k, s == DELETED ? null : DeciderState.newBuilder(s).build());
            }
        }
        return out;
    }

    @Override
    public synchronized long approximateNumEntries() {
        return wrapped().approximateNumEntries() + dirty.size();
    }

    private static KeyValueIterator<String, DeciderState> iterator(List<Map.Entry<String, DeciderState>> entries) {
        return new KeyValueIterator<>() {
            private int next;

            @Override
            public boolean hasNext() {
                return next < entries.size();
            }

            @Override
            public KeyValue<String, DeciderState> next() {
                Map.Entry<String, DeciderState> e = entry();
                next++;
                return KeyValue.pair(e.getKey(), e.getValue());
            }

            @Override
            public String peekNextKey() {
                return entry().getKey();
            }

            private Map.Entry<String, DeciderState> entry() {
                if (next >= entries.size()) {
                    throw new java.util.NoSuchElementException();
                }
                return entries.get(next);
            }

            @Override
            public void close() {
                // a materialized list: nothing to release
            }
        };
    }

    /** Builds a {@link RequestStore} around the store {@code inner} builds (caching and logging as configured there). */
    public static StoreBuilder<RequestStore> builder(StoreBuilder<KeyValueStore<String, DeciderState>> inner, Duration writeBehind) {
        return new StoreBuilder<>() {
            @Override
            public StoreBuilder<RequestStore> withCachingEnabled() {
                inner.withCachingEnabled();
                return this;
            }

            @Override
            public StoreBuilder<RequestStore> withCachingDisabled() {
                inner.withCachingDisabled();
                return this;
            }

            @Override
            public StoreBuilder<RequestStore> withLoggingEnabled(Map<String, String> config) {
                inner.withLoggingEnabled(config);
                return this;
            }

            @Override
            public StoreBuilder<RequestStore> withLoggingDisabled() {
                inner.withLoggingDisabled();
                return this;
            }

            @Override
            public RequestStore build() {
                return new RequestStore(inner.build(), writeBehind);
            }

            @Override
            public Map<String, String> logConfig() {
                return inner.logConfig();
            }

            @Override
            public boolean loggingEnabled() {
                return inner.loggingEnabled();
            }

            @Override
            public String name() {
                return inner.name();
            }
        };
    }
}
