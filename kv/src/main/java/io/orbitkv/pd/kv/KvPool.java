package io.orbitkv.pd.kv;

import io.orbitkv.pd.events.MemoryRegion;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.Optional;

/**
 * A paged KV pool: one region per layer and part, each {@code num_blocks} pages (see {@link KvGeometry}). The
 * pool owns its memory and frees it on {@link #close()}; transports borrow views of it and must be stopped
 * before the pool is closed.
 *
 * <p>Nothing here assumes the heap or even host memory: a GPU pool (later) reports {@code cuda:<n>} as its
 * location, device pointers as base addresses and no host view. Transports that move bytes through the CPU
 * (like {@code tcp}) ask for {@link #hostRegion} and say clearly when a pool has none.
 */
public interface KvPool extends AutoCloseable {

    KvGeometry geometry();

    /** {@code host}, or {@code cuda:<device ordinal>}: the {@code MemoryRegion.location} of every region. */
    String location();

    /** Address of a region in the owner's address space (a device pointer for GPU pools). */
    long baseAddress(int region);

    /** A host view of the region, if its memory is host-accessible. */
    Optional<MemorySegment> hostRegion(int region);

    /** The host view of one page; fails for pools without host views. */
    default MemorySegment page(int region, int block) {
        KvGeometry g = geometry();
        if (block < 0 || block >= g.numBlocks()) {
            throw new IndexOutOfBoundsException("block " + block + " outside the pool of " + g.numBlocks() + " blocks");
        }
        MemorySegment r = hostRegion(region).orElseThrow(() -> new UnsupportedOperationException(location() + " pool has no host view"));
        return r.asSlice((long) block * g.pageBytes(), g.pageBytes());
    }

    /** The regions as the engine registration announces them ({@code EngineRegistration.regions}). */
    default List<MemoryRegion> memoryRegions() {
        KvGeometry g = geometry();
        List<MemoryRegion> out = new ArrayList<>(g.regionCount());
        for (int r = 0; r < g.regionCount(); r++) {
            out.add(MemoryRegion.newBuilder().setLayer(g.layerOf(r)).setPart(g.partName(r)).setBaseAddress(baseAddress(r))
                    .setLengthBytes(g.regionBytes()).setLocation(location()).build());
        }
        return out;
    }

    /** Frees the memory (idempotent). Views handed out before are invalid afterwards. */
    @Override
    void close();
}
