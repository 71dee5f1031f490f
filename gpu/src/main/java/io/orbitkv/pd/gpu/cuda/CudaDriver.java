package io.orbitkv.pd.gpu.cuda;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_BYTE;
import static java.lang.foreign.ValueLayout.JAVA_FLOAT;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import io.orbitkv.pd.runtime.NativeLibrary;
import java.lang.foreign.Arena;
import java.lang.foreign.FunctionDescriptor;
import java.lang.foreign.MemoryLayout;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import java.lang.invoke.MethodHandle;
import java.util.HexFormat;
import java.util.Objects;
import java.util.Optional;

/**
 * The CUDA driver API ({@code libcuda.so.1}) through the FFM API: the calls the GPU data plane needs, each return
 * code checked and turned into a {@link CudaException} naming the function. The driver API is stable across CUDA
 * versions (versioned entry points such as {@code cuMemAlloc_v2} are bound by their exported names), so nothing
 * here depends on a CUDA toolkit being installed.
 *
 * <p>Loading is lazy and never throws: {@link #load()} returns an {@link Availability} that either holds the driver
 * or says why there is none (no library, a library without the symbols, {@code cuInit} failing because there is no
 * device). Every handle is resolved once, when the driver loads.
 *
 * <p>Contexts are per thread in CUDA: callers make a context current ({@link CudaDevice#bind()}) on the thread that
 * calls, and keep work for one device on threads they own (platform threads; a virtual thread may change carrier).
 *
 * <p>Opaque handles ({@code CUcontext}, {@code CUstream}, {@code CUevent}, {@code CUmodule}, {@code CUfunction})
 * travel as {@link MemorySegment} addresses, device pointers ({@code CUdeviceptr}) as {@code long}.
 */
public final class CudaDriver {

    /** The driver library's soname. */
    public static final String LIBRARY = "libcuda.so.1";
    /** {@code CU_IPC_HANDLE_SIZE}. */
    public static final int IPC_HANDLE_BYTES = 64;

    static final int CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1;
    static final int CU_STREAM_NON_BLOCKING = 1;
    static final int CU_EVENT_DISABLE_TIMING = 2;
    static final int CU_MEMCPY_SRC_ACCESS_ORDER_STREAM = 1;
    static final int CU_MEM_LOCATION_TYPE_DEVICE = 1;

    /** Device attributes used here ({@code CUdevice_attribute}). */
    public static final int ATTR_MULTIPROCESSOR_COUNT = 16;
    public static final int ATTR_L2_CACHE_SIZE = 38;
    public static final int ATTR_MAX_THREADS_PER_MULTIPROCESSOR = 39;
    public static final int ATTR_UNIFIED_ADDRESSING = 41;
    public static final int ATTR_COMPUTE_CAPABILITY_MAJOR = 75;
    public static final int ATTR_COMPUTE_CAPABILITY_MINOR = 76;
    /** {@code CU_FUNC_ATTRIBUTE_NUM_REGS}. */
    public static final int FUNC_ATTR_NUM_REGS = 4;

    /** {@code CUipcMemHandle}: 64 opaque bytes, passed by value. */
    static final StructLayout IPC_HANDLE = MemoryLayout.structLayout(MemoryLayout.sequenceLayout(IPC_HANDLE_BYTES, JAVA_BYTE).withName("reserved"))
            .withName("CUipcMemHandle");
    /**
     * {@code CUmemcpyAttributes}: {@code srcAccessOrder} (int), {@code srcLocHint} and {@code dstLocHint}
     * ({@code CUmemLocation}: type, id), {@code flags}; 24 bytes.
     */
    static final StructLayout MEMCPY_ATTRIBUTES = MemoryLayout.structLayout(JAVA_INT.withName("srcAccessOrder"),
            JAVA_INT.withName("srcLocType"), JAVA_INT.withName("srcLocId"), JAVA_INT.withName("dstLocType"), JAVA_INT.withName("dstLocId"),
            JAVA_INT.withName("flags")).withName("CUmemcpyAttributes");

    private static final Object LOCK = new Object();
    private static Availability loaded;

