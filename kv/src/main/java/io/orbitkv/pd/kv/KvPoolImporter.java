package io.orbitkv.pd.kv;

import io.orbitkv.pd.events.MemoryRegion;
import java.util.List;
import java.util.Optional;
import java.util.ServiceLoader;

/**
 * Maps another process's KV pool into this one from its description (an engine registering with its worker names
 * its pool this way): {@code cuda_ipc} in {@code orbitkv-gpu} opens device memory by CUDA IPC handle. Found by kind
 * through {@link ServiceLoader}, so the worker offers it without depending on the module.
 */
public interface KvPoolImporter {

    /** The pool kind this importer maps, e.g. {@code cuda_ipc}. */
    String kind();

    /**
     * Maps the pool.
     *
     * @param device  the device the regions live on (as this process numbers devices)
     * @param regions one per region, layer-major, each with the handle that exports it
     * @throws IllegalArgumentException naming the region or field that does not fit {@code geometry}
     * @throws IllegalStateException    when this machine cannot map it (no driver, no such device), with the reason
     */
    KvPool open(String engineId, KvGeometry geometry, int device, List<MemoryRegion> regions);

    /** The importer of {@code kind} on the class path, if any. */
    static Optional<KvPoolImporter> find(String kind) {
        return ServiceLoader.load(KvPoolImporter.class).stream().map(ServiceLoader.Provider::get).filter(p -> p.kind().equals(kind)).findFirst();
    }
}
