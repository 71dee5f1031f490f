package io.orbitkv.pd.gpu;

import io.orbitkv.pd.events.MemoryRegion;
import io.orbitkv.pd.gpu.cuda.CudaDevice;
import io.orbitkv.pd.gpu.cuda.CudaDriver;
import io.orbitkv.pd.gpu.cuda.CudaUnavailableException;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvPool;
import io.orbitkv.pd.kv.KvPoolImporter;
import java.lang.foreign.MemorySegment;
import java.util.List;
import java.util.Optional;
import java.util.function.Supplier;

/**
 * {@code cuda_ipc} pools: an engine's device memory, named by one CUDA IPC handle per region, mapped into this process
 * as an {@link ImportedKvPool} (what the worker's engine API does when an engine registers with such a pool). Closing
 * the pool unmaps it and releases the device's primary context.
 */
public final class CudaIpcPoolImporter implements KvPoolImporter {

    public static final String KIND = "cuda_ipc";

    private final Supplier<CudaDriver.Availability> driver;

    public CudaIpcPoolImporter() {
        this(CudaDriver::load);
    }

    public CudaIpcPoolImporter(Supplier<CudaDriver.Availability> driver) {
        this.driver = driver;
    }

    @Override
    public String kind() {
        return KIND;
    }

    @Override
    public KvPool open(String engineId, KvGeometry geometry, int device, List<MemoryRegion> regions) {
        CudaDriver.Availability a = driver.get();
        if (!a.available()) {
            throw new CudaUnavailableException("a cuda_ipc pool cannot be mapped here: " + a.reason());
        }
        CudaDevice dev = CudaDevice.open(a.orElseThrow(), device);
        try {
            return new Owning(ImportedKvPool.open(dev, engineId, geometry, regions), dev);
        } catch (RuntimeException e) {
            dev.close();
            throw e;
        }
    }

    /** The imported pool and the device context it was opened in, closed together. */
    private record Owning(ImportedKvPool pool, CudaDevice device) implements KvPool {
        @Override
        public KvGeometry geometry() {
            return pool.geometry();
        }

        @Override
        public String location() {
            return pool.location();
        }

        @Override
        public long baseAddress(int region) {
            return pool.baseAddress(region);
        }

        @Override
        public Optional<MemorySegment> hostRegion(int region) {
            return pool.hostRegion(region);
        }

        @Override
        public List<MemoryRegion> memoryRegions() {
            return pool.memoryRegions();
        }

        @Override
        public void close() {
            try {
                pool.close();
            } finally {
                device.close();
            }
        }

        @Override
        public String toString() {
            return pool.toString();
        }
    }
}
