package io.orbitkv.pd.gpu;

import io.orbitkv.pd.gpu.cuda.CudaDevice;
import io.orbitkv.pd.gpu.cuda.CudaDriver;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * The copy kernels loaded on one device: the committed PTX ({@link KernelImage}) as a module, JIT-compiled by the
 * driver at load. Functions are looked up once each. Close after every engine that uses it.
 */
public final class CudaKernels implements AutoCloseable {

    private final CudaDevice device;
    private final MemorySegment module;
    private final ConcurrentHashMap<String, MemorySegment> functions = new ConcurrentHashMap<>();
    private final AtomicBoolean closed = new AtomicBoolean();

    private CudaKernels(CudaDevice device, MemorySegment module) {
        this.device = device;
        this.module = module;
    }

    /** Loads the module into {@code device}'s context (made current on the calling thread). */
    public static CudaKernels load(CudaDevice device) {
        device.bind();
        try (Arena a = Arena.ofConfined()) {
            MemorySegment image = a.allocateFrom(java.lang.foreign.ValueLayout.JAVA_BYTE, KernelImage.ptxImage());
            return new CudaKernels(device, device.driver().moduleLoadData(image));
        }
    }

    public CudaDevice device() {
        return device;
    }

    /** The {@code CUfunction} of an entry point. */
    public MemorySegment function(String entry) {
        return functions.computeIfAbsent(entry, e -> device.driver().moduleGetFunction(module, e));
    }

    public MemorySegment function(CopyKernel k) {
        return function(k.entryName());
    }

    /** Registers per thread of a kernel, as the JIT compiled it. */
    public int registers(CopyKernel k) {
        return device.driver().functionAttribute(function(k), CudaDriver.FUNC_ATTR_NUM_REGS);
    }

    @Override
    public void close() {
        if (closed.compareAndSet(false, true)) {
            device.bind();
            device.driver().moduleUnload(module);
        }
    }
}
