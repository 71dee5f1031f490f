package io.orbitkv.pd.worker;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.engine.client.api.ApiException;
import io.orbitkv.pd.engine.client.api.ApiFrames;
import io.orbitkv.pd.engine.client.api.ApiProtocol;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.tracing.TraceContext;
import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayDeque;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The worker's local engine API (docs/engine-api.md): a Unix domain socket through which the engine this worker
 * serves — in any language — registers, reports its facts and receives its decisions.
 *
 * <p>One connection speaks for the engine at a time. A hello at a newer instance epoch fences the connection that
 * spoke before (it gets {@code fenced} and is closed); a second connection at the same epoch is refused
 * ({@code engine_taken}); an older epoch is refused ({@code fenced}). Decisions get sequence numbers and are kept in a
 * bounded buffer, so an engine that reconnects at the same epoch resumes after the last one it saw and misses none.
 *
 * <p>Threads: one accept thread; per connection one reader and one writer (a queue), so neither a slow engine nor a
 * slow broker ever blocks the worker's command loop or another connection. Nothing a client sends escapes as an
 * exception: refusals are {@code error} frames naming the field; frames that break the stream close the connection.
 */
public final class EngineApiServer implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(EngineApiServer.class);
    /** Frames queued for one client beyond which it is taken for hung and dropped (it resumes by sequence number). */
    private static final int MAX_QUEUED_FRAMES = 65_536;
    private static final int MAX_CONNECTIONS = 8;
    private static final int DEDUPE = 200_000;

    /** What the server needs from the worker. Calls come from connection threads. */
    public interface Host {

        /**
         * Takes the engine of {@code hello}: a new instance (its epoch is new) builds the worker's data plane over the
         * engine's pool and announces the engine; a reconnect of the same instance checks that nothing changed.
         * Returns the welcome's extra fields (endpoints, pool).
         */
        ObjectNode attach(ApiProtocol.Hello hello, boolean newInstance) throws ApiException;

        /** Writes a fact to Kafka; completes with its event id once the broker has it. */
        CompletableFuture<String> report(ApiProtocol.FactRequest fact);

        /** Writes the engine's KV cache events to Kafka, in order; completes with the last one's id once the broker has them all. */
        CompletableFuture<String> reportKv(long instanceEpoch, ApiProtocol.KvEventsRequest events);

        /** The engine's prefill progress (layer by layer), received at {@code receivedMicros}: for the order runner, not the log. */
        default void progress(long instanceEpoch, ApiProtocol.PrefillProgress progress, long receivedMicros) {
        }

        /** The engine said goodbye: announce that it left and release its pool. */
        void detach(long instanceEpoch);

        /** The worker's engine id, layout and epoch the facts are checked against. */
        String engineId();

        /** The newest instance epoch the engines topic knows for this engine (0: none): a new instance must be newer. */
        long knownEpoch();

        io.orbitkv.pd.engine.client.EngineFacts facts();
    }

    private final Path path;
    private final int maxFrameBytes;
    private final long ioTimeoutNanos;
    private final int bufferLimit;
    private final Host host;
    private final String session = UUID.randomUUID().toString();
    private final Set<Connection> connections = ConcurrentHashMap.newKeySet();
    /** The newest instance epoch that registered here (kept after a goodbye: a later instance must be newer). */
    private long newestEpoch;
    private final AtomicInteger refused = new AtomicInteger();
    private final Map<String, AtomicLong> refusals = new ConcurrentHashMap<>();
    private ServerSocketChannel server;
    private volatile boolean running = true;

    // The engine's state, guarded by this.
    private Connection owner;
    private ApiProtocol.Hello registered;
    private long seq;
    private final ArrayDeque<Buffered> buffer = new ArrayDeque<>();
    private final Map<String, Boolean> seen = new LinkedHashMap<>(4096, 0.75f, false) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, Boolean> eldest) {
            return size() > DEDUPE;
        }
    };

    private record Buffered(long seq, ByteBuffer frame) { }

    /** Key prefix in {@link #seen}: the engine was handed this request's KV (one kv_ready per request). */
    private static final String KV_DELIVERED = "kv-delivered:";

    /**
     * {@code ioTimeout}: a client stalled this long inside a frame, or silent this long before its hello, is disconnected
     * (an engine idle between frames never is).
     */
    public EngineApiServer(Path path, int maxFrameBytes, int bufferLimit, java.time.Duration ioTimeout, Host host) {
        this.ioTimeoutNanos = ioTimeout.toNanos();
        this.path = path;
        this.maxFrameBytes = maxFrameBytes;
        this.bufferLimit = bufferLimit;
        this.host = host;
    }

    /** Binds the socket (replacing a stale one left by a crashed worker) and starts accepting. */
    public EngineApiServer start() throws IOException {
        if (Files.exists(path)) {
            if (live(path)) {
                throw new IllegalArgumentException("worker.engine-api.path: another process serves " + path + " (a second worker for the same engine?)");
            }
            Files.delete(path); // left by a worker that did not stop cleanly
        }
        if (path.getParent() != null) {
            Files.createDirectories(path.getParent());
        }
        server = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
        server.bind(UnixDomainSocketAddress.of(path));
        try {
            // Local only, and only for this user: the socket is the engine's way in.
            Files.setPosixFilePermissions(path, PosixFilePermissions.fromString("rw-------"));
        } catch (UnsupportedOperationException | IOException e) {
            log.atWarn().log("engine API: cannot restrict " + path + " to this user: " + e.getMessage());
        }
        Thread.ofPlatform().daemon().name("engine-api-accept").start(this::acceptLoop);
        log.atInfo().addKeyValue("path", path).addKeyValue("session", session).log("engine API listening");
        return this;
    }

    private static boolean live(Path p) {
        try (SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX)) {
            ch.connect(UnixDomainSocketAddress.of(p));
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    public Path path() {
        return path;
    }

    public String session() {
        return session;
    }

    /** Requests refused, by error code (for /metrics and tests). */
    public Map<String, AtomicLong> refusals() {
        return refusals;
    }

    /** The last decision sequence number given out. */
    public synchronized long lastSeq() {
        return seq;
    }

    /** Drops every connection without a goodbye (fault drills and tests: what a broken socket looks like). */
    public void dropConnections() {
        connections.forEach(Connection::close);
    }

    public synchronized boolean engineConnected() {
        return owner != null && !owner.closed;
    }

    private void acceptLoop() {
        while (running) {
            SocketChannel ch;
            try {
                ch = server.accept();
            } catch (IOException e) {
                if (running) {
                    log.atError().setCause(e).log("engine API: accept failed; no new engine connections");
                }
                return;
            }
            Connection c = new Connection(ch);
            if (connections.size() >= MAX_CONNECTIONS) {
                c.send(ApiProtocol.error(null, new ApiException(ApiException.UNAVAILABLE, null, "too many connections to this worker's engine API"
                        + " (" + MAX_CONNECTIONS + "): one engine, one connection")));
                c.closeAfterQueued();
                continue;
            }
            connections.add(c);
            c.start();
        }
    }

    // ------------------------------------------------------------------------------------------------ decisions

    /**
     * A decision for the engine, from the worker's command loop (or a landing, {@link #deliverLanded}): numbered,
     * buffered for a reconnect, and queued to the engine's connection if one is live, in seq order. Never blocks on the
     * engine. Duplicates (same decision id) are dropped.
     */
    public void publish(Decision d, TraceContext trace, Marks marks, long receivedMicros) {
        Connection to;
        ByteBuffer frame;
        synchronized (this) {
            if (seen.put(d.getDecisionId(), Boolean.TRUE) != null) {
                return;
            }
            if (d.getPayload() instanceof KvReady && seen.put(KV_DELIVERED + d.getRequestId(), Boolean.TRUE) != null) {
                return; // the engine has this request's KV already: its worker handed it over when the bytes landed
            }
            long s = ++seq;
            frame = ApiFrames.encode(ApiProtocol.decision(d, s, trace, marks, receivedMicros));
            buffer.addLast(new Buffered(s, frame));
            while (buffer.size() > bufferLimit) {
                buffer.removeFirst();
            }
            to = owner;
            if (to != null) {
                // queued under the lock: two publishers (the command loop, a landing on a receiving thread) must not
                // overtake each other, or the engine would drop the lower seq as already seen
                to.send(frame.duplicate());
            }
        }
    }

    /**
     * Ready on landing: every byte of a push into the engine's pages is in place (the gate counted them against the
     * destination pages the decider's token authorized), so the engine may decode now rather than after the transfer's
     * report has gone through the decider. A {@code kv_ready} frame like the decider's (decision id
     * {@code <order id>#<attempt>/landed}, decider seq -1, the push's first token, timing {@code land} and {@code out});
     * the decider's own KvReady for the request follows in the log and is not delivered again. Once per request.
     */
    public void deliverLanded(PushRequest push, long bytes) {
        long now = Marks.nowMicros();
        KvReady k = KvReady.newBuilder().setDecodeEngineId(push.destEngineId()).setOrderId(push.orderId()).setBytes(bytes)
                .setFirstToken(push.firstToken()).build();
        Decision d = Decision.newBuilder().setRequestId(push.requestId()).setDecisionId(push.orderId() + "#" + push.attempt() + "/landed")
                .setSeq(-1).setStreamTimeMs(now / 1000).setPayload(k).build();
        publish(d, null, Marks.empty().at(Marks.LANDED, now).at(Marks.OUT, now), now);
    }

    // ------------------------------------------------------------------------------------------------ one connection

    private final class Connection {
        final SocketChannel ch;
        final LinkedBlockingQueue<ByteBuffer> out = new LinkedBlockingQueue<>();
        volatile boolean closed;
        volatile boolean closeWhenDrained;
        volatile ApiProtocol.Hello hello;
        /** A frame's first byte arrived and the frame is not complete yet; when the last bytes came. */
        volatile boolean inFrame;
        volatile long lastBytesNanos = System.nanoTime();
        final long openedNanos = System.nanoTime();
        /** The socket as the frame reader sees it, marking progress for the deadline check ({@link #overdue()}). */
        final java.nio.channels.ReadableByteChannel watched = new java.nio.channels.ReadableByteChannel() {
            @Override
            public int read(ByteBuffer dst) throws IOException {
                int n = ch.read(dst);
                if (n > 0) {
                    inFrame = true;
                    lastBytesNanos = System.nanoTime();
                }
                return n;
            }

            @Override
            public boolean isOpen() {
                return ch.isOpen();
            }

            @Override
            public void close() throws IOException {
                ch.close();
            }
        };

        Connection(SocketChannel ch) {
            this.ch = ch;
        }

        void start() {
            Thread.ofPlatform().daemon().name("engine-api-read").start(this::readLoop);
            Thread.ofPlatform().daemon().name("engine-api-write").start(this::writeLoop);
        }

        void send(ObjectNode m) {
            send(ApiFrames.encode(m));
        }

        void send(ByteBuffer frame) {
            if (closed) {
                return;
            }
            if (out.size() >= MAX_QUEUED_FRAMES) {
                log.atWarn().addKeyValue("queued", out.size()).log("engine API: the engine does not read its frames; dropping the connection"
                        + " (it resumes after the last decision it saw when it reconnects)");
                close();
                return;
            }
            out.add(frame);
        }

        void closeAfterQueued() {
            closeWhenDrained = true;
            out.add(ByteBuffer.allocate(0));
            if (!ch.isOpen()) {
                close();
            } else {
                Thread.ofPlatform().daemon().name("engine-api-write").start(this::writeLoop);
            }
        }

        /**
         * Why this client has held its connection too long without speaking, or null: no hello within the io-timeout of
         * connecting, or a frame begun and not finished within it (worker.engine-api.io-timeout). Checked by the writer
         * at least every second, also while decisions flow; an engine idle between frames is never overdue.
         */
        private ApiException overdue() {
            long now = System.nanoTime();
            if (hello == null && now - openedNanos > ioTimeoutNanos) {
                return new ApiException(ApiException.BAD_REQUEST, "op", "op: no hello within " + ioTimeoutNanos / 1_000_000
                        + " ms of connecting (worker.engine-api.io-timeout)");
            }
            if (inFrame && now - lastBytesNanos > ioTimeoutNanos) {
                return new ApiException(ApiException.BAD_FRAME, null, "a frame begun and not finished within " + ioTimeoutNanos / 1_000_000
                        + " ms (worker.engine-api.io-timeout)");
            }
            return null;
        }

        private void writeLoop() {
            try {
                while (!closed) {
                    ByteBuffer b = out.poll(1, TimeUnit.SECONDS);
                    ApiException overdue = closeWhenDrained ? null : overdue();
                    if (overdue != null) {
                        refuse(null, overdue);
                        closeWhenDrained = true;
                        out.add(ByteBuffer.allocate(0));
                    }
                    if (b == null) {
                        continue;
                    }
                    if (!b.hasRemaining() && closeWhenDrained) {
                        break;
                    }
                    while (b.hasRemaining()) {
                        ch.write(b);
                    }
                }
            } catch (IOException e) {
                // the client went away: the reader sees it too
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } finally {
                if (closeWhenDrained || closed) {
                    close();
                }
            }
        }

        private void readLoop() {
            ByteBuffer header = ByteBuffer.allocate(4);
            try {
                while (!closed) {
                    ObjectNode m;
                    try {
                        m = ApiFrames.read(watched, header, maxFrameBytes);
                        inFrame = false;
                    } catch (ApiException e) {
                        refuse(null, e);
                        closeWhenDrained = true;
                        out.add(ByteBuffer.allocate(0));
                        return;
                    }
                    if (m == null) {
                        return;
                    }
                    long received = Marks.nowMicros();
                    try {
                        handle(m, received);
                    } catch (ApiException e) {
                        refuse(ApiProtocol.idOf(m), e);
                        if (e.fatal()) {
                            closeWhenDrained = true;
                            out.add(ByteBuffer.allocate(0));
                            return;
                        }
                    } catch (RuntimeException e) {
                        log.atError().setCause(e).log("engine API: handling '" + m.path("op").asText() + "' failed");
                        refuse(ApiProtocol.idOf(m), new ApiException(ApiException.UNAVAILABLE, null, "the worker could not handle '"
                                + m.path("op").asText() + "': " + e.getMessage()));
                    }
                }
            } catch (IOException e) {
                log.atDebug().log("engine API: connection ended: " + e.getMessage());
            } finally {
                if (!closeWhenDrained) {
                    close();
                }
            }
        }

        private void refuse(Long id, ApiException e) {
            refusals.computeIfAbsent(e.code(), k -> new AtomicLong()).incrementAndGet();
            refused.incrementAndGet();
            log.atWarn().addKeyValue("code", e.code()).addKeyValue("field", e.field()).log("engine API refused: " + e.getMessage());
            send(ApiProtocol.error(id, e));
        }

        private void handle(ObjectNode m, long receivedMicros) throws ApiException {
            String op = ApiProtocol.op(m);
            if (ApiProtocol.HELLO.equals(op)) {
                hello(ApiProtocol.parseHello(m));
                return;
            }
            if (ApiProtocol.PING.equals(op)) {
                ObjectNode pong = ApiFrames.object().put("op", ApiProtocol.PONG).put("worker_us", Marks.nowMicros());
                Long id = ApiProtocol.idOf(m);
                if (id != null) {
                    pong.put("id", id);
                }
                send(pong);
                return;
            }
            ApiProtocol.Hello h = hello;
            if (h == null) {
                if (ApiProtocol.isFact(op) || ApiProtocol.BYE.equals(op) || ApiProtocol.KV_EVENTS.equals(op) || ApiProtocol.PREFILL_PROGRESS.equals(op)) {
                    throw new ApiException(ApiException.NOT_REGISTERED, "op", "op: '" + op + "' before a successful hello: register first");
                }
                throw new ApiException(ApiException.UNKNOWN_OP, "op", "op: unknown op '" + op + "'");
            }
            if (ApiProtocol.BYE.equals(op)) {
                bye(h);
                return;
            }
            if (ApiProtocol.KV_EVENTS.equals(op)) {
                kvEvents(h, m);
                return;
            }
            if (ApiProtocol.PREFILL_PROGRESS.equals(op)) {
                synchronized (EngineApiServer.this) {
                    if (owner != this) {
                        throw new ApiException(ApiException.FENCED, null, "this connection no longer speaks for engine " + h.engineId()
                                + ": a newer instance registered");
                    }
                }
                host.progress(h.instanceEpoch(), ApiProtocol.parseProgress(m, h.layout()), receivedMicros); // unanswered: nothing waits on it
                return;
            }
            if (!ApiProtocol.isFact(op)) {
                throw new ApiException(ApiException.UNKNOWN_OP, "op", "op: unknown op '" + op + "' (this worker speaks engine API version "
                        + ApiProtocol.VERSION + ")");
            }
            synchronized (EngineApiServer.this) {
                if (owner != this) {
                    throw new ApiException(ApiException.FENCED, null, "this connection no longer speaks for engine " + h.engineId()
                            + ": a newer instance registered");
                }
            }
            ApiProtocol.FactRequest f = ApiProtocol.parseFact(op, m, host.facts(), h.instanceEpoch(), h.layout());
            Marks marks = f.marks().copy().at(Marks.API, receivedMicros);
            ApiProtocol.FactRequest withApi = new ApiProtocol.FactRequest(f.id(), f.fact(), f.trace(), marks);
            host.report(withApi).whenComplete((eventId, err) -> {
                if (err == null) {
                    send(ApiProtocol.ack(f.id(), eventId));
                } else {
                    refuse(f.id(), new ApiException(ApiException.UNAVAILABLE, null, "not written to Kafka: " + err.getMessage()));
                }
            });
        }

        /** The engine's KV cache events: checked against its layout, written in order by this connection's owner only. */
        private void kvEvents(ApiProtocol.Hello h, ObjectNode m) throws ApiException {
            synchronized (EngineApiServer.this) {
                if (owner != this) {
                    throw new ApiException(ApiException.FENCED, null, "this connection no longer speaks for engine " + h.engineId()
                            + ": a newer instance registered");
                }
            }
            ApiProtocol.KvEventsRequest r = ApiProtocol.parseKvEvents(m, h.geometry().blockSizeTokens());
            host.reportKv(h.instanceEpoch(), r).whenComplete((eventId, err) -> {
                if (err == null) {
                    send(ApiProtocol.ack(r.id(), eventId));
                } else {
                    refuse(r.id(), new ApiException(ApiException.UNAVAILABLE, null, "not written to Kafka: " + err.getMessage()));
                }
            });
        }

        private void hello(ApiProtocol.Hello h) throws ApiException {
            if (!host.engineId().equals(h.engineId())) {
                throw new ApiException(ApiException.WRONG_ENGINE, "engine_id", "engine_id: this worker serves engine '" + host.engineId()
                        + "', not '" + h.engineId() + "' (worker.engine.id)");
            }
            if (hello != null) {
                throw new ApiException(ApiException.BAD_REQUEST, "op", "op: this connection already said hello");
            }
            synchronized (EngineApiServer.this) {
                Connection prev = owner != null && !owner.closed ? owner : null;
                boolean newInstance = registered == null || h.instanceEpoch() > registered.instanceEpoch();
                if (registered != null && h.instanceEpoch() < registered.instanceEpoch()) {
                    throw new ApiException(ApiException.FENCED, "instance_epoch", "instance_epoch: " + h.instanceEpoch() + " is older than the"
                            + " registered instance " + registered.instanceEpoch() + " of engine " + h.engineId())
                            .minInstanceEpoch(registered.instanceEpoch() + 1);
                }
                long known = registered == null ? Math.max(newestEpoch, host.knownEpoch()) : 0;
                if (h.instanceEpoch() < known) {
                    // Its predecessor (on this host before this worker started, or on another) registered a newer epoch: instance
                    // epochs default to the start time, and this host's clock is behind that one's. The error names the smallest
                    // epoch taken; the clients say hello again with it (docs/engine-api.md, "Hello").
                    throw new ApiException(ApiException.FENCED, "instance_epoch", "instance_epoch: " + h.instanceEpoch() + " is older than"
                            + " instance " + known + " of engine " + h.engineId() + " in the engines topic (this host's clock is behind the one"
                            + " it last ran on?): say hello again with instance_epoch >= " + (known + 1)).minInstanceEpoch(known + 1);
                }
                if (prev != null && !newInstance) {
                    throw new ApiException(ApiException.ENGINE_TAKEN, "engine_id", "engine_id: engine " + h.engineId() + " is already connected"
                            + " at instance epoch " + registered.instanceEpoch() + "; a second client must use a newer instance_epoch (which"
                            + " fences the first)");
                }
                ObjectNode extra = host.attach(h, newInstance);
                if (prev != null) {
                    prev.fence(h.instanceEpoch());
                }
                long missed = 0;
                if (newInstance) {
                    buffer.clear(); // decisions for an instance that is gone
                }
                ObjectNode welcome = ApiFrames.object().put("op", ApiProtocol.WELCOME).put("version", ApiProtocol.VERSION).put("session", session)
                        .put("engine_id", h.engineId()).put("instance_epoch", h.instanceEpoch()).put("max_frame_bytes", maxFrameBytes)
                        .put("new_instance", newInstance);
                long after = h.resume() != null && session.equals(h.resume().session()) && !newInstance ? h.resume().afterSeq() : -1;
                int replay = 0;
                if (after >= 0 && !buffer.isEmpty() && buffer.peekFirst().seq() > after + 1) {
                    missed = buffer.peekFirst().seq() - after - 1;
                }
                welcome.put("last_seq", seq).put("missed", missed);
                welcome.setAll(extra);
                this.hello = h;
                registered = h;
                newestEpoch = Math.max(newestEpoch, h.instanceEpoch());
                owner = this;
                send(welcome);
                if (after >= 0) {
                    for (Buffered b : buffer) {
                        if (b.seq() > after) {
                            send(b.frame().duplicate());
                            replay++;
                        }
                    }
                }
                if (missed > 0) {
                    log.atWarn().addKeyValue("missed", missed).log("engine API: the engine was away longer than worker.engine-api.decision-buffer"
                            + " holds: " + missed + " decisions are gone (its requests end by the decider's timeouts)");
                }
                log.atInfo().addKeyValue("engineId", h.engineId()).addKeyValue("instanceEpoch", h.instanceEpoch())
                        .addKeyValue("newInstance", newInstance).addKeyValue("replayed", replay).log("engine API: engine connected");
            }
        }

        private void bye(ApiProtocol.Hello h) {
            synchronized (EngineApiServer.this) {
                if (owner == this) {
                    host.detach(h.instanceEpoch());
                    owner = null;
                    registered = null;
                    buffer.clear();
                }
            }
            send(ApiFrames.object().put("op", ApiProtocol.BYE));
            closeWhenDrained = true;
            out.add(ByteBuffer.allocate(0));
        }

        void fence(long byEpoch) {
            send(ApiProtocol.error(null, new ApiException(ApiException.FENCED, null, "engine " + hello.engineId() + " registered again at instance"
                    + " epoch " + byEpoch + ": this connection (epoch " + hello.instanceEpoch() + ") no longer speaks for it")));
            closeWhenDrained = true;
            out.add(ByteBuffer.allocate(0));
        }

        void close() {
            if (closed) {
                return;
            }
            closed = true;
            connections.remove(this);
            try {
                ch.close();
            } catch (IOException ignored) {
                // closing anyway
            }
            out.clear();
            synchronized (EngineApiServer.this) {
                if (owner == this) {
                    log.atWarn().addKeyValue("engineId", hello.engineId()).log("engine API: the engine's connection dropped; its decisions are"
                            + " kept for a reconnect at the same instance epoch");
                }
            }
        }
    }

    @Override
    public void close() {
        running = false;
        try {
            if (server != null) {
                server.close();
            }
        } catch (IOException ignored) {
            // closing anyway
        }
        connections.forEach(Connection::close);
        try {
            Files.deleteIfExists(path);
        } catch (IOException ignored) {
            // best effort
        }
    }
}
