package io.orbitkv.pd.gpu;

import io.orbitkv.pd.events.MemoryRegion;
import io.orbitkv.pd.gpu.cuda.CudaDevice;
import io.orbitkv.pd.gpu.cuda.CudaDriver;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvPool;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * An engine's paged KV cache in device memory, owned by the engine process: one {@code cuMemAlloc} per region
 * (per layer and part, like one tensor per layer in vLLM), so every region has an IPC handle of its own.
 *
 * <p>{@link #memoryRegions()} is what the engine registers: device pointers as base addresses, {@code cuda:<n>} as
 * location and each region's {@code ipc_handle}, from which the transfer worker on the node maps the same memory
 * ({@link ImportedKvPool}). The pool must stay open while any worker has it imported. No host view.
 */
public final class DeviceKvPool implements KvPool {

    private final CudaDevice device;
    private final KvGeometry geometry;
    private final long[] regions;
    private final AtomicBoolean closed = new AtomicBoolean();
    private volatile List<byte[]> handles;

    private DeviceKvPool(CudaDevice device, KvGeometry geometry, long[] regions) {
        this.device = device;
        this.geometry = geometry;
        this.regions = regions;
    }

    /** Allocates every region on {@code device} (uninitialized memory). */
    public static DeviceKvPool allocate(CudaDevice device, KvGeometry geometry) {
        CudaDriver d = device.driver();
        device.bind();
        long[] regions = new long[geometry.regionCount()];
        try {
            for (int r = 0; r < regions.length; r++) {
                regions[r] = d.memAlloc(geometry.regionBytes());
            }
        } catch (RuntimeException e) {
            for (long p : regions) {
                if (p != 0) {
                    d.memFree(p);
                }
            }
            throw new IllegalStateException("cannot allocate a KV pool of " + geometry.poolBytes() + " bytes on " + device + ": " + e.getMessage(), e);
        }
        return new DeviceKvPool(device, geometry, regions);
    }

    public CudaDevice device() {
        return device;
    }

    @Override
    public KvGeometry geometry() {
        return geometry;
    }

    @Override
    public String location() {
        return device.location();
    }

    @Override
    public long baseAddress(int region) {
        return regions[region];
    }

    @Override
    public Optional<MemorySegment> hostRegion(int region) {
        return Optional.empty();
    }

    /** The region's CUDA IPC handle (64 bytes). */
    public byte[] ipcHandle(int region) {
        return ipcHandles().get(region).clone();
    }

    private List<byte[]> ipcHandles() {
        List<byte[]> h = handles;
        if (h == null) {
            synchronized (this) {
                if (handles == null) {
                    device.bind();
                    List<byte[]> out = new ArrayList<>(regions.length);
                    for (long p : regions) {
                        out.add(device.driver().ipcGetMemHandle(p));
                    }
                    handles = List.copyOf(out);
                }
                h = handles;
            }
        }
        return h;
    }

    /** The registration's regions, each with its IPC handle. */
    @Override
    public List<MemoryRegion> memoryRegions() {
        List<MemoryRegion> plain = KvPool.super.memoryRegions();
        List<byte[]> h = ipcHandles();
        List<MemoryRegion> out = new ArrayList<>(plain.size());
        for (int r = 0; r < plain.size(); r++) {
            out.add(MemoryRegion.newBuilder(plain.get(r)).setIpcHandle(ByteBuffer.wrap(h.get(r).clone())).build());
        }
        return out;
    }

    /** Sets every byte of every region to {@code value}; returns when the device is done. */
    public void fill(byte value) {
        device.bind();
        for (long p : regions) {
            device.driver().memsetD8(p, value, geometry.regionBytes());
        }
        // cuMemsetD8 may return before the device wrote; work on other (non-blocking) streams is not ordered after it
        device.driver().contextSynchronize();
    }

    @Override
    public void close() {
        if (closed.compareAndSet(false, true)) {
            device.bind();
            for (long p : regions) {
                device.driver().memFree(p);
            }
        }
    }

    @Override
    public String toString() {
        return "DeviceKvPool[" + device.location() + ", " + geometry.regionCount() + " regions × " + geometry.numBlocks() + " blocks × "
                + geometry.pageBytes() + " B]";
    }
}
