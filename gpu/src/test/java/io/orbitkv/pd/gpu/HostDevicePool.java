package io.orbitkv.pd.gpu;

import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvPool;
import java.lang.foreign.MemorySegment;
import java.util.Optional;

/**
 * A stand-in for a device pool on a machine without a GPU: host memory that calls itself {@code cuda:0} and, like
 * device memory, offers no host view. Tests reach the bytes through {@link #host()}.
 */
final class HostDevicePool implements KvPool {

    private final HostKvPool host;

    HostDevicePool(KvGeometry g) {
        this.host = HostKvPool.allocate(g);
    }

    HostKvPool host() {
        return host;
    }

    @Override
    public KvGeometry geometry() {
        return host.geometry();
    }

    @Override
    public String location() {
        return "cuda:0";
    }

    @Override
    public long baseAddress(int region) {
        return host.baseAddress(region);
    }

    @Override
    public Optional<MemorySegment> hostRegion(int region) {
        return Optional.empty();
    }

    @Override
    public void close() {
        host.close();
    }
}
