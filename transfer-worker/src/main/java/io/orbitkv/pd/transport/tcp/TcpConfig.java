package io.orbitkv.pd.transport.tcp;

import static io.orbitkv.pd.schemas.config.ConfigProps.requirePort;

import io.orbitkv.pd.schemas.config.Addresses;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.time.Duration;

/**
 * Settings of the tcp transport ({@code transfer.tcp.*} keys; every key and its default is in {@code docs/worker.md}).
 *
 * @param bindHost           address the receiver listens on
 * @param advertisedHost     host peers connect to (announced in the engine registration); the bind host if empty and the
 *                           bind host is a concrete address (a wildcard bind needs it: {@link Addresses#advertised})
 * @param port               listening port; 0 picks a free one
 * @param connections        connections (stripes) one push uses at most; more only help when one stream cannot
 *                           fill the link (many cores, fast NICs)
 * @param maxConnections     accepted connections at most; more are closed at once
 * @param frameBytes         payload bytes per WRITE frame at most (the sender's batching unit)
 * @param maxSegments        page runs per WRITE frame at most (one gathering write / scattering read each)
 * @param maxPayloadBytes    largest WRITE payload the receiver accepts
 * @param ioTimeout          a connection that makes no progress this long in a frame or push is closed
 * @param connectTimeout     TCP connect timeout
 * @param maxBytesPerSecond  send rate limit over all pushes of this worker (0 = none), to share a link with
 *                           inference traffic
 * @param socketBufferBytes  SO_SNDBUF / SO_RCVBUF; 0 keeps the kernel's auto-tuning
 * @param nice               CPU niceness of the threads that copy page bytes through the kernel (0..19; 0 = normal):
 *                           raise it where pushes share cores with latency-critical work and a slower push is the
 *                           better trade (docs/worker.md)
 * @param advertisedPort     port peers connect to (announced), when it is not the one listened on: behind a port
 *                           mapping, a NAT or a relay (0 = the listen port)
 * @param tls                TLS on every connection ({@code transfer.tcp.tls=true}, {@link TcpTls}); null: plaintext
 * @param poolMaxIdle        a pooled connection idle longer than this is closed instead of reused: a long-idle connection
 *                           may be half-open (a peer gone, a partition that dropped its FIN), and a push on it would wait
 *                           out the io timeout before failing ({@code transfer.tcp.pool.max-idle})
 * @param poolMaxAge         a connection older than this is closed instead of pooled again ({@code transfer.tcp.pool.max-age}):
 *                           a peer restarted behind the same address, a route that changed, are picked up within it
 * @param keepalive          TCP keepalive on every connection, both ends: probes after this much silence, then every third of
 *                           it, three unanswered close it ({@code transfer.tcp.keepalive}; 0 = off): a receiver's thread
 *                           blocked on a dead idle connection is freed
 */