    private final String library;
    private final MethodHandle cuInit;
    private final MethodHandle cuDriverGetVersion;
    private final MethodHandle cuGetErrorName;
    private final MethodHandle cuGetErrorString;
    private final MethodHandle cuDeviceGetCount;
    private final MethodHandle cuDeviceGet;
    private final MethodHandle cuDeviceGetName;
    private final MethodHandle cuDeviceGetAttribute;
    private final MethodHandle cuDeviceTotalMem;
    private final MethodHandle cuDeviceCanAccessPeer;
    private final MethodHandle cuDeviceGetUuid;
    private final MethodHandle cuDevicePrimaryCtxRetain;
    private final MethodHandle cuDevicePrimaryCtxRelease;
    private final MethodHandle cuCtxSetCurrent;
    private final MethodHandle cuCtxSynchronize;
    private final MethodHandle cuCtxEnablePeerAccess;
    private final MethodHandle cuMemAlloc;
    private final MethodHandle cuMemFree;
    private final MethodHandle cuMemAllocHost;
    private final MethodHandle cuMemFreeHost;
    private final MethodHandle cuMemGetInfo;
    private final MethodHandle cuMemsetD8;
    private final MethodHandle cuMemsetD8Async;
    private final MethodHandle cuMemcpyHtoD;
    private final MethodHandle cuMemcpyDtoH;
    private final MethodHandle cuMemcpyHtoDAsync;
    private final MethodHandle cuMemcpyDtoDAsync;
    private final MethodHandle cuMemcpyBatchAsync;
    private final boolean batchHasFailIdx;
    private final MethodHandle cuIpcGetMemHandle;
    private final MethodHandle cuIpcOpenMemHandle;
    private final MethodHandle cuIpcCloseMemHandle;
    private final MethodHandle cuStreamCreate;
    private final MethodHandle cuStreamDestroy;
    private final MethodHandle cuStreamSynchronize;
    private final MethodHandle cuEventCreate;
    private final MethodHandle cuEventDestroy;
    private final MethodHandle cuEventRecord;
    private final MethodHandle cuEventSynchronize;
    private final MethodHandle cuEventQuery;
    private final MethodHandle cuEventElapsedTime;
    private final MethodHandle cuModuleLoadData;
    private final MethodHandle cuModuleUnload;
    private final MethodHandle cuModuleGetFunction;
    private final MethodHandle cuFuncGetAttribute;
    private final MethodHandle cuOccupancyMaxActiveBlocksPerMultiprocessor;
    private final MethodHandle cuLaunchKernel;

