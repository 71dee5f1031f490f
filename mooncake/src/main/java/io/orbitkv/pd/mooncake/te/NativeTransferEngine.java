package io.orbitkv.pd.mooncake.te;

import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One Mooncake {@code transfer_engine_t}: created with {@code createTransferEngine}, one transport installed
 * explicitly ({@code tcp} or {@code rdma}; automatic discovery is off so that a machine with an RDMA NIC still runs
 * the protocol it was told to), destroyed on {@link #close()}.
 */
public final class NativeTransferEngine implements TransferEngine {

    private static final Logger log = LoggerFactory.getLogger(NativeTransferEngine.class);

    /**
     * How to start an engine.
     *
     * @param protocol          {@code rdma} or {@code tcp}
     * @param metadata          metadata connection string, {@value MooncakeEngine#P2P_HANDSHAKE} by default
     * @param host              the address peers reach this engine at (its RPC and data listeners are announced with it)
     * @param nicPriorityMatrix JSON NIC priority matrix for {@code rdma}; null to let the engine discover its NICs
     * @param location          memory location hint for registrations ({@code *}: let the engine find the NUMA node)
     */
    public record Options(String protocol, String metadata, String host, String nicPriorityMatrix, String location) { }

    private final MooncakeEngine lib;
    private final MemorySegment engine;
    private final String protocol;
    private final String location;
    private final String segmentName;
    private final AtomicBoolean closed = new AtomicBoolean();

    private NativeTransferEngine(MooncakeEngine lib, MemorySegment engine, Options o) {
        this.lib = lib;
        this.engine = engine;
        this.protocol = o.protocol();
        this.location = o.location();
        this.segmentName = lib.localIpAndPort(engine);
    }

    /** Starts an engine; on any failure nothing is left running. */
    public static NativeTransferEngine start(MooncakeEngine lib, Options o) {
        MemorySegment e = lib.createTransferEngine(o.metadata(), o.host(), o.host(), 0, false);
        try {
            if ("rdma".equals(o.protocol()) && (o.nicPriorityMatrix() == null || o.nicPriorityMatrix().isBlank())) {
                int rc = lib.discoverTopology(e);
                if (rc != 0) {
                    throw new MooncakeException("discoverTopology", rc, "finding the RDMA NICs of this machine");
                }
            }
            lib.installTransport(e, o.protocol(), o.nicPriorityMatrix());
            NativeTransferEngine t = new NativeTransferEngine(lib, e, o);
            log.atInfo().addKeyValue("protocol", o.protocol()).addKeyValue("segment", t.segmentName).addKeyValue("metadata", o.metadata())
                    .addKeyValue("library", lib.library()).log("Mooncake transfer engine started");
            return t;
        } catch (RuntimeException ex) {
            lib.destroyTransferEngine(e);
            throw ex;
        }
    }

    @Override
    public String protocol() {
        return protocol;
    }

    @Override
    public String segmentName() {
        return segmentName;
    }

    @Override
    public void registerMemory(List<Range> ranges, boolean remoteAccessible) {
        if (ranges.isEmpty()) {
            return;
        }
        if (remoteAccessible) {
            // The batch call registers remote-accessible and publishes the segment descriptor once.
            lib.registerLocalMemoryBatch(engine, ranges, location);
        } else {
            for (Range r : ranges) {
                lib.registerLocalMemory(engine, r.address(), r.length(), location, false);
            }
        }
    }

    @Override
    public void unregisterMemory(List<Range> ranges) {
        if (!ranges.isEmpty()) {
            lib.unregisterLocalMemoryBatch(engine, ranges.stream().map(Range::address).toList());
        }
    }

    @Override
    public int openSegment(String name, boolean fresh) {
        int id = lib.openSegment(engine, name, fresh);
        if (id < 0) {
            throw new MooncakeException(fresh ? "openSegmentNoCache" : "openSegment", id, "segment '" + name
                    + "': its engine is unreachable or has not published the segment");
        }
        return id;
    }

    @Override
    public long allocateBatch(int capacity) {
        return lib.allocateBatchID(engine, capacity);
    }

    @Override
    public int submit(long batch, MemorySegment requests, int count) {
        return lib.submitTransfer(engine, batch, requests, count);
    }

    @Override
    public int status(long batch, long task, MemorySegment status) {
        return lib.getTransferStatus(engine, batch, task, status);
    }

    @Override
    public int freeBatch(long batch) {
        return lib.freeBatchID(engine, batch);
    }

    @Override
    public List<Notification> notifications() {
        return lib.notifications(engine);
    }

    @Override
    public void notify(int segment, String name, String message) {
        lib.genNotify(engine, segment, name, message);
    }

    @Override
    public void close() {
        if (closed.compareAndSet(false, true)) {
            lib.destroyTransferEngine(engine);
        }
    }

    @Override
    public String toString() {
        return "Mooncake engine " + segmentName + " (" + protocol + ")";
    }
}
