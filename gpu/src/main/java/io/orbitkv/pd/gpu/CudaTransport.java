package io.orbitkv.pd.gpu;

import io.orbitkv.pd.events.TransportEndpoint;
import io.orbitkv.pd.gpu.cuda.CudaDevice;
import io.orbitkv.pd.gpu.cuda.CudaDriver;
import io.orbitkv.pd.gpu.cuda.CudaException;
import io.orbitkv.pd.kv.BlockRuns;
import io.orbitkv.pd.kv.KvPool;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.transport.AbstractTransfer;
import io.orbitkv.pd.transport.KvTransport;
import io.orbitkv.pd.transport.PeerEndpoint;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.ReceiveSession;
import io.orbitkv.pd.transport.SourceReadiness;
import io.orbitkv.pd.transport.Transfer;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.transport.TransferResult;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The {@code cuda} transport: same-node handoffs between engines whose pools live in GPU memory. The node's worker
 * process maps every engine's pool through CUDA IPC ({@link ImportedKvPool}); a push copies the source runs into
 * the destination runs with one kernel launch (or one batched copy) per order, on the GPU, never through the host.
 *
 * <p>Receiving: a transport with a gate serves that engine's (device) pool; it joins the process's
 * {@link CudaFabric} under the engine id and announces endpoint {@code cuda://<node id>}.
 *
 * <p>Sending, per order, on the transport's copy thread (which has the device context current):
 * <ol>
 *   <li>the destination's {@link PushGate} admits the push: instance epoch, token, aborted attempts, fenced
 *       requests, the lease epoch, runs inside the pool, page shapes: all before anything is launched;</li>
 *   <li>the plan becomes a {@link RunTable} of absolute device addresses, each span checked against both regions and
 *       the order's authorized destination pages;</li>
 *   <li>inside one gate frame ({@link ReceiveSession#beginFrame()}, which refuses a push fenced since admission), the
 *       {@link CopyEngine} runs the table and waits for the event recorded after it; the frame ends only then, so a
 *       fence ({@code releaseLease}, {@code abortAttempt}, ...) returns only after the copy's bytes landed;</li>
 *   <li>the transfer completes after that event, never before.</li>
 * </ol>
 *
 * <p>Layer by layer ({@link #push(PushRequest, KvPool, TransferPlan, PeerEndpoint, SourceReadiness)}): the same steps per
 * group of layers the engine reports computed, each group its own frame and launch, the last layer once the prefill is
 * complete; the waiting happens on the push's own thread, never on the copy thread.
 *
 * <p>A kernel cannot be stopped once launched: {@link Transfer#cancel} before the launch aborts the push; during the
 * copy (well under a millisecond for a 256 MiB order) it lets the copy finish and then fails the transfer as
 * {@link TransferError#ABORTED}. A CUDA error fails the transfer as {@link TransferError#INTERNAL}; a faulted kernel
 * leaves the context unusable (CUDA's sticky errors) and the worker must be restarted.
 */
public final class CudaTransport implements KvTransport {

    public static final String NAME = "cuda";
    /** Push marks inside apply: the run table staged (chunked, written, upload enqueued), the copies launched. */
    public static final String STAGED = "stg";
    /** Copies the copy engine runs at start so its host path is compiled before the first push (start-up time not measured). */
    private static final int WARM_UP_ROUNDS = 5000;
    /** Pushes the host path (admission, run table, claims, completion) runs at start, for the same reason: {@link HostPathWarmUp}. */
    private static final int HOST_WARM_UP_ROUNDS = 12_000;
    /** How long a push layer by layer waits for the engine's next report before checking its reasons to stop. */
    private static final long WAIT_SLICE_MS = 20;
    public static final String LAUNCHED = "lnch";
    private static final Logger log = LoggerFactory.getLogger(CudaTransport.class);

    private final CudaConfig config;
    private final CudaFabric fabric;
    private final String senderId;
    private final PushGate gate;
    private final ExecutorService copier;
    private final CopyEngine engine;
    private final Map<String, String> attributes;
    private volatile boolean closed;

    private CudaTransport(CudaConfig config, CudaFabric fabric, String senderId, PushGate gate, Supplier<CopyEngine> engines,
                          Map<String, String> extraAttributes) {
        this.config = Objects.requireNonNull(config, "config");
        this.fabric = Objects.requireNonNull(fabric, "fabric");
        this.senderId = senderId == null ? "" : senderId;
        this.gate = gate;
        if (gate != null && !isDevicePool(gate.pool())) {
            throw new IllegalArgumentException("transfer.cuda: the cuda transport serves device pools; engine " + gate.engineId() + "'s pool is "
                    + gate.pool().location() + " (map the engine's pool with ImportedKvPool)");
        }
        String owner = gate == null ? "send" : gate.engineId();
        this.copier = Executors.newSingleThreadExecutor(Thread.ofPlatform().daemon().name("cuda-copy-" + owner).factory());
        try {
            this.engine = copier.submit(engines::get).get();
        } catch (ExecutionException e) {
            copier.shutdownNow();
            Throwable c = e.getCause();
            throw c instanceof RuntimeException r ? r : new IllegalStateException("cuda transport: cannot start the copy engine: " + c, c);
        } catch (InterruptedException e) {
            copier.shutdownNow();
            Thread.currentThread().interrupt();
            throw new IllegalStateException("cuda transport: interrupted while starting", e);
        }
        Map<String, String> attrs = new LinkedHashMap<>();
        attrs.put("device", "cuda:" + config.device());
        attrs.put("copy", engine.describe());
        attrs.putAll(extraAttributes);
        this.attributes = java.util.Collections.unmodifiableMap(attrs);
        if (gate != null) {
            fabric.bind(gate);
        }
    }

    /**
     * A transport whose copies run on {@code engines.get()} (called once, on the copy thread). Tests pass an engine
     * that needs no GPU; {@link #open} passes the real one.
     *
     * @param gate the served engine's gate (its pool must be device memory), or null for a send-only transport
     */
    public static CudaTransport start(CudaConfig config, CudaFabric fabric, String senderId, PushGate gate, Supplier<CopyEngine> engines) {
        return new CudaTransport(config, fabric, senderId, gate, engines, Map.of());
    }

    /**
     * The transport on a real GPU: opens device {@link CudaConfig#device()}, loads the kernels and makes the copy
     * engine, all on the copy thread; closing the transport releases them.
     */
    public static CudaTransport open(CudaConfig config, CudaFabric fabric, String senderId, PushGate gate, CudaDriver driver) {
        Map<String, String> extra = new LinkedHashMap<>();
        Supplier<CopyEngine> engines = () -> {
            CudaDevice device = CudaDevice.open(driver, config.device());
            CudaKernels kernels = null;
            try {
                kernels = CudaKernels.load(device);
                CudaCopyEngine e = CudaCopyEngine.create(kernels, config.mode(), config.kernel(), config.grid(), config.chunkBytes(), config.maxBatch());
                e.warmUp(WARM_UP_ROUNDS);
                HostPathWarmUp.run(HOST_WARM_UP_ROUNDS);
                extra.put("gpu", device.name());
                extra.put("uuid", driver.deviceUuid(device.handle()));
                return new OwningEngine(e, kernels, device);
            } catch (RuntimeException e) {
                if (kernels != null) {
                    kernels.close();
                }
                device.close();
                throw e;
            }
        };
        // the supplier runs (on the copy thread) before the constructor reads the extra attributes
        return new CudaTransport(config, fabric, senderId, gate, engines, extra);
    }

    static boolean isDevicePool(KvPool pool) {
        return pool.location() != null && pool.location().startsWith("cuda:");
    }

    @Override
    public String name() {
        return NAME;
    }

    public CudaConfig config() {
        return config;
    }

    @Override
    public Optional<TransportEndpoint> endpoint() {
        return gate == null ? Optional.empty()
                : Optional.of(TransportEndpoint.newBuilder().setTransport(NAME).setAddress(config.nodeId()).setAttributes(attributes).build());
    }

    /** Only engines served by this very process on this node: their pools are mapped here. */
    @Override
    public boolean canReach(PeerEndpoint peer) {
        return NAME.equals(peer.transport()) && config.nodeId().equals(peer.address()) && fabric.lookup(peer.engineId()).isPresent();
    }

    @Override
    public Transfer push(PushRequest request, KvPool source, TransferPlan plan, PeerEndpoint peer) {
        CudaTransfer t = new CudaTransfer(request);
        try {
            PushGate target = target(source, peer);
            copier.execute(() -> t.run(target, source, plan));
        } catch (TransferException e) {
            t.fail(e);
        } catch (RejectedExecutionException e) {
            t.fail(new TransferException(TransferError.INTERNAL, "cuda transport is closed"));
        }
        return t;
    }

    /**
     * Layer by layer (docs/worker.md, "Layer by layer"): a thread of the push's own waits for the engine's reports and hands
     * each group of layers whose pages are all computed to the copy thread as one copy (its own frame, one launch); the
     * last layer goes once the prefill is complete, in a session of its own carrying the first token, so the landing it
     * completes hands the KV to the decode engine. The copy thread never waits for a prefill: other pushes go on meanwhile.
     * On a GPU a report means the engine's CUDA event after those layers completed (orbitkv_pd.real_model), so a copy never
     * reads pages still being written. A span is copied once every page of it is computed: with a chunked prefill the
     * layers' spans wait for the last chunk.
     */
    @Override
    public Transfer push(PushRequest request, KvPool source, TransferPlan plan, PeerEndpoint peer, SourceReadiness ready) {
        if (ready == null) {
            return push(request, source, plan, peer);
        }
        CudaTransfer t = new CudaTransfer(request);
        try {
            PushGate target = target(source, peer);
            Thread.ofVirtual().name("cuda-layers-" + request.orderId()).start(() -> t.stream(target, source, plan, ready));
        } catch (TransferException e) {
            t.fail(e);
        }
        return t;
    }

    @Override
    public boolean streams() {
        return true;
    }

    /** The destination's gate, after the checks every push passes before anything runs. */
    private PushGate target(KvPool source, PeerEndpoint peer) {
        if (closed) {
            throw new TransferException(TransferError.INTERNAL, "cuda transport is closed");
        }
        if (!NAME.equals(peer.transport()) || !config.nodeId().equals(peer.address())) {
            throw new TransferException(TransferError.NO_TRANSPORT, "cuda reaches engines on node " + config.nodeId() + " only, not " + peer);
        }
        PushGate target = fabric.lookup(peer.engineId()).orElseThrow(() -> new TransferException(TransferError.PEER_UNREACHABLE,
                "engine " + peer.engineId() + " is not served by this worker process (a cuda handoff runs in the process that mapped both pools)"));
        if (!isDevicePool(source)) {
            throw new TransferException(TransferError.UNSUPPORTED, "cuda needs a device source pool, got " + source.location());
        }
        return target;
    }

    @Override
    public void forgetPeer(String engineId) {
        // nothing cached per peer: the fabric holds the gates, and a restarted engine's gate is rebound by its worker
    }

    /** Stops receiving, lets queued pushes fail, waits for a copy in progress, then frees the engine. Idempotent. */
    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        if (gate != null) {
            fabric.unbind(gate);
        }
        try {
            copier.submit(engine::close).get(60, TimeUnit.SECONDS);
        } catch (Exception e) {
            log.atWarn().log("cuda transport: closing the copy engine failed: " + e);
        } finally {
            copier.shutdown();
        }
    }

    private final class CudaTransfer extends AbstractTransfer {
        private final PushRequest request;

        CudaTransfer(PushRequest request) {
            this.request = request;
        }

        /**
         * The push on the copy thread. Its marks ({@link TransferResult}): {@code conn} when this thread took it,
         * {@code adm} when the receiver's gate admitted it, {@code w1} when the run table was built (the host's work
         * done), {@code ack} when the copy's event completed (every byte in place); so the anatomy's hops read
         * setup = order slot → copy thread, admission = the gate, wire = the run table, apply = upload, kernel and wait.
         */
        void run(PushGate target, KvPool source, TransferPlan plan) {
            long t0 = System.nanoTime();
            long tookUs = Marks.nowMicros();
            try {
                if (closed) {
                    throw new TransferException(TransferError.INTERNAL, "cuda transport is closed");
                }
                checkCancelled("before admission");
                if (request.deadlinePassed()) {
                    throw new TransferException(TransferError.TIMEOUT, request.describe() + ": deadline passed before the copy started");
                }
                long bytes;
                long admittedUs;
                long builtUs;
                long ackedUs;
                long landedNanos;
                long[] steps;
                try (ReceiveSession s = target.open(NAME, request, plan.source())) {
                    admittedUs = Marks.nowMicros();
                    RunTable table = RunTable.build(plan, source, target.pool(), BlockRuns.intervals(request.destRuns()));
                    builtUs = Marks.nowMicros();
                    long written = copyFramed(s, plan, 0, plan.spans(), table);
                    // every byte in place: marked before the session closes, which may hand the KV to the decode engine
                    ackedUs = Marks.nowMicros();
                    landedNanos = System.nanoTime();
                    steps = engine.lastSteps();
                    bytes = written;
                    TransferException twice = s.complete();
                    if (twice != null) {
                        throw twice;
                    }
                }
                checkCancelled("while the copy ran (its bytes landed)");
                Marks m = Marks.empty().at(TransferResult.CONNECTED, tookUs).at(TransferResult.ADMITTED, admittedUs)
                        .at(TransferResult.WRITTEN, builtUs);
                if (steps[0] > 0 && steps[1] > 0) {
                    m.at(STAGED, steps[0]).at(LAUNCHED, steps[1]);
                }
                // the push's duration ends with its bytes in place, not after the session's close (which may hand the KV to
                // the decode engine on this thread: that is the landed_to_engine hop)
                succeed(new TransferResult(bytes, landedNanos - t0, NAME, 1, m.at(TransferResult.ACKED, ackedUs)));
            } catch (CudaException e) {
                log.atError().addKeyValue("orderId", request.orderId()).addKeyValue("sender", senderId).log("cuda copy failed: " + e.getMessage());
                fail(new TransferException(TransferError.INTERNAL, request.describe() + ": " + e.getMessage(), e));
            } catch (RuntimeException e) {
                failUnexpected(request.describe() + ": cuda push", e);
            }
        }

        /**
         * On the copy thread: spans {@code [from, to)} of the plan as {@code table}, inside one gate frame (a fence waits
         * for it); each piece checked and counted before the device writes it. Returns the bytes written.
         */
        private long copyFramed(ReceiveSession s, TransferPlan plan, int from, int to, RunTable table) {
            if (closed) { // on the copy thread: a copy queued behind the engine's close never reaches the closed engine
                throw new TransferException(TransferError.INTERNAL, "cuda transport is closed");
            }
            checkCancelled("before launch");
            s.beginFrame();
            long written = 0;
            try {
                for (int i = from; i < to; i++) {
                    s.claim(plan.spanRegion(i), plan.spanDestOffset(i), plan.spanLength(i));
                }
                engine.copy(table);
                written = table.bytes();
            } finally {
                s.endFrame(written);
            }
            return written;
        }

        /**
         * The push layer by layer, on its own thread: groups of computed layers copied as they come (one session), then the
         * last layer with the first token (another). Its marks are the last part's — the part the decode engine waits for
         * once the prefill is complete: {@code conn} when the prefill's completion was seen, {@code adm}, {@code w1},
         * {@code ack} as in {@link #run}.
         */
        void stream(PushGate target, KvPool source, TransferPlan plan, SourceReadiness ready) {
            long t0 = System.nanoTime();
            try {
                int n = plan.spans();
                int tailRegion = plan.source().region(plan.source().numLayers() - 1, 0);
                int tail = 0;
                while (tail < n && plan.spanRegion(tail) < tailRegion) {
                    tail++;
                }
                BlockRuns.Intervals authorized = BlockRuns.intervals(request.destRuns());
                long bytes = 0;
                int copies = 0;
                int next = 0;
                ReceiveSession body = null;
                try {
                    while (next < tail && !ready.complete()) {
                        long seen = ready.version();
                        int k = next;
                        while (k < tail && ready.readyBytes(plan.spanRegion(k), plan.spanSourceOffset(k), plan.spanLength(k)) == plan.spanLength(k)) {
                            k++;
                        }
                        stopIfMust(ready);
                        if (k == next) {
                            ready.awaitChange(seen, WAIT_SLICE_MS);
                            continue;
                        }
                        if (body == null) {
                            body = target.open(NAME, request, plan.source()); // admitted once the first piece is computed
                        }
                        ReceiveSession s = body;
                        int from = next;
                        int to = k;
                        bytes += onCopier(() -> copyFramed(s, plan, from, to, RunTable.build(plan, source, target.pool(), authorized, from, to)));
                        copies++;
                        next = k;
                    }
                    if (body != null) {
                        TransferException twice = body.complete();
                        if (twice != null) {
                            throw twice;
                        }
                    }
                } finally {
                    if (body != null) {
                        body.close();
                    }
                }
                while (!ready.awaitComplete(WAIT_SLICE_MS)) {
                    stopIfMust(ready);
                }
                stopIfMust(ready);
                long tookUs = Marks.nowMicros();
                int from = next;
                long[] last;
                long ackedUs;
                long landedNanos;
                try (ReceiveSession s = target.open(NAME, request.withFirstToken(ready.firstToken()), plan.source())) {
                    long admittedUs = Marks.nowMicros();
                    last = onCopier(() -> {
                        RunTable table = RunTable.build(plan, source, target.pool(), authorized, from, n);
                        long builtUs = Marks.nowMicros();
                        long written = copyFramed(s, plan, from, n, table);
                        long[] steps = engine.lastSteps();
                        return new long[] {written, admittedUs, builtUs, steps[0], steps[1]};
                    });
                    ackedUs = Marks.nowMicros();
                    landedNanos = System.nanoTime();
                    TransferException twice = s.complete();
                    if (twice != null) {
                        throw twice;
                    }
                }
                // completed only once the last session closed: its close is the landing that hands the decode engine its KV
                bytes += last[0];
                copies++;
                checkCancelled("while the copy ran (its bytes landed)");
                Marks m = Marks.empty().at(TransferResult.CONNECTED, tookUs).at(TransferResult.ADMITTED, last[1]).at(TransferResult.WRITTEN, last[2]);
                if (last[3] > 0 && last[4] > 0) {
                    m.at(STAGED, last[3]).at(LAUNCHED, last[4]);
                }
                log.atDebug().addKeyValue("orderId", request.orderId()).log("cuda push layer by layer: " + copies + " copies, " + bytes + " bytes");
                succeed(new TransferResult(bytes, landedNanos - t0, NAME, copies, m.at(TransferResult.ACKED, ackedUs)));
            } catch (CudaException e) {
                log.atError().addKeyValue("orderId", request.orderId()).addKeyValue("sender", senderId).log("cuda copy failed: " + e.getMessage());
                fail(new TransferException(TransferError.INTERNAL, request.describe() + ": " + e.getMessage(), e));
            } catch (TransferException e) {
                fail(e);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                fail(new TransferException(TransferError.ABORTED, request.describe() + ": interrupted while its prefill computed"));
            } catch (RuntimeException e) {
                failUnexpected(request.describe() + ": cuda push layer by layer", e);
            }
        }

        /** Runs {@code copy} on the copy thread (the device context's) and waits for it; its failure is thrown here. */
        private <T> T onCopier(Callable<T> copy) throws InterruptedException {
            if (closed) {
                throw new TransferException(TransferError.INTERNAL, "cuda transport is closed");
            }
            java.util.concurrent.Future<T> f;
            try {
                f = copier.submit(copy);
            } catch (RejectedExecutionException e) {
                throw new TransferException(TransferError.INTERNAL, "cuda transport is closed");
            }
            try {
                return f.get();
            } catch (ExecutionException e) {
                if (e.getCause() instanceof RuntimeException r) {
                    throw r;
                }
                throw new IllegalStateException(e.getCause());
            }
        }

        /** Throws when a push waiting for its source must stop: cancelled, past its deadline, or its prefill failed. */
        private void stopIfMust(SourceReadiness ready) {
            checkCancelled("while its prefill computed");
            if (ready.failure() != null) {
                throw new TransferException(TransferError.ABORTED, request.describe() + " aborted: " + ready.failure());
            }
            if (request.deadlinePassed()) {
                throw new TransferException(TransferError.TIMEOUT, request.describe() + ": the order's deadline passed while its prefill computed");
            }
        }

        private void checkCancelled(String when) {
            String c = stopReason();
            if (c != null) {
                throw new TransferException(TransferError.ABORTED, request.describe() + " cancelled " + when + ": " + c);
            }
        }
    }

    /** The real engine together with the kernels module and device it owns. */
    private record OwningEngine(CudaCopyEngine engine, CudaKernels kernels, CudaDevice device) implements CopyEngine {
        @Override
        public void copy(RunTable table) {
            engine.copy(table);
        }

        @Override
        public long[] lastSteps() {
            return engine.lastSteps();
        }

        @Override
        public String describe() {
            return engine.describe();
        }

        @Override
        public void close() {
            try {
                engine.close();
            } finally {
                try {
                    kernels.close();
                } finally {
                    device.close();
                }
            }
        }
    }
}
