package io.orbitkv.pd.transport.tcp;

import io.orbitkv.pd.transport.tcp.wire.Wire;
import io.orbitkv.pd.events.TransportEndpoint;
import io.orbitkv.pd.kv.BulkPriority;
import io.orbitkv.pd.kv.KvPool;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.transport.AbstractTransfer;
import io.orbitkv.pd.transport.KvTransport;
import io.orbitkv.pd.transport.PeerConnectionPool;
import io.orbitkv.pd.transport.PeerEndpoint;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.SourceReadiness;
import io.orbitkv.pd.transport.Transfer;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import io.orbitkv.pd.transport.TransferResult;
import io.orbitkv.pd.transport.tcp.wire.FrameException;
import io.orbitkv.pd.transport.tcp.internal.ByteRateLimiter;
import io.orbitkv.pd.transport.tcp.internal.Link;
import io.orbitkv.pd.transport.tcp.internal.PlanCursor;
import io.orbitkv.pd.transport.tcp.internal.ReceiverConnection;
import io.orbitkv.pd.transport.tcp.internal.SenderConnection;
import io.orbitkv.pd.transport.tcp.internal.TlsLink;
import io.orbitkv.pd.transport.tcp.internal.Watchdog;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The {@code tcp} transport: needs nothing but TCP between the workers.
 *
 * <p>Receiving: a listening socket; one thread per accepted connection reads frames and writes page bytes
 * straight from the socket into the registered pool (scattering reads into slices of the pool's off-heap memory),
 * after the {@link PushGate} admitted the push and every segment was checked.
 *
 * <p>Sending: a push is split into up to {@link TcpConfig#connections()} stripes (contiguous byte ranges of the
 * plan); each stripe takes a pooled connection to the peer, sends BEGIN (the order's credentials; one round trip),
 * streams WRITE frames — each one gathering write of a header, a segment table and up to
 * {@link TcpConfig#maxSegments()} page slices straight from the source pool, so thousands of 32 KiB pages cost a
 * few system calls, not a round trip each — and ends with END, answered by ACK once the receiver has every byte.
 * The transfer completes when every stripe is acknowledged, and fails only after every stripe has stopped.
 *
 * <p>Connections are pooled per peer engine and address; {@link #forgetPeer} (a new registration) closes them, and a
 * pooled connection that turns out dead (the peer restarted) is replaced once, transparently.
 */
public final class TcpTransport implements KvTransport {

    private static final Logger log = LoggerFactory.getLogger(TcpTransport.class);
    /** Pushes smaller than this per stripe are not striped: another connection costs more than it brings. */
    private static final long MIN_STRIPE_BYTES = 8L << 20;
    /** How long a push waiting for its source sleeps between checks of why it might have to stop. */
    private static final long WAIT_SLICE_MS = 50;
    /** A pooled connection idle longer than this gets a BEGIN that waits for its answer (the peer may have gone). */
    private static final long PIPELINE_IDLE_NANOS = 1_000_000_000L;
    /** Endpoint attribute: this receiver takes pipelined BEGINs ({@code Wire.FLAG_PIPELINED}). */
    public static final String PIPELINED_BEGIN = "pipelined-begin";

    private final TcpConfig config;
    /** TLS on every connection, or null (plaintext). */
    private final javax.net.ssl.SSLContext tls;
    private final String senderId;
    private final PushGate gate;
    private final ServerSocketChannel server;
    private final Watchdog watchdog;
    private final ByteRateLimiter rateLimiter;
    private final ExecutorService io;
    private final Set<ReceiverConnection> receivers = ConcurrentHashMap.newKeySet();
    private final Set<Thread> receiverThreads = ConcurrentHashMap.newKeySet();
    private final PeerConnectionPool<SenderConnection> pool;
    private final AtomicInteger streams = new AtomicInteger();
    private final AtomicInteger receiverCount = new AtomicInteger();
    private final Thread acceptor;
    private volatile boolean closed;

    private TcpTransport(TcpConfig config, String senderId, PushGate gate) throws IOException {
        this.tls = config.tls() == null ? null : config.tls().context();
        this.config = config;
        // Enough idle connections for every stripe of several pushes in flight to one peer (a worker runs 4 orders at once
        // by default): one that is closed instead of pooled costs the next push a connect, a HELLO round trip and a new
        // receiver thread on the peer — measured as connection churn at 4 requests in flight with 2 × stripes kept. An
        // idle connection costs the peer one receiver thread blocked in read.
        this.pool = new PeerConnectionPool<>(Math.max(16, config.connections() * 8), config.poolMaxIdle().toNanos(), config.poolMaxAge().toNanos());
        this.senderId = senderId;
        this.gate = gate;
        this.watchdog = new Watchdog(config.ioTimeout(), "kv-tcp-watchdog");
        this.rateLimiter = new ByteRateLimiter(config.maxBytesPerSecond());
        // Stripes run on reused threads: a new platform thread per stripe of every push was part of each push's setup.
        this.io = Executors.newCachedThreadPool(Thread.ofPlatform().daemon().name("kv-tx-", 0).factory());
        if (gate != null) {
            server = ServerSocketChannel.open();
            server.setOption(StandardSocketOptions.SO_REUSEADDR, true);
            if (config.socketBufferBytes() > 0) {
                server.setOption(StandardSocketOptions.SO_RCVBUF, config.socketBufferBytes());
            }
            server.bind(new InetSocketAddress(config.bindHost(), config.port()), 256);
            acceptor = Thread.ofPlatform().daemon().name("kv-tcp-accept").start(this::acceptLoop);
        } else {
            server = null;
            acceptor = null;
        }
    }

    /**
     * Starts the transport.
     *
     * @param senderId who pushes (for the receivers' logs), e.g. the worker id
     * @param gate     the local engine's gate; null for a send-only transport (no listening socket)
     * @throws UncheckedIOException naming the address when the port cannot be bound
     */
    public static TcpTransport start(TcpConfig config, String senderId, PushGate gate) {
        try {
            return new TcpTransport(config, senderId, gate);
        } catch (IOException e) {
            throw new UncheckedIOException("transfer.tcp.host/port: cannot listen on " + config.bindHost() + ":" + config.port() + ": "
                    + e.getMessage(), e);
        }
    }

    @Override
    public String name() {
        return "tcp";
    }

    /** The bound listening address, or null for a send-only transport. */
    public InetSocketAddress localAddress() {
        try {
            return server == null ? null : (InetSocketAddress) server.getLocalAddress();
        } catch (IOException e) {
            return null;
        }
    }

    @Override
    public Optional<TransportEndpoint> endpoint() {
        InetSocketAddress a = localAddress();
        if (a == null) {
            return Optional.empty();
        }
        String host = config.advertisedHost().contains(":") ? "[" + config.advertisedHost() + "]" : config.advertisedHost();
        int port = config.advertisedPort() > 0 ? config.advertisedPort() : a.getPort();
        return Optional.of(TransportEndpoint.newBuilder().setTransport("tcp").setAddress(host + ":" + port)
                .setAttributes(Map.of("max-payload-bytes", Integer.toString(config.maxPayloadBytes()),
                        "max-segments", Integer.toString(config.maxSegments()), "wire-version", "1", PIPELINED_BEGIN, "true",
                        Wire.FIRST_TOKEN, "true"))
                .build());
    }

    @Override
    public boolean canReach(PeerEndpoint peer) {
        return "tcp".equals(peer.transport());
    }

    /** Connections currently served by the receiving side. */
    public int receivingConnections() {
        return receivers.size();
    }

    // ---- receiving ---------------------------------------------------------------------------------------------

    private void acceptLoop() {
        while (!closed) {
            SocketChannel ch;
            try {
                ch = server.accept();
            } catch (ClosedChannelException e) {
                return;
            } catch (IOException e) {
                if (!closed) {
                    log.atError().log("accepting a transfer connection failed: " + e.getMessage());
                }
                continue;
            }
            try {
                ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
                keepalive(ch, config);
                if (config.socketBufferBytes() > 0) {
                    ch.setOption(StandardSocketOptions.SO_SNDBUF, config.socketBufferBytes());
                }
                if (receivers.size() >= config.maxConnections()) {
                    log.atWarn().addKeyValue("peer", ch.getRemoteAddress())
                            .log("refusing a transfer connection: transfer.tcp.max-connections=" + config.maxConnections() + " reached");
                    ch.close();
                    continue;
                }
            } catch (IOException e) {
                closeQuietly(ch);
                continue;
            }
            SocketChannel accepted = ch;
            Thread t = Thread.ofPlatform().daemon().name("kv-rx-" + receiverCount.incrementAndGet()).unstarted(() -> {
                BulkPriority.apply(config.nice());
                try {
                    Link link = link(accepted);
                    if (link == null) {
                        return;
                    }
                    ReceiverConnection rc = new ReceiverConnection(accepted, link, gate, config, watchdog, receivers::remove);
                    receivers.add(rc);
                    rc.run();
                } finally {
                    receiverThreads.remove(Thread.currentThread());
                }
            });
            receiverThreads.add(t);
            t.start();
        }
    }

    /**
     * The accepted connection's stream: the socket, or TLS over it once its handshake is done (on the receiver's own
     * thread, cut after the io-timeout if the peer stalls it); null when the handshake failed (the socket is closed).
     */
    private Link link(SocketChannel ch) {
        if (tls == null) {
            return Link.plain(ch);
        }
        Watchdog.Activity handshake = watchdog.watch(ch);
        try {
            handshake.busy(true);
            return TlsLink.server(ch, tls);
        } catch (IOException e) {
            log.atWarn().log("a transfer connection's TLS handshake failed: " + e.getMessage());
            closeQuietly(ch);
            return null;
        } finally {
            watchdog.unwatch(handshake);
        }
    }

    // ---- sending -----------------------------------------------------------------------------------------------

    /**
     * TCP keepalive on {@code ch} per {@link TcpConfig#keepalive()}: probes after that much silence, then every third of
     * it, three unanswered close the connection, so a receiver's thread blocked on a dead idle connection is freed and a
     * sender's pooled one is found dead.
     */
    public static void keepalive(java.nio.channels.NetworkChannel ch, TcpConfig config) throws IOException {
        if (config.keepalive().isZero()) {
            return;
        }
        ch.setOption(StandardSocketOptions.SO_KEEPALIVE, true);
        int idle = (int) Math.max(1, config.keepalive().toSeconds());
        try {
            ch.setOption(jdk.net.ExtendedSocketOptions.TCP_KEEPIDLE, idle);
            ch.setOption(jdk.net.ExtendedSocketOptions.TCP_KEEPINTERVAL, Math.max(1, idle / 3));
            ch.setOption(jdk.net.ExtendedSocketOptions.TCP_KEEPCOUNT, 3);
        } catch (UnsupportedOperationException e) {
            // not Linux/macOS: the system's keepalive timers (hours) still apply
        }
    }

    @Override
    public Transfer push(PushRequest push, KvPool source, TransferPlan plan, PeerEndpoint peer) {
        return push(push, source, plan, peer, (SourceReadiness) null);
    }

    @Override
    public boolean streams() {
        return true;
    }

    @Override
    public Transfer push(PushRequest push, KvPool source, TransferPlan plan, PeerEndpoint peer, SourceReadiness ready) {
        PushRequest request = push.forPeer(peer);
        TcpTransfer t = new TcpTransfer(request, plan, peer);
        try {
            if (closed) {
                throw new TransferException(TransferError.INTERNAL, "tcp transport is closed");
            }
            if (!canReach(peer)) {
                throw new TransferException(TransferError.NO_TRANSPORT, "tcp cannot push to " + peer);
            }
            MemorySegment[] src = new MemorySegment[plan.source().regionCount()];
            for (int r = 0; r < src.length; r++) {
                src[r] = source.hostRegion(r).orElseThrow(() -> new TransferException(TransferError.UNSUPPORTED,
                        "tcp transport needs a host-accessible source pool, got " + source.location() + " (GPU pools need a staging path)"));
            }
            long total = plan.totalBytes();
            if (ready == null) {
                int stripes = (int) Math.max(1, Math.min(config.connections(), total / MIN_STRIPE_BYTES));
                t.start(stripes);
                for (int i = 0; i < stripes; i++) {
                    long from = total * i / stripes;
                    long to = total * (i + 1) / stripes;
                    io.execute(() -> t.runStripe(src, from, to, null, request));
                }
            } else {
                // Layer by layer: the stripes take the plan's bytes up to the last layer (spans are region-major, layer 0
                // first) and send each piece once the engine reports it computed; the last layer goes in a stripe of its
                // own once the prefill is complete, with its first token, so the landing it completes carries it.
                int tailRegion = plan.source().region(plan.source().numLayers() - 1, 0);
                long body = 0;
                for (int i = 0; i < plan.spans() && plan.spanRegion(i) < tailRegion; i++) {
                    body += plan.spanLength(i);
                }
                long bodyBytes = body;
                int stripes = bodyBytes == 0 ? 0 : (int) Math.max(1, Math.min(config.connections(), bodyBytes / MIN_STRIPE_BYTES));
                t.start(stripes + 1);
                for (int i = 0; i < stripes; i++) {
                    long from = bodyBytes * i / stripes;
                    long to = bodyBytes * (i + 1) / stripes;
                    io.execute(() -> t.runStripe(src, from, to, ready, request));
                }
                io.execute(() -> t.runTail(src, bodyBytes, total, ready));
            }
        } catch (TransferException e) {
            t.fail(e);
        } catch (RuntimeException e) {
            t.fail(new TransferException(TransferError.INTERNAL, "cannot start push: " + e, e));
        }
        return t;
    }

    private PeerConnectionPool.Lease<SenderConnection> acquire(PeerEndpoint peer) {
        return pool.acquire(peer, (p, gen) -> SenderConnection.open(p, gen, senderId, config, watchdog, tls));
    }

    private void release(SenderConnection c) {
        c.busy(false);
        pool.release(c);
    }

    @Override
    public void forgetPeer(String engineId) {
        pool.forget(engineId);
        log.atInfo().addKeyValue("engineId", engineId).log("dropped cached tcp connections to the engine's worker");
    }

    /** One push: its stripes, their results, cancellation. */
    private final class TcpTransfer extends AbstractTransfer {
        private final PushRequest request;
        private final TransferPlan plan;
        private final PeerEndpoint peer;
        private final AtomicLong acked = new AtomicLong();
        private final long t0 = System.nanoTime();
        /** Latest stripe's step marks (µs): every connection ready, every stripe admitted, last byte written. */
        private final AtomicLong connected = new AtomicLong();
        private final AtomicLong admitted = new AtomicLong();
        private final AtomicLong written = new AtomicLong();
        private AtomicInteger pending;
        private int stripes;
        private TransferException failure;

        TcpTransfer(PushRequest request, TransferPlan plan, PeerEndpoint peer) {
            this.request = request;
            this.plan = plan;
            this.peer = peer;
        }

        void start(int n) {
            stripes = n;
            pending = new AtomicInteger(n);
        }

        /** Throws when the push must stop before the next frame. */
        private void checkGoOn(SenderConnection c, int stream) throws IOException {
            String why = stopReason();
            TransferError kind = TransferError.ABORTED;
            if (why == null && request.deadlinePassed()) {
                why = "the order's deadline passed";
                kind = TransferError.TIMEOUT;
            }
            if (why != null) {
                c.abort(stream, why);
                throw new TransferException(kind, (kind == TransferError.ABORTED ? "aborted: " : "") + why);
            }
        }

        /**
         * The last layer's stripe of a push sent layer by layer: waits for the prefill to complete, then sends
         * {@code [from, to)} with the prefill's first token.
         */
        void runTail(MemorySegment[] src, long from, long to, SourceReadiness ready) {
            try {
                while (!ready.awaitComplete(WAIT_SLICE_MS)) {
                    stopIfMust(ready);
                }
                stopIfMust(ready);
            } catch (TransferException e) {
                done(0, e);
                return;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                done(0, new TransferException(TransferError.ABORTED, "aborted: interrupted while the prefill computed"));
                return;
            }
            runStripe(src, from, to, null, request.withFirstToken(ready.firstToken()).forPeer(peer));
        }

        /** Throws when a push waiting for its source must stop: cancelled, past its deadline, or its prefill failed. */
        private void stopIfMust(SourceReadiness ready) {
            String why = stopReason();
            if (why == null && ready.failure() != null) {
                why = ready.failure();
            }
            if (why != null) {
                throw new TransferException(TransferError.ABORTED, "aborted: " + why);
            }
            if (request.deadlinePassed()) {
                throw new TransferException(TransferError.TIMEOUT, "the order's deadline passed while its prefill computed");
            }
        }

        /** Waits for the engine's next report after {@code seen}; meanwhile the connection is idle, not stalled. */
        private void awaitMore(SenderConnection c, int stream, SourceReadiness ready, long seen) throws IOException, InterruptedException {
            c.busy(false);
            while (!ready.awaitChange(seen, WAIT_SLICE_MS)) {
                checkGoOn(c, stream);
            }
            String why = ready.failure();
            if (why != null) {
                c.abort(stream, why);
                throw new TransferException(TransferError.ABORTED, "aborted: " + why);
            }
        }

        /** {@code [from, to)} of the plan as one cursor per region it touches, lowest region (layer) first. */
        private List<PlanCursor> perRegion(long from, long to) {
            List<PlanCursor> out = new ArrayList<>();
            long pos = 0;
            int i = 0;
            while (i < plan.spans() && pos < to) {
                int region = plan.spanRegion(i);
                long start = pos;
                while (i < plan.spans() && plan.spanRegion(i) == region) {
                    pos += plan.spanLength(i++);
                }
                long a = Math.max(from, start);
                long b = Math.min(to, pos);
                if (a < b) {
                    out.add(new PlanCursor(plan, a, b));
                }
            }
            return out;
        }

        void runStripe(MemorySegment[] src, long from, long to, SourceReadiness ready, PushRequest request) {
            BulkPriority.apply(config.nice());
            int stream = streams.incrementAndGet();
            boolean peerPipelines = "true".equals(peer.attributes().get(PIPELINED_BEGIN));
            SenderConnection c = null;
            long sent = 0;
            try {
                for (int tries = 0; ; tries++) {
                    PeerConnectionPool.Lease<SenderConnection> l = acquire(peer);
                    c = l.connection();
                    sent = 0;
                    // A receiver that announces it takes WRITE frames right behind the BEGIN (admission while they
                    // travel, a refusal answered at END) costs no round trip before the first page byte. Only on a
                    // connection known to be alive lately (new, or used within the last second).
                    boolean pipelined = peerPipelines && (!l.reused() || c.idleNanos() < PIPELINE_IDLE_NANOS);
                    try {
                        c.busy(true);
                        connected.accumulateAndGet(Marks.nowMicros(), Math::max);
                        if (pipelined) {
                            c.beginPipelined(stream, request, plan.source(), to - from);
                        } else {
                            c.begin(stream, request, plan.source(), to - from);
                        }
                        admitted.accumulateAndGet(Marks.nowMicros(), Math::max);
                        // Layer by layer, one cursor per region (layer-major): each frame takes whatever is computed, lowest
                        // layer first, so a chunked prefill's first chunk goes out in every layer before the next chunk's
                        // first layer exists; without a source still computing, one cursor over the range.
                        List<PlanCursor> cursors = ready == null ? List.of(new PlanCursor(plan, from, to)) : perRegion(from, to);
                        int first = 0;
                        while (first < cursors.size()) {
                            checkGoOn(c, stream);
                            long seen = ready == null ? 0 : ready.version();
                            c.startFrame();
                            int n = 0;
                            long payload = 0;
                            for (int k = first; k < cursors.size() && n < c.maxSegments() && payload < c.maxPayload(); k++) {
                                PlanCursor cursor = cursors.get(k);
                                while (n < c.maxSegments() && payload < c.maxPayload() && cursor.hasMore()) {
                                    long max = c.maxPayload() - payload;
                                    if (ready != null) {
                                        max = ready.readyBytes(cursor.nextRegion(), cursor.nextSourceOffset(), cursor.nextLength(max));
                                        if (max == 0) {
                                            break; // this layer waits for the engine; the next may have pages to send
                                        }
                                    }
                                    long len = cursor.take(max);
                                    n = c.putSegment(n, cursor.region(), cursor.destOffset(), src[cursor.region()]
                                            .asSlice(cursor.sourceOffset(), len).asByteBuffer());
                                    payload += len;
                                }
                            }
                            while (first < cursors.size() && !cursors.get(first).hasMore()) {
                                first++;
                            }
                            if (n == 0) {
                                awaitMore(c, stream, ready, seen); // nothing computed that is not sent: the engine's next report
                                continue;
                            }
                            rateLimiter.acquire(payload);
                            c.busy(true);
                            c.sendFrame(stream, n, payload);
                            sent += payload;
                        }
                        written.accumulateAndGet(Marks.nowMicros(), Math::max);
                        long ack = c.end(stream, to - from);
                        if (ack != to - from) {
                            throw new TransferException(TransferError.PROTOCOL, peer + " acknowledged " + ack + " of " + (to - from) + " bytes");
                        }
                        release(c);
                        c = null;
                        done(ack, null);
                        return;
                    } catch (IOException e) {
                        // A pooled connection to a peer that restarted is dead on first use: one fresh try, if not a byte
                        // of the stripe got through (a pipelined BEGIN shows it only at the first frame). Sending the
                        // stripe again is safe: the same bytes for the same pages, admitted again by the receiver.
                        if (!l.reused() || tries > 0 || sent > 0 || e instanceof FrameException || stopReason() != null || c.timedOut()) {
                            throw e;
                        }
                        c.close();
                        c = null;
                    }
                }
            } catch (TransferException e) {
                if (c != null && e.kind() == TransferError.ABORTED && stopReason() != null && c.isOpen()) {
                    release(c); // ABORT was acknowledged: the connection is clean
                    c = null;
                }
                done(0, e);
            } catch (IOException e) {
                done(0, ioFailure(c, e, sent, to - from));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                done(0, new TransferException(TransferError.ABORTED, "aborted: interrupted while the prefill computed"));
            } catch (RuntimeException e) {
                log.atError().setCause(e).addKeyValue("orderId", request.orderId()).log("tcp push failed");
                done(0, new TransferException(TransferError.INTERNAL, "tcp push failed: " + e, e));
            } finally {
                if (c != null) {
                    c.close();
                }
            }
        }

        private TransferException ioFailure(SenderConnection c, IOException e, long sent, long stripeBytes) {
            if (c != null && c.timedOut()) {
                return new TransferException(TransferError.TIMEOUT, "no progress with " + peer + " for " + config.ioTimeout().toMillis()
                        + " ms after " + sent + " of " + stripeBytes + " bytes", e);
            }
            String cancelled = cancelReason();
            if (cancelled != null) {
                // The abort handshake itself failed: the push is still over, and it was cancelled, not lost.
                return new TransferException(TransferError.ABORTED, "aborted: " + cancelled + " (connection to " + peer + " closed: "
                        + e.getMessage() + ")", e);
            }
            if (e instanceof FrameException) {
                return new TransferException(TransferError.PROTOCOL, peer + " broke the wire format: " + e.getMessage(), e);
            }
            if (closed) {
                return new TransferException(TransferError.INTERNAL, "tcp transport closed during the push", e);
            }
            return new TransferException(TransferError.CONNECTION_LOST, "connection to " + peer + " lost after " + sent + " of " + stripeBytes
                    + " bytes: " + e.getMessage(), e);
        }

        private void done(long ackedBytes, TransferException e) {
            synchronized (this) {
                if (e != null && failure == null) {
                    failure = e;
                    stop("another stripe failed: " + e.reason());
                }
            }
            acked.addAndGet(ackedBytes);
            if (pending.decrementAndGet() == 0) {
                TransferException f;
                synchronized (this) {
                    f = failure;
                }
                if (f != null) {
                    fail(f);
                } else {
                    Marks m = Marks.empty().at(TransferResult.CONNECTED, connected.get()).at(TransferResult.ADMITTED, admitted.get())
                            .at(TransferResult.WRITTEN, written.get()).mark(TransferResult.ACKED);
                    succeed(new TransferResult(acked.get(), System.nanoTime() - t0, "tcp", stripes, m));
                }
            }
        }
    }

    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        if (server != null) {
            closeQuietly(server);
        }
        receivers.forEach(ReceiverConnection::close);
        pool.close();
        io.shutdown();
        // Threads still inside a read or write hold the pool's memory: the pool may be freed only after they left.
        long deadline = System.nanoTime() + java.util.concurrent.TimeUnit.SECONDS.toNanos(10);
        try {
            for (Thread t : receiverThreads) {
                t.join(java.time.Duration.ofNanos(Math.max(1, deadline - System.nanoTime())));
            }
            if (!io.awaitTermination(Math.max(1, deadline - System.nanoTime()), java.util.concurrent.TimeUnit.NANOSECONDS)) {
                log.warn("tcp transport: pushes still running 10 s after close");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        watchdog.close();
    }

    private static void closeQuietly(java.io.Closeable c) {
        try {
            c.close();
        } catch (IOException ignored) {
            // already closed
        }
    }
}
