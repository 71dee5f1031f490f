package io.orbitkv.pd.transport;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * Pooled connections are reused only while they are likely alive: a connection idle past the pool's limit may be
 * half-open (a partition dropped the peer's FIN, the peer host vanished), so it is closed and a fresh one opened instead
 * of a push riding it until the io timeout; one older than the age limit is not pooled again.
 */
class PeerConnectionPoolTest {

    static final class Conn implements PeerConnectionPool.Pooled {
        final PeerEndpoint peer;
        long idle;
        long age;
        boolean open = true;

        Conn(PeerEndpoint peer) {
            this.peer = peer;
        }

        @Override public PeerEndpoint peer() { return peer; }
        @Override public long generation() { return 0; }
        @Override public boolean isOpen() { return open; }
        @Override public void close() { open = false; }
        @Override public long idleNanos() { return idle; }
        @Override public long ageNanos() { return age; }
    }

    private static final PeerEndpoint PEER = new PeerEndpoint("decode-0", 1, "tcp", "198.18.0.13:7400", Map.of());

    @Test
    void aConnectionIdlePastTheLimitIsClosedNotReused() {
        PeerConnectionPool<Conn> pool = new PeerConnectionPool<>(16, TimeUnit.SECONDS.toNanos(30), TimeUnit.MINUTES.toNanos(10));
        Conn first = pool.acquire(PEER, (p, g) -> new Conn(p)).connection();
        pool.release(first);
        first.idle = TimeUnit.SECONDS.toNanos(5);
        PeerConnectionPool.Lease<Conn> again = pool.acquire(PEER, (p, g) -> new Conn(p));
        assertThat(again.reused()).isTrue();
        assertThat(again.connection()).isSameAs(first);
        pool.release(first);
        first.idle = TimeUnit.SECONDS.toNanos(31);
        PeerConnectionPool.Lease<Conn> fresh = pool.acquire(PEER, (p, g) -> new Conn(p));
        assertThat(fresh.reused()).isFalse();
        assertThat(first.open).as("the stale one closed").isFalse();
    }

    @Test
    void aConnectionPastItsAgeIsNotPooledAgain() {
        PeerConnectionPool<Conn> pool = new PeerConnectionPool<>(16, TimeUnit.SECONDS.toNanos(30), TimeUnit.MINUTES.toNanos(10));
        Conn c = pool.acquire(PEER, (p, g) -> new Conn(p)).connection();
        c.age = TimeUnit.MINUTES.toNanos(11);
        pool.release(c);
        assertThat(c.open).isFalse();
        assertThat(pool.acquire(PEER, (p, g) -> new Conn(p)).reused()).isFalse();
    }
}
