package io.orbitkv.pd.engine.client.api;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.engine.client.DecisionListener;
import io.orbitkv.pd.engine.client.EngineControl;
import io.orbitkv.pd.engine.client.KvSignal;
import io.orbitkv.pd.engine.client.KvWaiters;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.events.KvLayout;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceContext;
import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentSkipListMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The Java client of the transfer worker's local engine API (docs/engine-api.md): the same contract as
 * {@link io.orbitkv.pd.engine.client.EngineClient}, but the engine talks only to its worker over a Unix domain
 * socket; the worker writes the facts to Kafka and streams the engine's decisions back. This is what an engine in any
 * language does (the Python library, {@code python/orbitkv_pd}, is the same client).
 *
 * <p>Each report completes when the worker says the broker has it. When the connection drops, the client reconnects
 * with the same instance epoch, resumes the decision stream after the last sequence number it saw, and sends again
 * every report not yet acknowledged (event ids are deterministic: the decider recognizes a repeat). A worker that
 * fences this instance (a newer epoch registered) ends the client: every pending report fails.
 */
public final class EngineApiClient implements EngineControl {

    private static final Logger log = LoggerFactory.getLogger(EngineApiClient.class);

    /**
     * Who the engine is and where its KV pages are.
     *
     * @param pool the pool the worker maps (null: the worker's own, from its configuration)
     */
    public record Registration(String engineId, long instanceEpoch, EngineRole role, String model, String httpUrl, KvLayout layout,
                               ApiProtocol.PoolSpec pool, ApiProtocol.BlockHashing blockHash) {
        public Registration {
            Objects.requireNonNull(engineId, "engineId");
            Objects.requireNonNull(role, "role");
            Objects.requireNonNull(layout, "layout");
        }

        /** An engine that keeps no prefix cache (or does not say how it hashes it). */
        public Registration(String engineId, long instanceEpoch, EngineRole role, String model, String httpUrl, KvLayout layout,
                            ApiProtocol.PoolSpec pool) {
            this(engineId, instanceEpoch, role, model, httpUrl, layout, pool, null);
        }
    }

    private final Path socket;
    private volatile Registration reg;
    private final KvWaiters waiters;
    private final Duration reconnectFor;
    private final AtomicLong ids = new AtomicLong();
    private final Map<Long, Pending> pending = new ConcurrentSkipListMap<>();
    private final AtomicBoolean closed = new AtomicBoolean();
    private final Object writeLock = new Object();
    private final CompletableFuture<Void> byeAck = new CompletableFuture<>();
    private volatile SocketChannel channel;
    private volatile String session;
    private volatile long lastSeq;
    private volatile long delivered;
    private volatile String fencedBecause;
    private volatile JsonNode welcome;
    private Thread reader;

    private record Pending(ObjectNode frame, CompletableFuture<Void> done) { }

    private EngineApiClient(Path socket, Registration reg, DecisionListener listener, Duration reconnectFor) {
        this.socket = socket;
        this.reg = reg;
        this.waiters = new KvWaiters(reg.engineId(), listener);
        this.reconnectFor = reconnectFor;
    }

    /**
     * Connects to the worker's engine API at {@code socket}, registers, and starts reading decisions. Waits up to
     * {@code connectWait} for the worker's socket to appear (the worker may still be starting).
     *
     * @throws ApiException what the worker refused in the hello (wrong engine, taken, bad layout or pool)
     */
    public static EngineApiClient connect(Path socket, Registration reg, DecisionListener listener, Duration connectWait)
            throws IOException, ApiException, InterruptedException {
        EngineApiClient c = new EngineApiClient(socket, reg, listener, connectWait);
        try {
            c.open(connectWait);
        } catch (IOException | ApiException | InterruptedException | RuntimeException e) {
            c.closeQuietly();
            throw e;
        }
        c.reader = Thread.ofPlatform().daemon().name("engine-api-" + reg.engineId()).start(c::readLoop);
        return c;
    }

