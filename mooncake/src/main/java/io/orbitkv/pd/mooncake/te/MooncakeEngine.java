package io.orbitkv.pd.mooncake.te;

import static java.lang.foreign.MemoryLayout.PathElement.groupElement;
import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import io.orbitkv.pd.runtime.NativeLibrary;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.invoke.MethodHandle;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;

/**
 * The Mooncake Transfer Engine's C API ({@code mooncake-transfer-engine/include/transfer_engine_c.h}) through the FFM
 * API, loaded from a path given at run time ({@value #LIBRARY_ENV} or {@code transfer.mooncake.library}): nothing of
 * Mooncake is needed to build or to run anything else.
 *
 * <p>Loading is lazy and never throws: {@link #load(Path)} returns an {@link Availability} that holds the binding or
 * says why there is none (no path configured, the loader's own error for a missing file or dependency, a library
 * without the symbols). Every handle is resolved once, when the library loads; calls on the data path
 * ({@link #submitTransfer}, {@link #getTransferStatus}, {@link #freeBatchID}) return the raw result code so that the
 * caller maps it without an exception per poll, every other call checks its result and throws a
 * {@link MooncakeException} naming the function.
 *
 * <p>Engines ({@code transfer_engine_t}) travel as {@link MemorySegment} addresses; {@link NativeTransferEngine}
 * owns one. The structs are laid out exactly as the header declares them on LP64 (checked by a test against
 * {@code offsetof}).
 */
public final class MooncakeEngine {

    /** The environment variable naming {@code libtransfer_engine.so}. */
    public static final String LIBRARY_ENV = "ORBITKV_MOONCAKE_LIB";
    /** The metadata mode that needs no etcd, redis or http server: peers exchange descriptors over the engine's RPC port. */
    public static final String P2P_HANDSHAKE = "P2PHANDSHAKE";

    public static final int OPCODE_READ = 0;
    public static final int OPCODE_WRITE = 1;
    /** {@code INVALID_BATCH} ({@code UINT64_MAX}). */
    public static final long INVALID_BATCH = -1L;

    /** {@code struct transfer_request}: opcode, source, target_id, target_offset, length; 40 bytes. */
    public static final StructLayout TRANSFER_REQUEST = MemoryLayout.structLayout(JAVA_INT.withName("opcode"), MemoryLayout.paddingLayout(4),
            ADDRESS.withName("source"), JAVA_INT.withName("target_id"), MemoryLayout.paddingLayout(4), JAVA_LONG.withName("target_offset"),
            JAVA_LONG.withName("length")).withName("transfer_request");
    /** {@code struct transfer_status}: status, transferred_bytes; 16 bytes. */
    public static final StructLayout TRANSFER_STATUS = MemoryLayout.structLayout(JAVA_INT.withName("status"), MemoryLayout.paddingLayout(4),
            JAVA_LONG.withName("transferred_bytes")).withName("transfer_status");
    /** {@code notify_msg_t}: name, msg (C strings); 16 bytes, passed by value to {@code submitTransferWithNotify}. */
    public static final StructLayout NOTIFY_MSG = MemoryLayout.structLayout(ADDRESS.withName("name"), ADDRESS.withName("msg"))
            .withName("notify_msg");
    /** {@code buffer_entry_t}: addr, length; 16 bytes. */
    public static final StructLayout BUFFER_ENTRY = MemoryLayout.structLayout(ADDRESS.withName("addr"), JAVA_LONG.withName("length"))
            .withName("buffer_entry");

    static final long REQ_OPCODE = TRANSFER_REQUEST.byteOffset(groupElement("opcode"));
    static final long REQ_SOURCE = TRANSFER_REQUEST.byteOffset(groupElement("source"));
    static final long REQ_TARGET_ID = TRANSFER_REQUEST.byteOffset(groupElement("target_id"));
    static final long REQ_TARGET_OFFSET = TRANSFER_REQUEST.byteOffset(groupElement("target_offset"));
    static final long REQ_LENGTH = TRANSFER_REQUEST.byteOffset(groupElement("length"));
    static final long STATUS_STATUS = TRANSFER_STATUS.byteOffset(groupElement("status"));
    static final long STATUS_BYTES = TRANSFER_STATUS.byteOffset(groupElement("transferred_bytes"));

    private static final Map<Path, Availability> LOADED = new HashMap<>();

