package io.orbitkv.pd.mooncake;

import io.orbitkv.pd.events.TransportEndpoint;
import io.orbitkv.pd.kv.KvPool;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.mooncake.internal.AdmissionClient;
import io.orbitkv.pd.mooncake.internal.AdmissionServer;
import io.orbitkv.pd.mooncake.internal.AdmissionWire;
import io.orbitkv.pd.mooncake.internal.MooncakeNames;
import io.orbitkv.pd.mooncake.te.MooncakeException;
import io.orbitkv.pd.mooncake.te.ResultCode;
import io.orbitkv.pd.mooncake.te.TaskStatus;
import io.orbitkv.pd.mooncake.te.TransferEngine;
import io.orbitkv.pd.transport.KvTransport;
import io.orbitkv.pd.transport.PeerConnectionPool;
import io.orbitkv.pd.transport.PeerEndpoint;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.SourceReadiness;
import io.orbitkv.pd.transport.Transfer;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import java.net.InetSocketAddress;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
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
 * END answered by ACK. The push is {@code MooncakeTransfer} (connection, admission, END), its writes {@code WritePump};
 * this class owns what they share: the engine, the registered memory, the admission connections and the segments.
 *
 * <p>Request states map to {@link TransferError}s in {@link TaskStatus#error()}, engine result codes in
 * {@link ResultCode#kind()}.
 */
public final class MooncakeTransport implements KvTransport {

    public static final String NAME = MooncakeNames.TRANSPORT;
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
                .setAttributes(Map.of(MooncakeNames.CONTROL, host + ":" + admission.localAddress().getPort(),
                        MooncakeNames.PROTOCOL, engine.protocol(), MooncakeNames.METADATA, config.metadata(),
                        MooncakeNames.WIRE_VERSION, Integer.toString(AdmissionWire.VERSION), PushRequest.FIRST_TOKEN_ATTRIBUTE, "true"))
                .build());
    }

    /** Same transport, same protocol and the same metadata service, and an admission listener to talk to. */
    @Override
    public boolean canReach(PeerEndpoint peer) {
        Map<String, String> a = peer.attributes();
        return NAME.equals(peer.transport()) && a.containsKey(MooncakeNames.CONTROL)
                && engine.protocol().equals(a.getOrDefault(MooncakeNames.PROTOCOL, engine.protocol()))
                && config.metadata().equals(a.getOrDefault(MooncakeNames.METADATA, config.metadata()));
    }

    // ---- sending ------------------------------------------------------------------------------------------------

    @Override
    public Transfer push(PushRequest push, KvPool source, TransferPlan plan, PeerEndpoint peer) {
        return push(push, source, plan, peer, (SourceReadiness) null);
    }

    @Override
    public boolean streams() {
        return true;
    }

    /** Layer by layer when {@code ready} is not null: see {@link MooncakeTransfer}. */
    @Override
    public Transfer push(PushRequest push, KvPool source, TransferPlan plan, PeerEndpoint peer, SourceReadiness ready) {
        PushRequest request = push.forPeer(peer);
        MooncakeTransfer t = new MooncakeTransfer(this, request, source, plan, peer, ready);
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
    synchronized void ensureRegistered(KvPool pool) {
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

    PeerConnectionPool.Lease<AdmissionClient> acquire(PeerEndpoint peer) {
        return pool.acquire(peer, (p, gen) -> AdmissionClient.open(p, p.attributes().get(MooncakeNames.CONTROL), gen, senderId,
                config.connectTimeout(), config.ioTimeout()));
    }

    void release(AdmissionClient c) {
        pool.release(c);
    }

    /** A new push id for the admission conversation. */
    int nextPushId() {
        return pushIds.incrementAndGet();
    }

    boolean isClosed() {
        return closed;
    }

    /** {@code t} ended: it no longer needs cancelling at close. */
    void finished(MooncakeTransfer t) {
        running.remove(t);
    }

    /** The receiver's segment id in this engine; opened once per engine incarnation. */
    int segment(PeerEndpoint peer, String name) {
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
