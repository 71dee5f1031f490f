package io.orbitkv.pd.transport;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.BiFunction;

/**
 * Idle sender-side connections to peer workers, kept per (engine, address) for reuse by later pushes. Each peer
 * engine has a generation: {@link #forget} (the engine re-registered with a new instance epoch) bumps it and closes
 * the idle connections, and a connection of an older generation is never handed out or taken back again.
 *
 * @param <C> the transport's connection
 */
public final class PeerConnectionPool<C extends PeerConnectionPool.Pooled> {

    /** What the pool needs to know of a connection. */
    public interface Pooled {
        PeerEndpoint peer();

        /** The peer engine's generation the connection was opened in. */
        long generation();

        boolean isOpen();

        void close();

        /** How long since the connection last carried a push (0: not known). */
        default long idleNanos() {
            return 0;
        }

        /** How long since the connection was opened (0: not known). */
        default long ageNanos() {
            return 0;
        }
    }

    /** A connection handed out, and whether it was reused (a reused one may have gone stale while idle). */
    public record Lease<C>(C connection, boolean reused) { }

    private final Map<String, ConcurrentLinkedDeque<C>> idle = new ConcurrentHashMap<>();
    private final Map<String, AtomicLong> generations = new ConcurrentHashMap<>();
    private final int maxIdlePerPeer;
    private final long maxIdleNanos;
    private final long maxAgeNanos;
    private volatile boolean closed;

    public PeerConnectionPool(int maxIdlePerPeer) {
        this(maxIdlePerPeer, Long.MAX_VALUE, Long.MAX_VALUE);
    }

    /**
     * @param maxIdleNanos a connection idle longer is closed instead of handed out (it may be half-open)
     * @param maxAgeNanos  a connection older is closed instead of handed out or taken back
     */
    public PeerConnectionPool(int maxIdlePerPeer, long maxIdleNanos, long maxAgeNanos) {
        this.maxIdlePerPeer = maxIdlePerPeer;
        this.maxIdleNanos = maxIdleNanos;
        this.maxAgeNanos = maxAgeNanos;
    }

    private boolean fresh(C c) {
        return c.idleNanos() <= maxIdleNanos && c.ageNanos() <= maxAgeNanos;
    }

    private static String key(PeerEndpoint p) {
        return p.engineId() + "|" + p.address();
    }

    private long generation(String engineId) {
        return generations.computeIfAbsent(engineId, k -> new AtomicLong()).get();
    }

    /** An idle connection of the peer's current generation, else a new one from {@code open(peer, generation)}. */
    public Lease<C> acquire(PeerEndpoint peer, BiFunction<PeerEndpoint, Long, C> open) {
        ConcurrentLinkedDeque<C> q = idle.get(key(peer));
        long gen = generation(peer.engineId());
        if (q != null) {
            for (C c = q.pollFirst(); c != null; c = q.pollFirst()) {
                if (c.isOpen() && c.generation() == gen && fresh(c)) {
                    return new Lease<>(c, true);
                }
                c.close();
            }
        }
        return new Lease<>(open.apply(peer, gen), false);
    }

    /** Takes a clean connection back, or closes it (pool closed, connection closed or stale, enough idle already). */
    public void release(C c) {
        if (closed || !c.isOpen() || c.generation() != generation(c.peer().engineId()) || c.ageNanos() > maxAgeNanos) {
            c.close();
            return;
        }
        ConcurrentLinkedDeque<C> q = idle.computeIfAbsent(key(c.peer()), k -> new ConcurrentLinkedDeque<>());
        if (q.size() >= maxIdlePerPeer) {
            c.close();
        } else {
            q.addFirst(c);
        }
    }

    /** The engine has a new incarnation: its idle connections are closed and older ones are refused from now on. */
    public void forget(String engineId) {
        generations.computeIfAbsent(engineId, k -> new AtomicLong()).incrementAndGet();
        idle.forEach((k, q) -> {
            if (k.startsWith(engineId + "|")) {
                drain(q);
            }
        });
    }

    /** Closes every idle connection; connections released later are closed too. */
    public void close() {
        closed = true;
        idle.values().forEach(PeerConnectionPool::drain);
    }

    private static <C extends Pooled> void drain(ConcurrentLinkedDeque<C> q) {
        for (C c = q.pollFirst(); c != null; c = q.pollFirst()) {
            c.close();
        }
    }
}
