package io.orbitkv.pd.mooncake;

import io.orbitkv.pd.events.TransportEndpoint;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvPool;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.mooncake.internal.AdmissionClient;
import io.orbitkv.pd.mooncake.internal.AdmissionServer;
import io.orbitkv.pd.mooncake.internal.AdmissionWire;
import io.orbitkv.pd.mooncake.internal.WriteBatcher;
import io.orbitkv.pd.mooncake.te.MooncakeEngine;
import io.orbitkv.pd.mooncake.te.MooncakeException;
import io.orbitkv.pd.mooncake.te.RequestArray;
import io.orbitkv.pd.mooncake.te.ResultCode;
import io.orbitkv.pd.mooncake.te.TaskStatus;
import io.orbitkv.pd.mooncake.te.TransferEngine;
import io.orbitkv.pd.transport.KvTransport;
import io.orbitkv.pd.transport.PeerConnectionPool;
import io.orbitkv.pd.transport.PeerEndpoint;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.Transfer;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import io.orbitkv.pd.transport.TransferResult;
import io.orbitkv.pd.transport.tcp.wire.FrameException;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.LockSupport;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The {@code mooncake} transport: page bytes move as one-sided WRITEs through the Mooncake Transfer Engine (RDMA in
 * production, Mooncake's TCP transport where there is no RDMA), admission and completion go over a small TCP
 * conversation with the receiving worker ({@link AdmissionWire}).
 *
 * <p>Receiving: the worker's pool is registered with its engine once, remote-accessible; the endpoint announces the
 * engine's segment name (the address), the admission listener ({@code control}) and the protocol, and the engine
 * registration already carries every region's base address. Pushes are admitted by the {@link PushGate} before any
 * write is issued and confirmed at their end (see {@link AdmissionServer}).
 *
 * <p>Sending: one thread per push. It connects (pooled) and says HELLO, which returns the receiver's region addresses
 * as registered with its engine; opens the receiver's segment (cached); asks admission (BEGIN); then submits the
 * plan's spans as WRITE requests, {@code batch-requests} per batch, keeping up to {@code max-inflight-requests} in
 * flight, and polls their status in order with a pause that doubles from {@code poll-min} to {@code poll-max} while
 * nothing completes (so an idle wait parks the thread instead of spinning). Cancellation, the order's deadline, a
 * STOP from the receiver (a fence) or a failed request stop the submitting; the push then waits until every
 * submitted request has finished, so its result, whatever it is, means no byte of it can still land. Success is
 * END answered by ACK.
 *
 * <p>Request states map to {@link TransferError}s in {@link TaskStatus#error()}, engine result codes in
 * {@link ResultCode#kind()}.
 */
public final class MooncakeTransport implements KvTransport {

    public static final String NAME = "mooncake";
    private static final Logger log = LoggerFactory.getLogger(MooncakeTransport.class);

    private final MooncakeConfig config;
    private final TransferEngine engine;
    private final String senderId;
    private final PushGate gate;
    private final AdmissionServer admission;
    private final Map<Long, TransferEngine.Range> registered = new HashMap<>();
    private final List<TransferEngine.Range> remoteRanges = new ArrayList<>();
    /** Admission (control) connections per peer; at most 8 idle per peer. */
    private final PeerConnectionPool<AdmissionClient> pool = new PeerConnectionPool<>(8);
    private final Map<String, Integer> segments = new ConcurrentHashMap<>();
    private final Set<String> staleEngines = ConcurrentHashMap.newKeySet();
    private final Set<MooncakeTransfer> running = ConcurrentHashMap.newKeySet();
    private final AtomicInteger pushIds = new AtomicInteger();
    private final ExecutorService pushes;
    private volatile boolean closed;

    private MooncakeTransport(MooncakeConfig config, TransferEngine engine, String senderId, PushGate gate) {
        this.config = config;
        this.engine = engine;
        this.senderId = senderId;
        this.gate = gate;
        this.pushes = Executors.newThreadPerTaskExecutor(Thread.ofPlatform().daemon().name("kv-mooncake-tx-", 0).factory());
        if (gate != null) {
            KvPool pool = gate.pool();
            requireHost(pool, "the receiving pool");
            for (int r = 0; r < pool.geometry().regionCount(); r++) {
                remoteRanges.add(new TransferEngine.Range(pool.baseAddress(r), pool.geometry().regionBytes()));
            }
            engine.registerMemory(remoteRanges, true);
            remoteRanges.forEach(r -> registered.put(r.address(), r));
            this.admission = new AdmissionServer(config.host(), config.controlPort(), gate, this::hello, config.ioTimeout());
        } else {
            this.admission = null;
        }
    }

    /**
     * Starts the transport on an engine it then owns (closes with it).
     *
     * @param gate the local engine's gate: its pool is registered remote-accessible and served; null for send-only
     */
    public static MooncakeTransport start(MooncakeConfig config, TransferEngine engine, String senderId, PushGate gate) {
        try {
            return new MooncakeTransport(config, engine, senderId, gate);
        } catch (RuntimeException e) {
            engine.close();
            throw e;
        }
    }

    private AdmissionWire.HelloOk hello() {
        List<long[]> regions = new ArrayList<>();
        for (TransferEngine.Range r : remoteRanges) {
            regions.add(new long[] {r.address(), r.length()});
        }
        return new AdmissionWire.HelloOk(gate.engineId(), gate.instanceEpoch(), engine.segmentName(), engine.protocol(), regions);
    }

    @Override
    public String name() {
        return NAME;
    }

    public MooncakeConfig config() {
        return config;
    }

    /** The engine this transport drives. */
    public TransferEngine engine() {
        return engine;
    }

    /** The admission listener's address, or null for a send-only transport. */
    public InetSocketAddress admissionAddress() {
        return admission == null ? null : admission.localAddress();
    }

    @Override
    public Optional<TransportEndpoint> endpoint() {
        if (admission == null) {
            return Optional.empty();
        }
        String host = config.host().contains(":") ? "[" + config.host() + "]" : config.host();
        return Optional.of(TransportEndpoint.newBuilder().setTransport(NAME).setAddress(engine.segmentName())
                .setAttributes(Map.of("control", host + ":" + admission.localAddress().getPort(), "protocol", engine.protocol(), "metadata",
                        config.metadata(), "wire-version", Integer.toString(AdmissionWire.VERSION),
                        PushRequest.FIRST_TOKEN_ATTRIBUTE, "true"))
                .build());
    }

    /** Same transport, same protocol and the same metadata service, and an admission listener to talk to. */
    @Override
    public boolean canReach(PeerEndpoint peer) {
        Map<String, String> a = peer.attributes();
        return NAME.equals(peer.transport()) && a.containsKey("control") && engine.protocol().equals(a.getOrDefault("protocol", engine.protocol()))
                && config.metadata().equals(a.getOrDefault("metadata", config.metadata()));
    }

    // ---- sending ------------------------------------------------------------------------------------------------

    @Override
    public Transfer push(PushRequest push, KvPool source, TransferPlan plan, PeerEndpoint peer) {
        PushRequest request = push.forPeer(peer);
        MooncakeTransfer t = new MooncakeTransfer(request, source, plan, peer);
        if (closed) {
            t.fail(new TransferException(TransferError.INTERNAL, "mooncake transport is closed"));
        } else if (!canReach(peer)) {
            t.fail(new TransferException(TransferError.NO_TRANSPORT, "mooncake (" + engine.protocol() + ", " + config.metadata()
                    + ") cannot push to " + peer + " " + peer.attributes()));
        } else {
            running.add(t);
            try {
                pushes.execute(t::run);
            } catch (RuntimeException e) {
                running.remove(t);
                t.fail(new TransferException(TransferError.INTERNAL, "mooncake transport is closed"));
            }
        }
        return t;
    }

    private static void requireHost(KvPool pool, String what) {
        if (!"host".equals(pool.location())) {
            throw new TransferException(TransferError.UNSUPPORTED, what + " is " + pool.location() + " memory; this mooncake transport registers"
                    + " host memory only (device memory needs a library built with USE_CUDA and GPUDirect RDMA, see docs/mooncake.md)");
        }
    }

    /** Registers the source pool's regions with the engine the first time they are pushed from. */
    private synchronized void ensureRegistered(KvPool pool) {
        requireHost(pool, "the source pool");
        List<TransferEngine.Range> missing = new ArrayList<>();
        for (int r = 0; r < pool.geometry().regionCount(); r++) {
            TransferEngine.Range range = new TransferEngine.Range(pool.baseAddress(r), pool.geometry().regionBytes());
            TransferEngine.Range known = registered.get(range.address());
            if (known == null) {
                missing.add(range);
            } else if (known.length() < range.length()) {
                throw new TransferException(TransferError.INTERNAL, "region " + r + " of the source pool overlaps memory registered before with"
                        + " another length (" + known.length() + " vs " + range.length() + " bytes)");
            }
        }
        if (!missing.isEmpty()) {
            engine.registerMemory(missing, false);
            missing.forEach(m -> registered.put(m.address(), m));
        }
    }

    private PeerConnectionPool.Lease<AdmissionClient> acquire(PeerEndpoint peer) {
        return pool.acquire(peer, (p, gen) -> AdmissionClient.open(p, p.attributes().get("control"), gen, senderId, config.connectTimeout(),
                config.ioTimeout()));
    }

    private void release(AdmissionClient c) {
        pool.release(c);
    }

    /** The receiver's segment id in this engine; opened once per engine incarnation. */
    private int segment(PeerEndpoint peer, String name) {
        String k = peer.engineId() + "|" + name;
        Integer id = segments.get(k);
        if (id != null) {
            return id;
        }
        synchronized (segments) {
            id = segments.get(k);
            if (id == null) {
                boolean fresh = staleEngines.remove(peer.engineId());
                try {
                    id = engine.openSegment(name, fresh);
                } catch (MooncakeException e) {
                    throw new TransferException(e.kind() == TransferError.INTERNAL ? TransferError.PEER_UNREACHABLE : e.kind(), "cannot open the"
                            + " Mooncake segment of " + peer + ": " + e.getMessage(), e);
                }
                segments.put(k, id);
            }
            return id;
        }
    }

    @Override
    public void forgetPeer(String engineId) {
        pool.forget(engineId);
        segments.keySet().removeIf(k -> k.startsWith(engineId + "|"));
        staleEngines.add(engineId);
        log.atInfo().addKeyValue("engineId", engineId).log("dropped cached mooncake admission connections and segment of the engine's worker");
    }

    /** One push: runs on its own thread from start to the last finished request. */
    private final class MooncakeTransfer implements Transfer {
        private final PushRequest request;
        private final KvPool source;
        private final TransferPlan plan;
        private final PeerEndpoint peer;
        private final CompletableFuture<TransferResult> result = new CompletableFuture<>();
        private volatile String cancelled;

        MooncakeTransfer(PushRequest request, KvPool source, TransferPlan plan, PeerEndpoint peer) {
            this.request = request;
            this.source = source;
            this.plan = plan;
            this.peer = peer;
        }

        @Override
        public CompletableFuture<TransferResult> result() {
            return result;
        }

        @Override
        public void cancel(String reason) {
            if (cancelled == null) {
                cancelled = reason;
            }
        }

        void fail(TransferException e) {
            result.completeExceptionally(e);
        }

        void run() {
            long t0 = System.nanoTime();
            AdmissionClient c = null;
            try {
                ensureRegistered(source);
                int push = pushIds.incrementAndGet();
                int segment;
                for (int tries = 0; ; tries++) {
                    PeerConnectionPool.Lease<AdmissionClient> l = acquire(peer);
                    c = l.connection();
                    checkPeer(c.hello());
                    segment = segment(peer, c.hello().segment());
                    try {
                        c.begin(push, request, plan.source(), plan.totalBytes());
                        break;
                    } catch (IOException e) {
                        c.close();
                        c = null;
                        if (!l.reused() || tries > 0 || e instanceof FrameException) {
                            throw e;
                        }
                        // A pooled connection to a peer that restarted: dead on first use. One fresh try.
                    }
                }
                AdmissionClient admitted = c;
                c = null; // from here on write() owns the connection: it releases or closes it
                long bytes = write(admitted, push, segment);
                result.complete(new TransferResult(bytes, System.nanoTime() - t0, NAME, 1));
            } catch (TransferException e) {
                if (c != null && e.getMessage().startsWith("refused by")) {
                    release(c); // refused at BEGIN: the connection is clean
                    c = null;
                }
                fail(e);
            } catch (IOException e) {
                fail(new TransferException(e instanceof FrameException ? TransferError.PROTOCOL : TransferError.CONNECTION_LOST, "admission"
                        + " connection to " + peer + ": " + e.getMessage(), e));
            } catch (MooncakeException e) {
                fail(new TransferException(e.kind(), e.getMessage(), e));
            } catch (RuntimeException e) {
                log.atError().setCause(e).addKeyValue("orderId", request.orderId()).log("mooncake push failed");
                fail(new TransferException(TransferError.INTERNAL, "mooncake push failed: " + e, e));
            } finally {
                if (c != null) {
                    c.close();
                }
                running.remove(this);
            }
        }

        private void checkPeer(AdmissionWire.HelloOk h) {
            if (!h.protocol().equals(engine.protocol())) {
                throw new TransferException(TransferError.NO_TRANSPORT, peer + " moves bytes with Mooncake's " + h.protocol() + " transport, this"
                        + " worker with " + engine.protocol());
            }
            KvGeometry d = plan.dest();
            if (h.regions().size() != d.regionCount()) {
                throw new TransferException(TransferError.LAYOUT_MISMATCH, peer + " registered " + h.regions().size() + " regions, its layout has "
                        + d.regionCount());
            }
        }

        /** Issues every write, waits for all of them, ends the push; releases or closes {@code c}. Returns the bytes acknowledged. */
        private long write(AdmissionClient c, int push, int segment) {
            AdmissionWire.HelloOk h = c.hello();
            int regions = plan.source().regionCount();
            long[] src = new long[regions];
            for (int r = 0; r < regions; r++) {
                src[r] = source.baseAddress(r);
            }
            long[] dst = new long[h.regions().size()];
            long[] len = new long[dst.length];
            for (int r = 0; r < dst.length; r++) {
                dst[r] = h.base(r);
                len[r] = h.length(r);
            }
            Pump p;
            try (Arena arena = Arena.ofConfined()) {
                p = new Pump(arena, c, push, new WriteBatcher(plan, src, dst, len, segment, config.maxRequestBytes()));
                p.run();
            } catch (TransferException e) {
                // Nothing was submitted: the plan does not fit the receiver's regions.
                abortQuietly(c, push, e.reason());
                throw e;
            }
            if (p.leaked > 0) {
                // Writes may still land: do not tell the receiver the push is over. Closing the connection ends the
                // push there; the log says what happened.
                log.atError().addKeyValue("orderId", request.orderId()).addKeyValue("peer", peer.toString())
                        .log(p.leaked + " Mooncake writes still unfinished " + config.drainTimeout().toMillis() + " ms after the push stopped");
                c.close();
                throw p.failure;
            }
            try {
                if (p.failure == null) {
                    long ack = c.end(push, p.completed);
                    if (ack != plan.totalBytes()) {
                        throw new TransferException(TransferError.PROTOCOL, peer + " acknowledged " + ack + " of " + plan.totalBytes() + " bytes");
                    }
                    release(c);
                    return ack;
                }
                if (p.stoppedByReceiver) {
                    // The receiver fenced the push: END gets its reason back as ERROR.
                    c.end(push, p.completed);
                    throw new TransferException(TransferError.PROTOCOL, peer + " acknowledged a push it had stopped");
                }
                if (p.connectionBroken) {
                    c.close();
                    throw p.failure;
                }
                c.abort(push, p.failure.reason());
                release(c);
                throw p.failure;
            } catch (TransferException e) {
                if (c.isOpen() && e.getMessage().startsWith("refused by")) {
                    release(c); // an ERROR reply leaves the connection clean
                } else if (e != p.failure) {
                    c.close();
                }
                throw e;
            } catch (IOException e) {
                c.close();
                if (p.failure != null) {
                    throw p.failure;
                }
                throw new TransferException(TransferError.CONNECTION_LOST, "admission connection to " + peer + " lost at the end of the push: "
                        + e.getMessage(), e);
            }
        }

        private void abortQuietly(AdmissionClient c, int push, String why) {
            try {
                c.abort(push, why);
                release(c);
            } catch (IOException | TransferException e) {
                c.close();
            }
        }

        /** The submit/poll loop of one push. */
        private final class Pump {
            private final AdmissionClient client;
            private final int push;
            private final WriteBatcher batcher;
            private final ArrayDeque<Batch> inflight = new ArrayDeque<>();
            private final ArrayDeque<RequestArray> spare = new ArrayDeque<>();
            private final MemorySegment status;
            private final Arena arena;
            private int inflightRequests;
            long completed;
            int leaked;
            TransferException failure;
            boolean stoppedByReceiver;
            boolean connectionBroken;

            Pump(Arena arena, AdmissionClient client, int push, WriteBatcher batcher) {
                this.arena = arena;
                this.client = client;
                this.push = push;
                this.batcher = batcher;
                this.status = arena.allocate(MooncakeEngine.TRANSFER_STATUS);
            }

            void fail(TransferException e) {
                if (failure == null) {
                    failure = e;
                }
            }

            void run() {
                long pollMin = config.pollMin().toNanos();
                long pollMax = config.pollMax().toNanos();
                long pause = pollMin;
                long drainDeadline = 0;
                while (true) {
                    boolean progress = false;
                    if (failure == null) {
                        checkStop();
                    }
                    while (failure == null && batcher.hasMore()
                            && (inflight.isEmpty() || inflightRequests + config.batchRequests() <= config.maxInflightRequests())) {
                        submitNext();
                        progress = true;
                    }
                    progress |= poll();
                    if (inflight.isEmpty() && (failure != null || !batcher.hasMore())) {
                        return;
                    }
                    if (failure != null) {
                        long now = System.nanoTime();
                        if (drainDeadline == 0) {
                            drainDeadline = now + config.drainTimeout().toNanos();
                        } else if (now > drainDeadline) {
                            leaked = inflight.stream().mapToInt(b -> b.count - b.next).sum();
                            return;
                        }
                    }
                    if (progress) {
                        pause = pollMin;
                    } else {
                        LockSupport.parkNanos(pause);
                        pause = Math.min(pause * 2, pollMax);
                    }
                }
            }

            private void checkStop() {
                String why = cancelled;
                if (why != null) {
                    fail(new TransferException(TransferError.ABORTED, "aborted: " + why));
                    return;
                }
                if (closed) {
                    fail(new TransferException(TransferError.INTERNAL, "mooncake transport closed during the push"));
                    return;
                }
                if (request.deadlineMs() > 0 && System.currentTimeMillis() > request.deadlineMs()) {
                    fail(new TransferException(TransferError.TIMEOUT, "the order's deadline passed"));
                    return;
                }
                try {
                    TransferException stop = client.stopped(push);
                    if (stop != null) {
                        stoppedByReceiver = true;
                        fail(stop);
                    }
                } catch (IOException e) {
                    connectionBroken = true;
                    fail(new TransferException(TransferError.CONNECTION_LOST, "admission connection to " + peer + " lost during the push: "
                            + e.getMessage(), e));
                }
            }

            private void submitNext() {
                RequestArray a = spare.isEmpty() ? new RequestArray(arena, config.batchRequests()) : spare.pop();
                int n;
                long batch;
                try {
                    n = batcher.fill(a, config.batchRequests());
                    batch = engine.allocateBatch(n);
                } catch (TransferException e) {
                    spare.push(a);
                    fail(e);
                    return;
                } catch (MooncakeException e) {
                    spare.push(a);
                    fail(new TransferException(e.kind(), e.getMessage(), e));
                    return;
                }
                int rc = engine.submit(batch, a.segment(), n);
                Batch b = new Batch(batch, n, a, rc != 0);
                inflight.add(b);
                inflightRequests += n;
                if (rc != 0) {
                    fail(new TransferException(ResultCode.of(rc).kind(), "submitTransfer of " + n + " writes to " + peer + " failed: "
                            + ResultCode.describe(rc)));
                }
            }

            /** Polls every batch in order; frees the finished ones. True if anything finished. */
            private boolean poll() {
                boolean progress = false;
                for (Iterator<Batch> it = inflight.iterator(); it.hasNext(); ) {
                    Batch b = it.next();
                    while (b.next < b.count) {
                        int rc = engine.status(b.id, b.next, status);
                        if (rc != 0) {
                            if (!b.submitFailed) {
                                fail(new TransferException(TransferError.INTERNAL, "getTransferStatus of write " + b.next + " failed: "
                                        + ResultCode.describe(rc)));
                                b.leak = true;
                            }
                            // A submit that failed part-way: the engine knows only the tasks it created.
                            b.count = b.next;
                            break;
                        }
                        TaskStatus s = RequestArray.statusOf(status);
                        if (s == TaskStatus.COMPLETED) {
                            completed += b.requests.length(b.next);
                            b.next++;
                            progress = true;
                        } else if (s.finished()) {
                            fail(new TransferException(s.error(), "Mooncake reports " + s + " for a write of " + b.requests.length(b.next)
                                    + " bytes to 0x" + Long.toHexString(b.requests.targetOffset(b.next)) + " in " + peer
                                    + " (the engines' logs on stderr say why)"));
                            b.next++;
                            progress = true;
                        } else {
                            if (s == TaskStatus.TIMEOUT || s == TaskStatus.UNKNOWN) {
                                fail(new TransferException(s.error(), "Mooncake reports " + s + " for a write to " + peer));
                            }
                            break;
                        }
                    }
                    if (b.next >= b.count) {
                        if (!b.leak) {
                            int rc = engine.freeBatch(b.id);
                            if (rc != 0) {
                                log.atWarn().addKeyValue("orderId", request.orderId()).log("freeBatchID failed: " + ResultCode.describe(rc));
                            }
                        }
                        inflightRequests -= b.submitted;
                        spare.push(b.requests);
                        it.remove();
                        progress = true;
                    }
                }
                return progress;
            }
        }
    }

    /** A submitted batch and how far polling got. */
    private static final class Batch {
        final long id;
        final int submitted;
        final RequestArray requests;
        final boolean submitFailed;
        int count;
        int next;
        boolean leak;

        Batch(long id, int count, RequestArray requests, boolean submitFailed) {
            this.id = id;
            this.submitted = count;
            this.count = count;
            this.requests = requests;
            this.submitFailed = submitFailed;
        }
    }

    // ---- lifecycle ----------------------------------------------------------------------------------------------

    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        if (admission != null) {
            admission.close();
        }
        running.forEach(t -> t.cancel("mooncake transport closing"));
        pushes.shutdown();
        try {
            // Pushes drain their submitted writes before they end; the engine must outlive them.
            if (!pushes.awaitTermination(config.drainTimeout().toSeconds() + 5, TimeUnit.SECONDS)) {
                log.warn("mooncake transport: pushes still running after close");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        pool.close();
        try {
            synchronized (this) {
                engine.unregisterMemory(List.copyOf(registered.values()));
                registered.clear();
            }
        } catch (RuntimeException e) {
            log.atWarn().log("unregistering memory from the Mooncake engine failed: " + e.getMessage());
        }
        engine.close();
    }

    @Override
    public String toString() {
        return "MooncakeTransport[" + engine + (admission == null ? ", send-only" : ", admission " + admission.localAddress()) + "]";
    }

    /** The segment name and addresses a receiver registered, for tests and tools. */
    public List<TransferEngine.Range> registeredRanges() {
        synchronized (this) {
            return List.copyOf(registered.values());
        }
    }
}