    private CudaDriver(String library, NativeLibrary lib) {
        this.library = library;
        FunctionDescriptor i_i = FunctionDescriptor.of(JAVA_INT, JAVA_INT);
        FunctionDescriptor i_a = FunctionDescriptor.of(JAVA_INT, ADDRESS);
        FunctionDescriptor i_l = FunctionDescriptor.of(JAVA_INT, JAVA_LONG);
        FunctionDescriptor i_ = FunctionDescriptor.of(JAVA_INT);
        cuInit = lib.bind("cuInit", i_i);
        cuDriverGetVersion = lib.bind("cuDriverGetVersion", i_a);
        cuGetErrorName = lib.bind("cuGetErrorName", FunctionDescriptor.of(JAVA_INT, JAVA_INT, ADDRESS));
        cuGetErrorString = lib.bind("cuGetErrorString", FunctionDescriptor.of(JAVA_INT, JAVA_INT, ADDRESS));
        cuDeviceGetCount = lib.bind("cuDeviceGetCount", i_a);
        cuDeviceGet = lib.bind("cuDeviceGet", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
        cuDeviceGetName = lib.bind("cuDeviceGetName", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, JAVA_INT));
        cuDeviceGetAttribute = lib.bind("cuDeviceGetAttribute", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, JAVA_INT));
        cuDeviceTotalMem = lib.bind("cuDeviceTotalMem_v2", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
        cuDeviceCanAccessPeer = lib.bind("cuDeviceCanAccessPeer", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, JAVA_INT));
        cuDeviceGetUuid = lib.bindOptional("cuDeviceGetUuid_v2", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT))
                .orElseGet(() -> lib.bind("cuDeviceGetUuid", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT)));
        cuDevicePrimaryCtxRetain = lib.bind("cuDevicePrimaryCtxRetain", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
        cuDevicePrimaryCtxRelease = lib.bind("cuDevicePrimaryCtxRelease_v2", i_i);
        cuCtxSetCurrent = lib.bind("cuCtxSetCurrent", i_a);
        cuCtxSynchronize = lib.bind("cuCtxSynchronize", i_);
        cuCtxEnablePeerAccess = lib.bind("cuCtxEnablePeerAccess", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
        cuMemAlloc = lib.bind("cuMemAlloc_v2", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG));
        cuMemFree = lib.bind("cuMemFree_v2", i_l);
        cuMemAllocHost = lib.bind("cuMemAllocHost_v2", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG));
        cuMemFreeHost = lib.bind("cuMemFreeHost", i_a);
        cuMemGetInfo = lib.bind("cuMemGetInfo_v2", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        cuMemsetD8 = lib.bind("cuMemsetD8_v2", FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_BYTE, JAVA_LONG));
        cuMemsetD8Async = lib.bind("cuMemsetD8Async", FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_BYTE, JAVA_LONG, ADDRESS));
        cuMemcpyHtoD = lib.bind("cuMemcpyHtoD_v2", FunctionDescriptor.of(JAVA_INT, JAVA_LONG, ADDRESS, JAVA_LONG));
        cuMemcpyDtoH = lib.bind("cuMemcpyDtoH_v2", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG, JAVA_LONG));
        cuMemcpyHtoDAsync = lib.bind("cuMemcpyHtoDAsync_v2", FunctionDescriptor.of(JAVA_INT, JAVA_LONG, ADDRESS, JAVA_LONG, ADDRESS));
        cuMemcpyDtoDAsync = lib.bind("cuMemcpyDtoDAsync_v2", FunctionDescriptor.of(JAVA_INT, JAVA_LONG, JAVA_LONG, JAVA_LONG, ADDRESS));
        // CUDA 13 headers map cuMemcpyBatchAsync to _v2 (8 parameters); the 12.8 entry point has a failIdx out-parameter.
        Optional<MethodHandle> batch2 = lib.bindOptional("cuMemcpyBatchAsync_v2",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS));
        if (batch2.isPresent()) {
            cuMemcpyBatchAsync = batch2.get();
            batchHasFailIdx = false;
        } else {
            cuMemcpyBatchAsync = lib.bindOptional("cuMemcpyBatchAsync",
                    FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS, ADDRESS, JAVA_LONG, ADDRESS, ADDRESS)).orElse(null);
            batchHasFailIdx = true;
        }
        cuIpcGetMemHandle = lib.bind("cuIpcGetMemHandle", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_LONG));
        cuIpcOpenMemHandle = lib.bindOptional("cuIpcOpenMemHandle_v2", FunctionDescriptor.of(JAVA_INT, ADDRESS, IPC_HANDLE, JAVA_INT))
                .orElseGet(() -> lib.bind("cuIpcOpenMemHandle", FunctionDescriptor.of(JAVA_INT, ADDRESS, IPC_HANDLE, JAVA_INT)));
        cuIpcCloseMemHandle = lib.bind("cuIpcCloseMemHandle", i_l);
        cuStreamCreate = lib.bind("cuStreamCreate", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
        cuStreamDestroy = lib.bind("cuStreamDestroy_v2", i_a);
        cuStreamSynchronize = lib.bind("cuStreamSynchronize", i_a);
        cuEventCreate = lib.bind("cuEventCreate", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT));
        cuEventDestroy = lib.bind("cuEventDestroy_v2", i_a);
        cuEventRecord = lib.bind("cuEventRecord", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        cuEventSynchronize = lib.bind("cuEventSynchronize", i_a);
        cuEventQuery = lib.bind("cuEventQuery", i_a);
        cuEventElapsedTime = lib.bindOptional("cuEventElapsedTime_v2", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, ADDRESS))
                .orElseGet(() -> lib.bind("cuEventElapsedTime", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, ADDRESS)));
        cuModuleLoadData = lib.bind("cuModuleLoadData", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS));
        cuModuleUnload = lib.bind("cuModuleUnload", i_a);
        cuModuleGetFunction = lib.bind("cuModuleGetFunction", FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, ADDRESS));
        cuFuncGetAttribute = lib.bind("cuFuncGetAttribute", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, ADDRESS));
        cuOccupancyMaxActiveBlocksPerMultiprocessor = lib.bind("cuOccupancyMaxActiveBlocksPerMultiprocessor",
                FunctionDescriptor.of(JAVA_INT, ADDRESS, ADDRESS, JAVA_INT, JAVA_LONG));
        cuLaunchKernel = lib.bind("cuLaunchKernel", FunctionDescriptor.of(JAVA_INT, ADDRESS, JAVA_INT, JAVA_INT, JAVA_INT, JAVA_INT, JAVA_INT,
                JAVA_INT, JAVA_INT, ADDRESS, ADDRESS, ADDRESS));
    }

    // ---- loading ------------------------------------------------------------------------------------------------

    /** Whether the driver could be loaded here, and if not, why not. */
    public record Availability(Optional<CudaDriver> driver, String reason) {

        public Availability {
            Objects.requireNonNull(driver, "driver");
            Objects.requireNonNull(reason, "reason");
        }

        static Availability of(CudaDriver d) {
            return new Availability(Optional.of(d), "");
        }

        static Availability unavailable(String reason) {
            return new Availability(Optional.empty(), reason);
        }

        public boolean available() {
            return driver.isPresent();
        }

        /** The driver, or a {@link CudaUnavailableException} carrying the reason. */
        public CudaDriver orElseThrow() {
            return driver.orElseThrow(() -> new CudaUnavailableException(reason));
        }
    }

    /** The process-wide driver ({@value #LIBRARY}), loaded and initialized ({@code cuInit}) on first use. */
    public static Availability load() {
        synchronized (LOCK) {
            if (loaded == null) {
                loaded = load(LIBRARY);
            }
            return loaded;
        }
    }

    /**
     * Loads {@code library} as a CUDA driver and initializes it. Never throws; {@link #load()} is the one to use, this
     * one exists so that the unavailable paths can be exercised on any machine.
     */
    public static Availability load(String library) {
        NativeLibrary lib;
        try {
            lib = NativeLibrary.open(library);
        } catch (NativeLibrary.LoadFailure e) {
            return Availability.unavailable("cannot load " + library + " (no NVIDIA driver on this machine?): " + e.reason());
        }
        CudaDriver d;
        try {
            d = new CudaDriver(library, lib);
        } catch (NativeLibrary.MissingSymbol e) {
            return Availability.unavailable(library + " is not a usable CUDA driver: it has no " + e.getMessage()
                    + " (a driver older than CUDA 12, or not the NVIDIA driver library)");
        } catch (RuntimeException e) {
            return Availability.unavailable("cannot bind " + library + ": " + e);
        }
        try {
            d.init();
        } catch (CudaException e) {
            return Availability.unavailable("the CUDA driver in " + library + " did not initialize: " + e.getMessage()
                    + (e.code() == CudaException.NO_DEVICE ? " (no GPU visible to this process: check CUDA_VISIBLE_DEVICES)" : ""));
        }
        return Availability.of(d);
    }

    private void init() {
        check((int) invoke(() -> (int) cuInit.invokeExact(0)), "cuInit", "");
    }

    /** The library this driver was loaded from. */
    public String library() {
        return library;
    }

    // ---- errors -------------------------------------------------------------------------------------------------

    /** Throws a {@link CudaException} naming {@code function} unless {@code rc} is {@code CUDA_SUCCESS}. */
    void check(int rc, String function, String context) {
        if (rc != 0) {
            throw new CudaException(function, rc, errorName(rc), errorString(rc), context);
        }
    }

    /** {@code CUDA_ERROR_...} for a result code. */
    public String errorName(int rc) {
        return errorText(cuGetErrorName, rc).orElse("CUresult " + rc);
    }

    /** The driver's description of a result code. */
    public String errorString(int rc) {
        return errorText(cuGetErrorString, rc).orElse("");
    }

    private static Optional<String> errorText(MethodHandle h, int rc) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment out = a.allocate(ADDRESS);
            int r = (int) h.invokeExact(rc, out);
            MemorySegment p = out.get(ADDRESS, 0);
            return r != 0 || p.equals(MemorySegment.NULL) ? Optional.empty() : Optional.of(NativeLibrary.cString(p));
        } catch (Throwable t) {
            return Optional.empty();
        }
    }

    // ---- driver and devices ---------------------------------------------------------------------------------------

    /** The driver's CUDA version, e.g. 13000 for 13.0. */
    public int driverVersion() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(JAVA_INT);
            check(invoke(() -> (int) cuDriverGetVersion.invokeExact(v)), "cuDriverGetVersion", "");
            return v.get(JAVA_INT, 0);
        }
    }

    public int deviceCount() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(JAVA_INT);
            check(invoke(() -> (int) cuDeviceGetCount.invokeExact(v)), "cuDeviceGetCount", "");
            return v.get(JAVA_INT, 0);
        }
    }

    /** The {@code CUdevice} of an ordinal. */
    public int device(int ordinal) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(JAVA_INT);
            check(invoke(() -> (int) cuDeviceGet.invokeExact(v, ordinal)), "cuDeviceGet", "ordinal " + ordinal);
            return v.get(JAVA_INT, 0);
        }
    }

    public String deviceName(int device) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(256);
            check(invoke(() -> (int) cuDeviceGetName.invokeExact(v, 256, device)), "cuDeviceGetName", "");
            return v.getString(0);
        }
    }

    public int deviceAttribute(int device, int attribute) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(JAVA_INT);
            check(invoke(() -> (int) cuDeviceGetAttribute.invokeExact(v, attribute, device)), "cuDeviceGetAttribute", "attribute " + attribute);
            return v.get(JAVA_INT, 0);
        }
    }

    public long deviceTotalMemory(int device) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(JAVA_LONG);
            check(invoke(() -> (int) cuDeviceTotalMem.invokeExact(v, device)), "cuDeviceTotalMem_v2", "");
            return v.get(JAVA_LONG, 0);
        }
    }

    /** The device's UUID as 32 hex digits: stable across processes, unlike ordinals under {@code CUDA_VISIBLE_DEVICES}. */
    public String deviceUuid(int device) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(16);
            check(invoke(() -> (int) cuDeviceGetUuid.invokeExact(v, device)), "cuDeviceGetUuid", "");
            return HexFormat.of().formatHex(v.toArray(JAVA_BYTE));
        }
    }

    public boolean canAccessPeer(int device, int peerDevice) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(JAVA_INT);
            check(invoke(() -> (int) cuDeviceCanAccessPeer.invokeExact(v, device, peerDevice)), "cuDeviceCanAccessPeer", "");
            return v.get(JAVA_INT, 0) != 0;
        }
    }

    // ---- contexts -------------------------------------------------------------------------------------------------

    /** Retains the device's primary context (the one the CUDA runtime and PyTorch share). */
    public MemorySegment primaryContextRetain(int device) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(ADDRESS);
            check(invoke(() -> (int) cuDevicePrimaryCtxRetain.invokeExact(v, device)), "cuDevicePrimaryCtxRetain", "device " + device);
            return v.get(ADDRESS, 0);
        }
    }

    public void primaryContextRelease(int device) {
        check(invoke(() -> (int) cuDevicePrimaryCtxRelease.invokeExact(device)), "cuDevicePrimaryCtxRelease_v2", "device " + device);
    }

    /** Makes {@code context} current on the calling thread. */
    public void setCurrentContext(MemorySegment context) {
        check(invoke(() -> (int) cuCtxSetCurrent.invokeExact(context)), "cuCtxSetCurrent", "");
    }

    public void contextSynchronize() {
        check(invoke(() -> (int) cuCtxSynchronize.invokeExact()), "cuCtxSynchronize", "");
    }

    /** Lets kernels of the current context reach {@code peerContext}'s memory; already enabled is not an error. */
    public void enablePeerAccess(MemorySegment peerContext) {
        int rc = invoke(() -> (int) cuCtxEnablePeerAccess.invokeExact(peerContext, 0));
        if (rc != 704) { // CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
            check(rc, "cuCtxEnablePeerAccess", "");
        }
    }

    // ---- memory ---------------------------------------------------------------------------------------------------

    /** Allocates device memory in the current context (256-byte aligned at least). */
    public long memAlloc(long bytes) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(JAVA_LONG);
            check(invoke(() -> (int) cuMemAlloc.invokeExact(v, bytes)), "cuMemAlloc_v2", "allocating " + bytes + " bytes");
            return v.get(JAVA_LONG, 0);
        }
    }

    public void memFree(long dptr) {
        check(invoke(() -> (int) cuMemFree.invokeExact(dptr)), "cuMemFree_v2", "");
    }

    /** Page-locked host memory, usable as the source of asynchronous host-to-device copies. Free with {@link #memFreeHost}. */
    public MemorySegment memAllocHost(long bytes) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(ADDRESS);
            check(invoke(() -> (int) cuMemAllocHost.invokeExact(v, bytes)), "cuMemAllocHost_v2", "allocating " + bytes + " pinned bytes");
            return NativeLibrary.sized(v.get(ADDRESS, 0), bytes);
        }
    }

    public void memFreeHost(MemorySegment p) {
        check(invoke(() -> (int) cuMemFreeHost.invokeExact(p)), "cuMemFreeHost", "");
    }

    /** {@code {free, total}} bytes of the current context's device. */
    public long[] memGetInfo() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment f = a.allocate(JAVA_LONG);
            MemorySegment t = a.allocate(JAVA_LONG);
            check(invoke(() -> (int) cuMemGetInfo.invokeExact(f, t)), "cuMemGetInfo_v2", "");
            return new long[] {f.get(JAVA_LONG, 0), t.get(JAVA_LONG, 0)};
        }
    }

    public void memsetD8(long dptr, byte value, long bytes) {
        check(invoke(() -> (int) cuMemsetD8.invokeExact(dptr, value, bytes)), "cuMemsetD8_v2", "");
    }

    public void memsetD8Async(long dptr, byte value, long bytes, MemorySegment stream) {
        check(invoke(() -> (int) cuMemsetD8Async.invokeExact(dptr, value, bytes, stream)), "cuMemsetD8Async", "");
    }

    /** Synchronous copy from host memory (any segment, heap excluded) to the device. */
    public void memcpyHtoD(long dst, MemorySegment src, long bytes) {
        check(invoke(() -> (int) cuMemcpyHtoD.invokeExact(dst, src, bytes)), "cuMemcpyHtoD_v2", "");
    }

    public void memcpyDtoH(MemorySegment dst, long src, long bytes) {
        check(invoke(() -> (int) cuMemcpyDtoH.invokeExact(dst, src, bytes)), "cuMemcpyDtoH_v2", "");
    }

    /** Asynchronous host-to-device copy; {@code src} should be pinned ({@link #memAllocHost}) and stay untouched until the stream passes it. */
    public void memcpyHtoDAsync(long dst, MemorySegment src, long bytes, MemorySegment stream) {
        check(invoke(() -> (int) cuMemcpyHtoDAsync.invokeExact(dst, src, bytes, stream)), "cuMemcpyHtoDAsync_v2", "");
    }

    public void memcpyDtoDAsync(long dst, long src, long bytes, MemorySegment stream) {
        check(invoke(() -> (int) cuMemcpyDtoDAsync.invokeExact(dst, src, bytes, stream)), "cuMemcpyDtoDAsync_v2", "");
    }

    /** Whether {@code cuMemcpyBatchAsync} exists in this driver (CUDA 12.8 and newer). */
    public boolean hasBatchCopy() {
        return cuMemcpyBatchAsync != null;
    }

    /**
     * One {@code cuMemcpyBatchAsync} of {@code count} device-to-device copies: {@code dsts}, {@code srcs} and
     * {@code sizes} are host arrays of {@code count} 8-byte values; every copy is ordered with the stream and hinted
     * as device memory of {@code deviceOrdinal}.
     */
    public void memcpyBatchAsync(MemorySegment dsts, MemorySegment srcs, MemorySegment sizes, long count, int deviceOrdinal,
                                 MemorySegment stream) {
        if (cuMemcpyBatchAsync == null) {
            throw new CudaUnavailableException("cuMemcpyBatchAsync is not in " + library + " (it needs a CUDA 12.8 or newer driver)");
        }
        try (Arena a = Arena.ofConfined()) {
            MemorySegment attrs = a.allocate(MEMCPY_ATTRIBUTES);
            attrs.set(JAVA_INT, 0, CU_MEMCPY_SRC_ACCESS_ORDER_STREAM);
            attrs.set(JAVA_INT, 4, CU_MEM_LOCATION_TYPE_DEVICE);
            attrs.set(JAVA_INT, 8, deviceOrdinal);
            attrs.set(JAVA_INT, 12, CU_MEM_LOCATION_TYPE_DEVICE);
            attrs.set(JAVA_INT, 16, deviceOrdinal);
            attrs.set(JAVA_INT, 20, 0);
            MemorySegment idx = a.allocate(JAVA_LONG);
            idx.set(JAVA_LONG, 0, 0L);
            if (batchHasFailIdx) {
                MemorySegment fail = a.allocate(JAVA_LONG);
                fail.set(JAVA_LONG, 0, -1L);
                int rc = invoke(() -> (int) cuMemcpyBatchAsync.invokeExact(dsts, srcs, sizes, count, attrs, idx, 1L, fail, stream));
                check(rc, "cuMemcpyBatchAsync", count + " copies, failed at index " + fail.get(JAVA_LONG, 0));
            } else {
                check(invoke(() -> (int) cuMemcpyBatchAsync.invokeExact(dsts, srcs, sizes, count, attrs, idx, 1L, stream)),
                        "cuMemcpyBatchAsync_v2", count + " copies");
            }
        }
    }

    // ---- IPC ------------------------------------------------------------------------------------------------------

    /** The IPC handle (64 bytes) of an allocation made by this process with {@link #memAlloc}. */
    public byte[] ipcGetMemHandle(long dptr) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment h = a.allocate(IPC_HANDLE);
            check(invoke(() -> (int) cuIpcGetMemHandle.invokeExact(h, dptr)), "cuIpcGetMemHandle", "");
            return h.toArray(JAVA_BYTE);
        }
    }

    /**
     * Maps another process's allocation into this one (in the current context; peer access to the owner's device is
     * enabled lazily). Fails for a handle exported by this very process.
     */
    public long ipcOpenMemHandle(byte[] handle) {
        if (handle == null || handle.length != IPC_HANDLE_BYTES) {
            throw new IllegalArgumentException("an IPC handle is " + IPC_HANDLE_BYTES + " bytes, got " + (handle == null ? "none" : handle.length));
        }
        try (Arena a = Arena.ofConfined()) {
            MemorySegment h = a.allocate(IPC_HANDLE);
            h.copyFrom(MemorySegment.ofArray(handle));
            MemorySegment v = a.allocate(JAVA_LONG);
            check(invoke(() -> (int) cuIpcOpenMemHandle.invokeExact(v, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)), "cuIpcOpenMemHandle_v2", "");
            return v.get(JAVA_LONG, 0);
        }
    }

    public void ipcCloseMemHandle(long dptr) {
        check(invoke(() -> (int) cuIpcCloseMemHandle.invokeExact(dptr)), "cuIpcCloseMemHandle", "");
    }

    // ---- streams and events ---------------------------------------------------------------------------------------

    /** A stream that does not synchronize with the legacy default stream. */
    public MemorySegment streamCreate() {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(ADDRESS);
            check(invoke(() -> (int) cuStreamCreate.invokeExact(v, CU_STREAM_NON_BLOCKING)), "cuStreamCreate", "");
            return v.get(ADDRESS, 0);
        }
    }

    public void streamDestroy(MemorySegment stream) {
        check(invoke(() -> (int) cuStreamDestroy.invokeExact(stream)), "cuStreamDestroy_v2", "");
    }

    public void streamSynchronize(MemorySegment stream) {
        check(invoke(() -> (int) cuStreamSynchronize.invokeExact(stream)), "cuStreamSynchronize", "");
    }

    /** An event; {@code timing} false makes record and wait cheaper. */
    public MemorySegment eventCreate(boolean timing) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(ADDRESS);
            check(invoke(() -> (int) cuEventCreate.invokeExact(v, timing ? 0 : CU_EVENT_DISABLE_TIMING)), "cuEventCreate", "");
            return v.get(ADDRESS, 0);
        }
    }

    public void eventDestroy(MemorySegment event) {
        check(invoke(() -> (int) cuEventDestroy.invokeExact(event)), "cuEventDestroy_v2", "");
    }

    public void eventRecord(MemorySegment event, MemorySegment stream) {
        check(invoke(() -> (int) cuEventRecord.invokeExact(event, stream)), "cuEventRecord", "");
    }

    /** Waits until the work before the event's last record completed; a kernel fault surfaces here. */
    public void eventSynchronize(MemorySegment event) {
        check(invoke(() -> (int) cuEventSynchronize.invokeExact(event)), "cuEventSynchronize", "");
    }

    /** True when the event completed, false when not yet; errors (a faulted kernel) throw. */
    public boolean eventQuery(MemorySegment event) {
        int rc = invoke(() -> (int) cuEventQuery.invokeExact(event));
        if (rc == CudaException.NOT_READY) {
            return false;
        }
        check(rc, "cuEventQuery", "");
        return true;
    }

    /** Milliseconds between two completed timing events. */
    public float eventElapsedMillis(MemorySegment start, MemorySegment end) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(JAVA_FLOAT);
            check(invoke(() -> (int) cuEventElapsedTime.invokeExact(v, start, end)), "cuEventElapsedTime", "");
            return v.get(JAVA_FLOAT, 0);
        }
    }

    // ---- modules and kernels --------------------------------------------------------------------------------------

    /** Loads a module from a NUL-terminated PTX text or a cubin/fatbin image (the driver JIT-compiles PTX). */
    public MemorySegment moduleLoadData(MemorySegment image) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(ADDRESS);
            check(invoke(() -> (int) cuModuleLoadData.invokeExact(v, image)), "cuModuleLoadData", "");
            return v.get(ADDRESS, 0);
        }
    }

    public void moduleUnload(MemorySegment module) {
        check(invoke(() -> (int) cuModuleUnload.invokeExact(module)), "cuModuleUnload", "");
    }

    public MemorySegment moduleGetFunction(MemorySegment module, String name) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(ADDRESS);
            MemorySegment n = a.allocateFrom(name);
            check(invoke(() -> (int) cuModuleGetFunction.invokeExact(v, module, n)), "cuModuleGetFunction", name);
            return v.get(ADDRESS, 0);
        }
    }

    public int functionAttribute(MemorySegment function, int attribute) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(JAVA_INT);
            check(invoke(() -> (int) cuFuncGetAttribute.invokeExact(v, attribute, function)), "cuFuncGetAttribute", "attribute " + attribute);
            return v.get(JAVA_INT, 0);
        }
    }

    /** Resident blocks per multiprocessor for a block size (no dynamic shared memory). */
    public int maxActiveBlocksPerMultiprocessor(MemorySegment function, int blockSize) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment v = a.allocate(JAVA_INT);
            check(invoke(() -> (int) cuOccupancyMaxActiveBlocksPerMultiprocessor.invokeExact(v, function, blockSize, 0L)),
                    "cuOccupancyMaxActiveBlocksPerMultiprocessor", "");
            return v.get(JAVA_INT, 0);
        }
    }

    /**
     * Launches a 1-D grid. {@code params} is the {@code void**} array of pointers to each argument value
     * ({@link KernelArgs} builds it).
     */
    public void launchKernel(MemorySegment function, int gridX, int blockX, int sharedBytes, MemorySegment stream, MemorySegment params,
                             String name) {
        check(invoke(() -> (int) cuLaunchKernel.invokeExact(function, gridX, 1, 1, blockX, 1, 1, sharedBytes, stream, params, MemorySegment.NULL)),
                "cuLaunchKernel", name + " <<<" + gridX + ", " + blockX + ">>>");
    }

    // ---- plumbing -------------------------------------------------------------------------------------------------

    @FunctionalInterface
    private interface Call {
        int run() throws Throwable;
    }

    /** Runs a downcall; the handles are typed exactly, so only an error in the JVM itself can come out of it. */
    private static int invoke(Call c) {
        try {
            return c.run();
        } catch (RuntimeException | Error e) {
            throw e;
        } catch (Throwable t) {
            throw new IllegalStateException("native call failed: " + t, t);
        }
    }

    @Override
    public String toString() {
        return "CudaDriver[" + library + "]";
    }
}