public record TcpConfig(String bindHost, String advertisedHost, int port, int connections, int maxConnections, int frameBytes,
                        int maxSegments, int maxPayloadBytes, Duration ioTimeout, Duration connectTimeout, long maxBytesPerSecond,
                        int socketBufferBytes, int nice, int advertisedPort, TcpTls tls, Duration poolMaxIdle, Duration poolMaxAge,
                        Duration keepalive) {

    public TcpConfig {
        if (bindHost == null || bindHost.isBlank()) {
            throw new IllegalArgumentException("transfer.tcp.host: required");
        }
        advertisedHost = Addresses.advertised("transfer.tcp.host", bindHost, "transfer.tcp.advertised-host", advertisedHost);
        Addresses.requireListening("transfer.tcp.host", bindHost, "transfer.tcp.advertised-host", advertisedHost);
        requirePort("transfer.tcp.port", port, false);
        ConfigProps.requireRange("transfer.tcp.connections", connections, 1, 64);
        ConfigProps.requireRange("transfer.tcp.max-connections", maxConnections, 1, 65536);
        ConfigProps.requireRange("transfer.tcp.frame-bytes", frameBytes, 4096, 1 << 30);
        ConfigProps.requireRange("transfer.tcp.max-segments", maxSegments, 1, 65536);
        ConfigProps.requireRange("transfer.tcp.max-payload-bytes", maxPayloadBytes, 4096, 1 << 30);
        if (frameBytes > maxPayloadBytes) {
            throw new IllegalArgumentException("transfer.tcp.frame-bytes: " + frameBytes + " is more than transfer.tcp.max-payload-bytes "
                    + maxPayloadBytes + " (this worker's own receivers would refuse its frames)");
        }
        ConfigProps.requirePositive("transfer.tcp.io-timeout", ioTimeout);
        ConfigProps.requirePositive("transfer.tcp.connect-timeout", connectTimeout);
        if (maxBytesPerSecond < 0) {
            throw new IllegalArgumentException("transfer.tcp.max-bytes-per-second: must be >= 0 (0 = unlimited), got " + maxBytesPerSecond);
        }
        ConfigProps.requireRange("transfer.tcp.socket-buffer-bytes", socketBufferBytes, 0, 1 << 30);
        ConfigProps.requireRange("transfer.tcp.nice", nice, 0, 19);
        ConfigProps.requireRange("transfer.tcp.advertised-port", advertisedPort, 0, 65535);
        ConfigProps.requirePositive("transfer.tcp.pool.max-idle", poolMaxIdle);
        ConfigProps.requirePositive("transfer.tcp.pool.max-age", poolMaxAge);
        if (keepalive == null || keepalive.isNegative() || (!keepalive.isZero() && keepalive.toSeconds() < 1)) {
            throw new IllegalArgumentException("transfer.tcp.keepalive: 0 (off) or at least 1s, got " + keepalive);
        }
    }

    /**
     * Loopback, any port, up to two connections per push (two streams beat one at every page size from 8 KiB in
     * docs/bench/transport.md, even on 2 cores), 4 MiB frames of at most 1,024 runs.
     */
    public static TcpConfig defaults() {
        return new TcpConfig("127.0.0.1", "", 0, 2, 1024, 4 << 20, 1024, 64 << 20, Duration.ofSeconds(10), Duration.ofSeconds(3), 0, 0, 0, 0, null,
                Duration.ofSeconds(30), Duration.ofMinutes(10), Duration.ofSeconds(15));
    }

    public static TcpConfig from(ConfigProps p) {
        TcpConfig d = defaults();
        return new TcpConfig(p.string("transfer.tcp.host", d.bindHost()), p.string("transfer.tcp.advertised-host", ""),
                p.integer("transfer.tcp.port", d.port()), p.integer("transfer.tcp.connections", d.connections()),
                p.integer("transfer.tcp.max-connections", d.maxConnections()), p.integer("transfer.tcp.frame-bytes", d.frameBytes()),
                p.integer("transfer.tcp.max-segments", d.maxSegments()), p.integer("transfer.tcp.max-payload-bytes", d.maxPayloadBytes()),
                p.duration("transfer.tcp.io-timeout", d.ioTimeout()), p.duration("transfer.tcp.connect-timeout", d.connectTimeout()),
                p.longValue("transfer.tcp.max-bytes-per-second", 0), p.integer("transfer.tcp.socket-buffer-bytes", 0),
                p.integer("transfer.tcp.nice", d.nice()), p.integer("transfer.tcp.advertised-port", 0), TcpTls.from(p),
                p.duration("transfer.tcp.pool.max-idle", d.poolMaxIdle()), p.duration("transfer.tcp.pool.max-age", d.poolMaxAge()),
                p.duration("transfer.tcp.keepalive", d.keepalive()));
    }

    public TcpConfig withPort(int p) {
        return new TcpConfig(bindHost, advertisedHost, p, connections, maxConnections, frameBytes, maxSegments, maxPayloadBytes, ioTimeout,
                connectTimeout, maxBytesPerSecond, socketBufferBytes, nice, advertisedPort, tls, poolMaxIdle, poolMaxAge, keepalive);
    }

    public TcpConfig withConnections(int c) {
        return new TcpConfig(bindHost, advertisedHost, port, c, maxConnections, frameBytes, maxSegments, maxPayloadBytes, ioTimeout,
                connectTimeout, maxBytesPerSecond, socketBufferBytes, nice, advertisedPort, tls, poolMaxIdle, poolMaxAge, keepalive);
    }

    public TcpConfig withFrame(int bytes, int segments) {
        return new TcpConfig(bindHost, advertisedHost, port, connections, maxConnections, bytes, segments, Math.max(bytes, maxPayloadBytes),
                ioTimeout, connectTimeout, maxBytesPerSecond, socketBufferBytes, nice, advertisedPort, tls, poolMaxIdle, poolMaxAge, keepalive);
    }

    public TcpConfig withMaxBytesPerSecond(long rate) {
        return new TcpConfig(bindHost, advertisedHost, port, connections, maxConnections, frameBytes, maxSegments, maxPayloadBytes, ioTimeout,
                connectTimeout, rate, socketBufferBytes, nice, advertisedPort, tls, poolMaxIdle, poolMaxAge, keepalive);
    }

    public TcpConfig withIoTimeout(Duration t) {
        return new TcpConfig(bindHost, advertisedHost, port, connections, maxConnections, frameBytes, maxSegments, maxPayloadBytes, t,
                connectTimeout, maxBytesPerSecond, socketBufferBytes, nice, advertisedPort, tls, poolMaxIdle, poolMaxAge, keepalive);
    }

    /** The same settings with TLS on ({@code tls} not null) or off. */
    public TcpConfig withTls(TcpTls t) {
        return new TcpConfig(bindHost, advertisedHost, port, connections, maxConnections, frameBytes, maxSegments, maxPayloadBytes, ioTimeout,
                connectTimeout, maxBytesPerSecond, socketBufferBytes, nice, advertisedPort, t, poolMaxIdle, poolMaxAge, keepalive);
    }

    public TcpConfig withSocketBuffer(int bytes) {
        return new TcpConfig(bindHost, advertisedHost, port, connections, maxConnections, frameBytes, maxSegments, maxPayloadBytes, ioTimeout,
                connectTimeout, maxBytesPerSecond, bytes, nice, advertisedPort, tls, poolMaxIdle, poolMaxAge, keepalive);
    }
}
