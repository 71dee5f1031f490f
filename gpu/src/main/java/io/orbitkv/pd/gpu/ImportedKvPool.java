package io.orbitkv.pd.gpu;

import io.orbitkv.pd.events.MemoryRegion;
import io.orbitkv.pd.gpu.cuda.CudaDevice;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvPool;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * Another process's {@link DeviceKvPool}, mapped into this one through CUDA IPC from the regions of its engine
 * registration: what the transfer worker on a node holds for every engine it serves. Base addresses are this
 * process's mappings. {@link #close()} unmaps; the engine's memory itself lives on until the engine frees it.
 */
public final class ImportedKvPool implements KvPool {

    private final CudaDevice device;
    private final String engineId;
    private final KvGeometry geometry;
    private final String location;
    private final long[] regions;
    private final AtomicBoolean closed = new AtomicBoolean();

    private ImportedKvPool(CudaDevice device, String engineId, KvGeometry geometry, String location, long[] regions) {
        this.device = device;
        this.engineId = engineId;
        this.geometry = geometry;
        this.location = location;
        this.regions = regions;
    }

    /**
     * Maps the regions of engine {@code engineId}'s registration into {@code device}'s context (the device that runs
     * the copies; another GPU's memory becomes reachable through peer access, enabled lazily by the driver).
     *
     * @throws IllegalArgumentException naming the region when the registration does not describe this geometry's
     *                                  regions in order, or a region has no IPC handle
     */
    public static ImportedKvPool open(CudaDevice device, String engineId, KvGeometry geometry, List<MemoryRegion> registered) {
        String location = validate(engineId, geometry, registered);
        device.bind();
        String unreachable = peerProblem(engineId, device.ordinal(), ordinalOf(location), device.driver().deviceCount(),
                (a, b) -> device.driver().canAccessPeer(a, b));
        if (unreachable != null) {
            throw new IllegalStateException(unreachable);
        }
        long[] regions = new long[geometry.regionCount()];
        try {
            for (int r = 0; r < regions.length; r++) {
                ByteBuffer h = registered.get(r).getIpcHandle().duplicate();
                byte[] handle = new byte[h.remaining()];
                h.get(handle);
                regions[r] = device.driver().ipcOpenMemHandle(handle);
            }
        } catch (RuntimeException e) {
            for (long p : regions) {
                if (p != 0) {
                    device.driver().ipcCloseMemHandle(p);
                }
            }
            throw new IllegalStateException("cannot map the KV pool of engine " + engineId + " through CUDA IPC: " + e.getMessage(), e);
        }
        return new ImportedKvPool(device, engineId, geometry, location, regions);
    }

    /** The device ordinal of a {@code cuda:<n>} location. */
    static int ordinalOf(String location) {
        try {
            return Integer.parseInt(location.substring("cuda:".length()));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("location '" + location + "': not cuda:<device ordinal>");
        }
    }

    /**
     * Why the worker's GPU {@code local} cannot copy into or out of a pool on GPU {@code pool}, or null when it can: the
     * same GPU, or another one it has peer access to (NVLink or PCIe P2P). Copies between two GPUs read one GPU's memory
     * and write the other's in one kernel; without peer access that kernel cannot run, so the pairing is refused at
     * registration with the reason, never at the first push.
     */
    static String peerProblem(String engineId, int local, int pool, int deviceCount, java.util.function.BiPredicate<Integer, Integer> canAccessPeer) {
        if (pool == local) {
            return null;
        }
        String where = "the KV pool of engine " + engineId + " is on cuda:" + pool + " and this worker copies on cuda:" + local;
        if (pool < 0 || pool >= deviceCount) {
            return where + ", but this process sees " + deviceCount + " GPU(s): cuda:" + pool + " is not one of them (the engine and its worker"
                    + " must see the same GPUs: check CUDA_VISIBLE_DEVICES)";
        }
        if (!canAccessPeer.test(local, pool)) {
            return where + ", and the two GPUs cannot reach each other (cuDeviceCanAccessPeer says no: no NVLink or PCIe peer path):"
                    + " put the engine and the worker's transfer.cuda.device on one GPU, or on GPUs with peer access";
        }
        return null;
    }

    /** Null-free check of a registration's regions against the layout; returns their common location. */
    static String validate(String engineId, KvGeometry g, List<MemoryRegion> registered) {
        String who = "engine " + engineId + " registration";
        if (registered == null || registered.size() != g.regionCount()) {
            throw new IllegalArgumentException(who + ": regions: " + g.regionCount() + " expected (" + g.numLayers() + " layers × "
                    + g.partsPerLayer() + " parts), got " + (registered == null ? 0 : registered.size()));
        }
        String location = null;
        for (int r = 0; r < registered.size(); r++) {
            MemoryRegion m = registered.get(r);
            String field = who + ": regions[" + r + "]";
            if (m.getLayer() != g.layerOf(r) || !g.partName(r).equals(m.getPart())) {
                throw new IllegalArgumentException(field + ": expected " + g.describeRegion(r) + ", got layer " + m.getLayer() + " " + m.getPart());
            }
            if (m.getLengthBytes() < g.regionBytes()) {
                throw new IllegalArgumentException(field + ".length_bytes: " + m.getLengthBytes() + " is less than the layout's "
                        + g.regionBytes() + " bytes per region");
            }
            if (m.getLocation() == null || !m.getLocation().startsWith("cuda:")) {
                throw new IllegalArgumentException(field + ".location: '" + m.getLocation() + "' is not device memory (cuda:<n>)");
            }
            if (location == null) {
                location = m.getLocation();
            } else if (!location.equals(m.getLocation())) {
                throw new IllegalArgumentException(field + ".location: " + m.getLocation() + ", but regions[0] is on " + location);
            }
            if (m.getIpcHandle() == null || m.getIpcHandle().remaining() != io.orbitkv.pd.gpu.cuda.CudaDriver.IPC_HANDLE_BYTES) {
                throw new IllegalArgumentException(field + ".ipc_handle: " + (m.getIpcHandle() == null ? "missing" : m.getIpcHandle().remaining() + " bytes")
                        + " (the engine must export its pool for CUDA IPC: 64-byte handles)");
            }
        }
        return location;
    }

    public String engineId() {
        return engineId;
    }

    public CudaDevice device() {
        return device;
    }

    @Override
    public KvGeometry geometry() {
        return geometry;
    }

    /** The owner's location, as registered. */
    @Override
    public String location() {
        return location;
    }

    @Override
    public long baseAddress(int region) {
        return regions[region];
    }

    @Override
    public Optional<MemorySegment> hostRegion(int region) {
        return Optional.empty();
    }

    @Override
    public void close() {
        if (closed.compareAndSet(false, true)) {
            device.bind();
            for (long p : regions) {
                device.driver().ipcCloseMemHandle(p);
            }
        }
    }

    @Override
    public String toString() {
        return "ImportedKvPool[" + engineId + " on " + location + ", " + geometry.regionCount() + " regions × " + geometry.numBlocks() + " blocks]";
    }
}