    private final Path library;
    private final MethodHandle createTransferEngine;
    private final MethodHandle discoverTopology;
    private final MethodHandle getLocalIpAndPort;
    private final MethodHandle installTransport;
    private final MethodHandle openSegment;
    private final MethodHandle openSegmentNoCache;
    private final MethodHandle closeSegment;
    private final MethodHandle destroyTransferEngine;
    private final MethodHandle registerLocalMemory;
    private final MethodHandle unregisterLocalMemory;
    private final MethodHandle registerLocalMemoryBatch;
    private final MethodHandle unregisterLocalMemoryBatch;
    private final MethodHandle allocateBatchID;
    private final MethodHandle submitTransfer;
    private final MethodHandle submitTransferWithNotify;
    private final MethodHandle getTransferStatus;
    private final MethodHandle freeBatchID;
    private final MethodHandle getNotifsFromEngine;
    private final MethodHandle freeNotifsMsgBuf;
    private final MethodHandle genNotifyInEngine;

    private MooncakeEngine(NativeLibrary lib) {
        this.library = Path.of(lib.name());
        FunctionDescriptor i_a = FunctionDescriptor.of(JAVA_INT, ADDRESS);
        createTransferEngine = lib.bind("createTransferEngine", FunctionDescriptor.of(ADDRESS, ADDRESS, ADDRESS, ADDRESS, JAVA_LONG, JAVA_INT));
        discoverTopology = lib.bind("discoverTopology", i_a);
        getLocalIpAndPort = lib.bind("getLocalIpAndPort", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG));
        installTransport = lib.bind("installTransport", FunctionDescriptor.of(ADDRESS, ADDRESS, ADDRESS, ADDRESS));
        openSegment = lib.bind("openSegment", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        openSegmentNoCache = lib.bind("openSegmentNoCache", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        closeSegment = lib.bind("closeSegment", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
        destroyTransferEngine = lib.bind("destroyTransferEngine", FunctionDescriptor.ofVoid(ADDRESS));
        registerLocalMemory = lib.bind("registerLocalMemory", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS, JAVA_INT));
        unregisterLocalMemory = lib.bind("unregisterLocalMemory", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        registerLocalMemoryBatch = lib.bind("registerLocalMemoryBatch", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS));
        unregisterLocalMemoryBatch = lib.bind("unregisterLocalMemoryBatch", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_LONG));
        allocateBatchID = lib.bind("allocateBatchID", FunctionDescriptor.of(JAVA_LONG, ADDRESS, JAVA_LONG));
        submitTransfer = lib.bind("submitTransfer", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG, ADDRESS, JAVA_LONG));
        submitTransferWithNotify = lib.bind("submitTransferWithNotify",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG, ADDRESS, JAVA_LONG, NOTIFY_MSG));
        getTransferStatus = lib.bind("getTransferStatus", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG, JAVA_LONG, ADDRESS));
        freeBatchID = lib.bind("freeBatchID", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG));
        getNotifsFromEngine = lib.bind("getNotifsFromEngine", FunctionDescriptor.of(ADDRESS, ADDRESS, ADDRESS));
        freeNotifsMsgBuf = lib.bind("freeNotifsMsgBuf", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
        genNotifyInEngine = lib.bind("genNotifyInEngine", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG, NOTIFY_MSG));
    }

    // ---- loading ------------------------------------------------------------------------------------------------

    /** Whether the library could be loaded, and if not, why not. */
    public record Availability(Optional<MooncakeEngine> engine, String reason) {

        public Availability {
            Objects.requireNonNull(engine, "engine");
            Objects.requireNonNull(reason, "reason");
        }

        static Availability unavailable(String reason) {
            return new Availability(Optional.empty(), reason);
        }

        public boolean available() {
            return engine.isPresent();
        }

        /** The binding, or a {@link MooncakeUnavailableException} carrying the reason. */
        public MooncakeEngine orElseThrow() {
            return engine.orElseThrow(() -> new MooncakeUnavailableException(reason));
        }
    }

    /**
     * The library named by a setting or, when that is empty, by {@value #LIBRARY_ENV}: loaded once per path and kept
     * for the life of the process. Never throws.
     *
     * @param configured {@code transfer.mooncake.library}, or null/blank to use the environment
     */
    public static Availability load(String configured) {
        return load(configured, System.getenv(LIBRARY_ENV));
    }

    /** {@link #load(String)} with the environment's value given ({@code env}: {@value #LIBRARY_ENV}, may be null). */
    public static Availability load(String configured, String env) {
        String path = configured == null || configured.isBlank() ? env : configured;
        if (path == null || path.isBlank()) {
            return Availability.unavailable(LIBRARY_ENV + " is not set and transfer.mooncake.library is not configured: point either at a built"
                    + " libtransfer_engine.so (docs/mooncake.md says how to build it)");
        }
        return load(Path.of(path.strip()));
    }

    /** Loads {@code library} (once per path; the result, good or bad, is remembered). Never throws. */
    public static Availability load(Path library) {
        Path key = library.toAbsolutePath().normalize();
        synchronized (LOADED) {
            return LOADED.computeIfAbsent(key, MooncakeEngine::loadNow);
        }
    }

    private static Availability loadNow(Path library) {
        if (!Files.exists(library)) {
            return Availability.unavailable("cannot load " + library + ": no such file");
        }
        NativeLibrary lib;
        try {
            lib = NativeLibrary.open(library);
        } catch (NativeLibrary.LoadFailure e) {
            return Availability.unavailable(e.getMessage());
        }
        try {
            return new Availability(Optional.of(new MooncakeEngine(lib)), "");
        } catch (NativeLibrary.MissingSymbol e) {
            return Availability.unavailable(library + " is not a Mooncake transfer engine library: it has no " + e.getMessage()
                    + " (build the transfer_engine target of kvcache-ai/Mooncake, see docs/mooncake.md)");
        } catch (RuntimeException e) {
            return Availability.unavailable("cannot bind " + library + ": " + e);
        }
    }

    public Path library() {
        return library;
    }

    // ---- engine lifecycle ---------------------------------------------------------------------------------------

    /**
     * {@code createTransferEngine}: starts an engine and its RPC listener.
     *
     * @param metadata        the metadata connection string ({@value #P2P_HANDSHAKE}, or etcd/redis/http URLs if the
     *                        library was built with them)
     * @param localServerName this engine's name ({@code host} or {@code host:port}; in P2P handshake mode the port is
     *                        replaced by a free one)
     * @param autoDiscover    let the engine discover NICs and install a transport itself (we install explicitly)
     */
    MemorySegment createTransferEngine(String metadata, String localServerName, String host, long rpcPort, boolean autoDiscover) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment e = (MemorySegment) createTransferEngine.invokeExact(a.allocateFrom(metadata), a.allocateFrom(localServerName),
                    a.allocateFrom(host), rpcPort, autoDiscover ? 1 : 0);
            if (e.equals(MemorySegment.NULL)) {
                throw new MooncakeException("createTransferEngine", "no engine for metadata '" + metadata + "', server name '" + localServerName
                        + "' (the engine's log on stderr says why: no free port, metadata server unreachable, ...)");
            }
            return e;
        } catch (MooncakeException e) {
            throw e;
        } catch (Throwable t) {
            throw rethrow("createTransferEngine", t);
        }
    }

    int discoverTopology(MemorySegment engine) {
        try {
            return (int) discoverTopology.invokeExact(engine);
        } catch (Throwable t) {
            throw rethrow("discoverTopology", t);
        }
    }

    /** {@code getLocalIpAndPort}: the engine's RPC address, which is its segment name in P2P handshake mode. */
    String localIpAndPort(MemorySegment engine) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment buf = a.allocate(256);
            check((int) getLocalIpAndPort.invokeExact(engine, buf, 256L), "getLocalIpAndPort", "");
            return buf.getString(0);
        } catch (MooncakeException e) {
            throw e;
        } catch (Throwable t) {
            throw rethrow("getLocalIpAndPort", t);
        }
    }

    /** {@code installTransport}; {@code nicPriorityMatrix} (JSON) goes in {@code args[0]} when given. */
    void installTransport(MemorySegment engine, String protocol, String nicPriorityMatrix) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment args = MemorySegment.NULL;
            if (nicPriorityMatrix != null && !nicPriorityMatrix.isBlank()) {
                args = a.allocate(ADDRESS, 2);
                args.setAtIndex(ADDRESS, 0, a.allocateFrom(nicPriorityMatrix));
                args.setAtIndex(ADDRESS, 1, MemorySegment.NULL);
            }
            MemorySegment t = (MemorySegment) installTransport.invokeExact(engine, a.allocateFrom(protocol), args);
            if (t.equals(MemorySegment.NULL)) {
                throw new MooncakeException("installTransport", "the engine could not install the '" + protocol + "' transport"
                        + ("rdma".equals(protocol) ? " (no RDMA device found, or the NIC priority matrix does not parse)" : "")
                        + "; the engine's log on stderr says why");
            }
        } catch (MooncakeException e) {
            throw e;
        } catch (Throwable t) {
            throw rethrow("installTransport", t);
        }
    }

    /** {@code openSegment} / {@code openSegmentNoCache}: the raw result (a segment id, or negative). */
    int openSegment(MemorySegment engine, String name, boolean fresh) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment n = a.allocateFrom(name);
            return fresh ? (int) openSegmentNoCache.invokeExact(engine, n) : (int) openSegment.invokeExact(engine, n);
        } catch (Throwable t) {
            throw rethrow("openSegment", t);
        }
    }

    int closeSegment(MemorySegment engine, int segment) {
        try {
            return (int) closeSegment.invokeExact(engine, segment);
        } catch (Throwable t) {
            throw rethrow("closeSegment", t);
        }
    }

    void destroyTransferEngine(MemorySegment engine) {
        try {
            destroyTransferEngine.invokeExact(engine);
        } catch (Throwable t) {
            throw rethrow("destroyTransferEngine", t);
        }
    }

    // ---- memory -------------------------------------------------------------------------------------------------

    void registerLocalMemory(MemorySegment engine, long address, long length, String location, boolean remoteAccessible) {
        try (Arena a = Arena.ofConfined()) {
            int rc = (int) registerLocalMemory.invokeExact(engine, MemorySegment.ofAddress(address), length, a.allocateFrom(location),
                    remoteAccessible ? 1 : 0);
            check(rc, "registerLocalMemory", length + " bytes at 0x" + Long.toHexString(address));
        } catch (MooncakeException e) {
            throw e;
        } catch (Throwable t) {
            throw rethrow("registerLocalMemory", t);
        }
    }

    void unregisterLocalMemory(MemorySegment engine, long address) {
        try {
            check((int) unregisterLocalMemory.invokeExact(engine, MemorySegment.ofAddress(address)), "unregisterLocalMemory",
                    "0x" + Long.toHexString(address));
        } catch (MooncakeException e) {
            throw e;
        } catch (Throwable t) {
            throw rethrow("unregisterLocalMemory", t);
        }
    }

    /** {@code registerLocalMemoryBatch}: registers every range (remote-accessible, as the C API does for batches). */
    void registerLocalMemoryBatch(MemorySegment engine, List<TransferEngine.Range> ranges, String location) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment list = a.allocate(BUFFER_ENTRY, ranges.size());
            for (int i = 0; i < ranges.size(); i++) {
                MemorySegment e = list.asSlice(i * BUFFER_ENTRY.byteSize(), BUFFER_ENTRY.byteSize());
                e.set(ADDRESS, 0, MemorySegment.ofAddress(ranges.get(i).address()));
                e.set(JAVA_LONG, 8, ranges.get(i).length());
            }
            int rc = (int) registerLocalMemoryBatch.invokeExact(engine, list, (long) ranges.size(), a.allocateFrom(location));
            check(rc, "registerLocalMemoryBatch", ranges.size() + " ranges, location " + location);
        } catch (MooncakeException e) {
            throw e;
        } catch (Throwable t) {
            throw rethrow("registerLocalMemoryBatch", t);
        }
    }

    void unregisterLocalMemoryBatch(MemorySegment engine, List<Long> addresses) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment list = a.allocate(ADDRESS, addresses.size());
            for (int i = 0; i < addresses.size(); i++) {
                list.setAtIndex(ADDRESS, i, MemorySegment.ofAddress(addresses.get(i)));
            }
            check((int) unregisterLocalMemoryBatch.invokeExact(engine, list, (long) addresses.size()), "unregisterLocalMemoryBatch",
                    addresses.size() + " ranges");
        } catch (MooncakeException e) {
            throw e;
        } catch (Throwable t) {
            throw rethrow("unregisterLocalMemoryBatch", t);
        }
    }

    // ---- transfers (the data path: raw result codes, no allocation) --------------------------------------------

    /** {@code allocateBatchID}: a batch of up to {@code capacity} requests. */
    long allocateBatchID(MemorySegment engine, long capacity) {
        long id;
        try {
            id = (long) allocateBatchID.invokeExact(engine, capacity);
        } catch (Throwable t) {
            throw rethrow("allocateBatchID", t);
        }
        if (id == INVALID_BATCH || (id < 0 && id > -1000)) {
            throw new MooncakeException("allocateBatchID", (int) id, "a batch of " + capacity + " requests");
        }
        return id;
    }

    /** {@code submitTransfer}: {@code count} requests laid out as {@link #TRANSFER_REQUEST}s; returns the Status code. */
    int submitTransfer(MemorySegment engine, long batch, MemorySegment requests, long count) {
        try {
            return (int) submitTransfer.invokeExact(engine, batch, requests, count);
        } catch (Throwable t) {
            throw rethrow("submitTransfer", t);
        }
    }

    /** {@code submitTransferWithNotify}; {@code notify} is a {@link #NOTIFY_MSG} passed by value. */
    int submitTransferWithNotify(MemorySegment engine, long batch, MemorySegment requests, long count, MemorySegment notify) {
        try {
            return (int) submitTransferWithNotify.invokeExact(engine, batch, requests, count, notify);
        } catch (Throwable t) {
            throw rethrow("submitTransferWithNotify", t);
        }
    }

    /** {@code getTransferStatus}: fills {@code status} (a {@link #TRANSFER_STATUS}); returns the Status code. */
    int getTransferStatus(MemorySegment engine, long batch, long task, MemorySegment status) {
        try {
            return (int) getTransferStatus.invokeExact(engine, batch, task, status);
        } catch (Throwable t) {
            throw rethrow("getTransferStatus", t);
        }
    }

    /** {@code freeBatchID}: returns the Status code ({@code kBatchBusy} while a task is not finished). */
    int freeBatchID(MemorySegment engine, long batch) {
        try {
            return (int) freeBatchID.invokeExact(engine, batch);
        } catch (Throwable t) {
            throw rethrow("freeBatchID", t);
        }
    }

    // ---- notifications ------------------------------------------------------------------------------------------

    /** {@code getNotifsFromEngine} + {@code freeNotifsMsgBuf}: the notifications received since the last call. */
    List<TransferEngine.Notification> notifications(MemorySegment engine) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment size = a.allocate(JAVA_INT);
            MemorySegment list = (MemorySegment) getNotifsFromEngine.invokeExact(engine, size);
            int n = size.get(JAVA_INT, 0);
            List<TransferEngine.Notification> out = new ArrayList<>();
            if (list.equals(MemorySegment.NULL) || n <= 0) {
                return out;
            }
            MemorySegment all = NativeLibrary.sized(list, n * NOTIFY_MSG.byteSize());
            for (int i = 0; i < n; i++) {
                out.add(new TransferEngine.Notification(NativeLibrary.cString(all.get(ADDRESS, i * NOTIFY_MSG.byteSize())),
                        NativeLibrary.cString(all.get(ADDRESS, i * NOTIFY_MSG.byteSize() + 8))));
            }
            int ignored = (int) freeNotifsMsgBuf.invokeExact(list, n);
            return out;
        } catch (Throwable t) {
            throw rethrow("getNotifsFromEngine", t);
        }
    }

    /** {@code genNotifyInEngine}: sends a notification to an opened segment's engine. */
    void genNotify(MemorySegment engine, int segment, String name, String message) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment msg = a.allocate(NOTIFY_MSG);
            msg.set(ADDRESS, 0, a.allocateFrom(name));
            msg.set(ADDRESS, 8, a.allocateFrom(message));
            check((int) genNotifyInEngine.invokeExact(engine, (long) segment, msg), "genNotifyInEngine", "segment " + segment);
        } catch (MooncakeException e) {
            throw e;
        } catch (Throwable t) {
            throw rethrow("genNotifyInEngine", t);
        }
    }

    // ---- errors -------------------------------------------------------------------------------------------------

    static void check(int rc, String function, String context) {
        if (rc != 0) {
            throw new MooncakeException(function, rc, context);
        }
    }

    private static RuntimeException rethrow(String function, Throwable t) {
        if (t instanceof RuntimeException r) {
            return r;
        }
        if (t instanceof Error e) {
            throw e;
        }
        return new IllegalStateException(function + ": " + t, t);
    }
}