    private void open(Duration wait) throws IOException, ApiException, InterruptedException {
        long deadline = System.nanoTime() + wait.toNanos();
        long backoff = 20;
        while (true) {
            try {
                SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
                try {
                    ch.connect(UnixDomainSocketAddress.of(socket));
                    try {
                        handshake(ch);
                    } catch (ApiException refused) {
                        if (!takeNamedEpoch(refused)) {
                            throw refused;
                        }
                        ch.close();
                        ch = SocketChannel.open(StandardProtocolFamily.UNIX);
                        ch.connect(UnixDomainSocketAddress.of(socket));
                        handshake(ch); // with the epoch the worker named; a second refusal is final
                    }
                    channel = ch;
                    return;
                } catch (IOException | ApiException | RuntimeException e) {
                    ch.close();
                    throw e;
                }
            } catch (IOException e) {
                if (System.nanoTime() > deadline || closed.get()) {
                    throw new IOException("engine API at " + socket + ": " + e.getMessage() + " (is './orbitkv-pd worker' running with"
                            + " worker.engine-api.path=" + socket + "?)", e);
                }
                Thread.sleep(backoff);
                backoff = Math.min(500, backoff * 2);
            }
        }
    }

    /**
     * A first hello fenced as older than the engine's last instance names the smallest epoch the worker takes: a new
     * instance whose epoch (its start time, by default) is older than its predecessor's, on a host whose clock is behind
     * the one the engine last ran on. Takes it (true: say hello again, once); false for any other refusal.
     */
    private boolean takeNamedEpoch(ApiException e) {
        if (session != null || !ApiException.FENCED.equals(e.code()) || e.minInstanceEpoch() <= reg.instanceEpoch()) {
            return false;
        }
        log.atWarn().addKeyValue("engineId", reg.engineId()).log("instance epoch " + reg.instanceEpoch() + " is older than the engine's"
                + " last instance (this host's clock is behind?): registering as instance " + e.minInstanceEpoch());
        reg = new Registration(reg.engineId(), e.minInstanceEpoch(), reg.role(), reg.model(), reg.httpUrl(), reg.layout(), reg.pool(), reg.blockHash());
        return true;
    }

    private void handshake(SocketChannel ch) throws IOException, ApiException {
        String s = session;
        ApiProtocol.Resume resume = s == null ? null : new ApiProtocol.Resume(s, lastSeq);
        ApiFrames.write(ch, ApiProtocol.hello(reg.engineId(), reg.instanceEpoch(), reg.role(), reg.model(), reg.httpUrl() == null ? "" : reg.httpUrl(),
                reg.layout(), reg.pool(), resume, reg.blockHash()));
        ObjectNode answer = ApiFrames.read(ch, ByteBuffer.allocate(4), ApiFrames.DEFAULT_MAX_BYTES);
        if (answer == null) {
            throw new IOException("the worker closed the connection during the hello");
        }
        String op = ApiProtocol.op(answer);
        if (ApiProtocol.ERROR.equals(op)) {
            throw new ApiException(answer.path("code").asText(), answer.hasNonNull("field") ? answer.get("field").asText() : null,
                    answer.path("message").asText()).minInstanceEpoch(answer.path("min_instance_epoch").asLong(0));
        }
        if (!ApiProtocol.WELCOME.equals(op)) {
            throw new ApiException(ApiException.BAD_FRAME, "op", "expected welcome, got " + op);
        }
        String newSession = answer.path("session").asText();
        if (s != null && !s.equals(newSession)) {
            log.atWarn().addKeyValue("engineId", reg.engineId()).log("the worker restarted (new session): decisions it had not delivered are"
                    + " re-read from its committed position");
            lastSeq = 0;
        }
        session = newSession;
        welcome = answer;
    }

    /** The worker's welcome: its session, endpoints and limits. */
    public JsonNode welcome() {
        return welcome;
    }

    // ------------------------------------------------------------------------------------------------ reading

    private void readLoop() {
        ByteBuffer header = ByteBuffer.allocate(4);
        while (!closed.get()) {
            SocketChannel ch = channel;
            try {
                ObjectNode m = ApiFrames.read(ch, header, ApiFrames.DEFAULT_MAX_BYTES);
                if (m == null) {
                    throw new IOException("the worker closed the connection");
                }
                handle(m);
            } catch (IOException | ApiException | RuntimeException e) {
                if (closed.get() || fencedBecause != null) {
                    break;
                }
                log.atWarn().addKeyValue("engineId", reg.engineId()).log("engine API connection lost (" + e.getMessage() + "): reconnecting");
                if (!reconnect()) {
                    break;
                }
            }
        }
        String why = fencedBecause != null ? fencedBecause : "engine API client closed";
        pending.values().forEach(p -> p.done().completeExceptionally(new IllegalStateException(why)));
        pending.clear();
        byeAck.complete(null);
    }

    private boolean reconnect() {
        try {
            channel.close();
        } catch (IOException ignored) {
            // gone already
        }
        try {
            open(reconnectFor);
        } catch (IOException | ApiException e) {
            fencedBecause = "engine API: cannot reconnect to " + socket + ": " + e.getMessage();
            log.atError().addKeyValue("engineId", reg.engineId()).log(fencedBecause);
            return false;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
        // Reports the worker may not have written: send them again (same event ids, so a repeat is recognized).
        for (Pending p : pending.values()) {
            try {
                write(p.frame());
            } catch (IOException e) {
                return reconnect();
            }
        }
        log.atInfo().addKeyValue("engineId", reg.engineId()).addKeyValue("resumedAfterSeq", lastSeq).addKeyValue("resent", pending.size())
                .log("engine API reconnected");
        return true;
    }

    private void handle(ObjectNode m) throws ApiException {
        String op = ApiProtocol.op(m);
        switch (op) {
            case ApiProtocol.DECISION -> {
                long received = Marks.nowMicros();
                long seq = m.path("seq").asLong();
                if (seq <= lastSeq) {
                    return; // replayed after a reconnect and already seen
                }
                lastSeq = seq;
                Decision d = ApiProtocol.parseDecision(m);
                delivered++;
                Marks marks = m.hasNonNull("timing") ? Marks.parse(m.get("timing").asText()) : Marks.empty();
                try {
                    waiters.onDecision(d, received, marks);
                } catch (RuntimeException e) {
                    log.atError().setCause(e).addKeyValue("requestId", d.getRequestId()).log("acting on a decision failed");
                }
            }
            case ApiProtocol.ACK -> {
                Pending p = pending.remove(m.path("id").asLong());
                if (p != null) {
                    p.done().complete(null);
                }
            }
            case ApiProtocol.PONG -> {
                Pending p = pending.remove(m.path("id").asLong());
                if (p != null) {
                    p.done().complete(null);
                }
            }
            case ApiProtocol.BYE -> {
                closed.set(true); // the worker closes the connection next: that is the end, not a loss
                byeAck.complete(null);
            }
            case ApiProtocol.ERROR -> {
                ApiException e = new ApiException(m.path("code").asText(), m.hasNonNull("field") ? m.get("field").asText() : null,
                        m.path("message").asText());
                Long id = ApiProtocol.idOf(m);
                Pending p = id == null ? null : pending.remove(id);
                if (p != null) {
                    p.done().completeExceptionally(e);
                } else {
                    log.atError().addKeyValue("engineId", reg.engineId()).addKeyValue("code", e.code()).log("engine API: " + e.getMessage());
                }
                if (e.fatal()) {
                    fencedBecause = "engine API: " + e.getMessage();
                    closeChannel();
                }
            }
            default -> log.atWarn().log("engine API: ignoring op '" + op + "' (newer worker?)");
        }
    }

    // ------------------------------------------------------------------------------------------------ writing

    /** The KV cache events of this instance, numbered from 1 (docs/engine-api.md, "KV cache events"). */
    private final java.util.concurrent.atomic.AtomicLong kvSeq = new java.util.concurrent.atomic.AtomicLong();

    private CompletableFuture<Void> request(ObjectNode frame) {
        if (closed.get() || fencedBecause != null) {
            return CompletableFuture.failedFuture(new IllegalStateException(fencedBecause != null ? fencedBecause : "engine API client closed"));
        }
        long id = ids.incrementAndGet();
        frame.put("id", id);
        CompletableFuture<Void> done = new CompletableFuture<>();
        pending.put(id, new Pending(frame, done));
        try {
            write(frame);
        } catch (IOException e) {
            // The reader reconnects and sends it again.
            log.atDebug().log("engine API write failed: " + e.getMessage());
        }
        return done;
    }

    private void write(ObjectNode frame) throws IOException {
        ByteBuffer b = ApiFrames.encode(frame);
        synchronized (writeLock) {
            SocketChannel ch = channel;
            while (b.hasRemaining()) {
                ch.write(b);
            }
        }
    }

    private ObjectNode fact(String op, String requestId, TraceContext trace, Marks marks) {
        ObjectNode m = ApiFrames.object().put("op", op).put("request_id", requestId);
        if (trace != null) {
            m.put("traceparent", trace.format());
        }
        if (marks != null && !marks.isEmpty()) {
            m.put("timing", marks.format());
        }
        return m;
    }

    private static void blocks(ObjectNode m, String field, int[] blocks) {
        ArrayNode a = m.putArray(field);
        for (int b : blocks) {
            a.add(b);
        }
    }

    @Override
    public String engineId() {
        return reg.engineId();
    }

    @Override
    public long instanceEpoch() {
        return reg.instanceEpoch();
    }

    @Override
    public CompletableFuture<Void> prefillCompleted(String requestId, int[] sourceBlocks, int numTokens, Integer firstToken, TraceContext trace,
                                                    Marks marks) {
        ObjectNode m = fact(ApiProtocol.PREFILL_COMPLETED, requestId, trace, marks).put("num_tokens", numTokens);
        blocks(m, "source_blocks", sourceBlocks);
        if (firstToken != null) {
            m.put("first_token", firstToken);
        }
        return request(m);
    }

    @Override
    public CompletableFuture<Void> prefillFailed(String requestId, String reason, boolean retriable, TraceContext trace, Marks marks) {
        return request(fact(ApiProtocol.PREFILL_FAILED, requestId, trace, marks).put("reason", reason).put("retriable", retriable));
    }

    @Override
    public CompletableFuture<Void> decodeReady(String requestId, String leaseId, long leaseEpoch, int[] destBlocks, long leaseDeadlineMs,
                                               TraceContext trace, Marks marks) {
        return decodeReady(requestId, leaseId, leaseEpoch, destBlocks, leaseDeadlineMs, 0, trace, marks);
    }

    @Override
    public CompletableFuture<Void> decodeReady(String requestId, String leaseId, long leaseEpoch, int[] destBlocks, long leaseDeadlineMs,
                                               int cachedBlocks, TraceContext trace, Marks marks) {
        ObjectNode m = fact(ApiProtocol.DECODE_READY, requestId, trace, marks).put("lease_id", leaseId).put("lease_epoch", leaseEpoch)
                .put("lease_deadline_ms", leaseDeadlineMs);
        if (cachedBlocks > 0) {
            m.put("cached_blocks", cachedBlocks);
        }
        blocks(m, "dest_blocks", destBlocks);
        return request(m);
    }

    @Override
    public CompletableFuture<Void> decodeRejected(String requestId, String reason, TraceContext trace, Marks marks) {
        return request(fact(ApiProtocol.DECODE_REJECTED, requestId, trace, marks).put("reason", reason));
    }

    @Override
    public CompletableFuture<Void> heartbeat(String requestId, String leaseId, long leaseEpoch, long extendToMs, int seq, TraceContext trace,
                                             Marks marks) {
        return request(fact(ApiProtocol.HEARTBEAT, requestId, trace, marks).put("lease_id", leaseId).put("lease_epoch", leaseEpoch)
                .put("extend_to_ms", extendToMs).put("seq", seq));
    }

    @Override
    public CompletableFuture<Void> decodeCompleted(String requestId, int outputTokens, boolean recomputed, TraceContext trace, Marks marks) {
        return request(fact(ApiProtocol.DECODE_COMPLETED, requestId, trace, marks).put("output_tokens", outputTokens).put("recomputed", recomputed));
    }

    @Override
    public CompletableFuture<Void> cancel(String requestId, String reason, TraceContext trace, Marks marks) {
        return request(fact(ApiProtocol.CANCEL, requestId, trace, marks).put("reason", reason));
    }

    @Override
    public CompletableFuture<Void> kvEvents(java.util.List<Object> payloads) {
        ObjectNode m = ApiFrames.object().put("op", ApiProtocol.KV_EVENTS);
        ArrayNode a = m.putArray("events");
        synchronized (kvSeq) {
            for (Object p : payloads) {
                ApiProtocol.kvEvent(a.addObject().put("seq", kvSeq.incrementAndGet()), p);
            }
            // numbered and queued under one lock: the worker sees the numbers in order
            return request(m);
        }
    }

    @Override
    public void prefillProgress(String requestId, int[] sourceBlocks, int numTokens, int doneTokens, int chunkEnd, int layers) {
        if (closed.get() || fencedBecause != null) {
            return;
        }
        ObjectNode m = ApiFrames.object().put("op", ApiProtocol.PREFILL_PROGRESS).put("request_id", requestId).put("num_tokens", numTokens)
                .put("done_tokens", doneTokens).put("chunk_end", chunkEnd).put("layers", layers);
        if (sourceBlocks != null) {
            blocks(m, "source_blocks", sourceBlocks);
        }
        try {
            write(m); // no id, no answer: a lost progress only means the push waits for the next one, or for the prefill's end
        } catch (IOException e) {
            log.atDebug().log("engine API progress not sent: " + e.getMessage());
        }
    }

    @Override
    public boolean takesPrefillProgress() {
        return true;
    }

    /** A round trip to the worker (no Kafka): completes on its pong. */
    public CompletableFuture<Void> ping() {
        return request(ApiFrames.object().put("op", ApiProtocol.PING));
    }

    @Override
    public CompletableFuture<KvSignal> awaitKv(String requestId) {
        return waiters.awaitKv(requestId);
    }

    @Override
    public void forget(String requestId) {
        waiters.forget(requestId);
    }

    @Override
    public long decisionsSeen() {
        return delivered;
    }

    /** The last decision sequence number seen (what a reconnect resumes after). */
    public long lastSeq() {
        return lastSeq;
    }

    /** Null while the client works; else why it stopped (fenced by a newer instance, worker gone for good). */
    public String stoppedBecause() {
        return fencedBecause;
    }

    /**
     * Says goodbye (the worker announces that the engine left, so the decider voids its in-flight work) and closes.
     * Bounded: a worker that does not answer within 5 s is left. Idempotent.
     */
    @Override
    public void close() {
        if (closed.get()) {
            return;
        }
        try {
            if (fencedBecause == null && channel != null && channel.isOpen()) {
                write(ApiFrames.object().put("op", ApiProtocol.BYE));
                byeAck.get(5, TimeUnit.SECONDS);
            }
        } catch (Exception e) {
            log.atWarn().addKeyValue("engineId", reg.engineId()).log("engine API: no goodbye from the worker: " + e);
        } finally {
            closeQuietly();
        }
    }

    /** Drops the connection without a goodbye (what a crash looks like to the worker); for tests and fault drills. */
    public void abandon() {
        closeQuietly();
    }

    private void closeQuietly() {
        closed.set(true);
        closeChannel();
        waiters.endAll("engine API client closed");
        pending.values().forEach(p -> p.done().completeExceptionally(new IllegalStateException("engine API client closed")));
        pending.clear();
    }

    private void closeChannel() {
        SocketChannel ch = channel;
        if (ch != null) {
            try {
                ch.close();
            } catch (IOException ignored) {
                // closing anyway
            }
        }
    }
}
