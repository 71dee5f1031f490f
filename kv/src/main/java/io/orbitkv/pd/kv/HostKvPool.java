package io.orbitkv.pd.kv;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicBoolean;

/**
 * A KV pool in off-heap host memory, through the FFM API: either anonymous memory (zeroed) or a shared file
 * mapping, so that another process (the engine, or a test standing in for it) sees the very same pages.
 *
 * <p>File layout: region {@code r} starts at byte {@code r × stride}, where {@code stride} is the region size
 * rounded up to 4 KiB; the file is {@code regionCount × stride} bytes. {@link #fileBytes(KvGeometry)} says how
 * big that is. A new or empty file is sized by the pool; an existing file of another size is refused (it belongs
 * to another layout).
 *
 * <p>Memory belongs to a shared arena owned by the pool; {@link #close()} frees it once, and must come after
 * every transport that borrowed views has stopped.
 */
public final class HostKvPool implements KvPool {

    /** Regions start on page boundaries (and so do pages whose size is a multiple of 4 KiB). */
    public static final long ALIGNMENT = 4096;

    private final KvGeometry geometry;
    private final Arena arena;
    private final MemorySegment[] regions;
    private final Path file;
    private final AtomicBoolean closed = new AtomicBoolean();

    private HostKvPool(KvGeometry geometry, Arena arena, MemorySegment[] regions, Path file) {
        this.geometry = geometry;
        this.arena = arena;
        this.regions = regions;
        this.file = file;
    }

    /** Anonymous off-heap memory, zero-filled. */
    public static HostKvPool allocate(KvGeometry geometry) {
        Arena arena = Arena.ofShared();
        try {
            MemorySegment[] regions = new MemorySegment[geometry.regionCount()];
            for (int r = 0; r < regions.length; r++) {
                regions[r] = arena.allocate(geometry.regionBytes(), ALIGNMENT);
            }
            return new HostKvPool(geometry, arena, regions, null);
        } catch (OutOfMemoryError | RuntimeException e) {
            arena.close();
            throw new IllegalStateException("cannot allocate a KV pool of " + geometry.poolBytes() + " bytes: " + e.getMessage(), e);
        }
    }

    /** Bytes of the shared file of a pool of this geometry. */
    public static long fileBytes(KvGeometry geometry) {
        return stride(geometry) * geometry.regionCount();
    }

    private static long stride(KvGeometry g) {
        return (g.regionBytes() + ALIGNMENT - 1) / ALIGNMENT * ALIGNMENT;
    }

    /**
     * Maps {@code file} (created if missing) read-write and shared. Use a tmpfs path ({@code /dev/shm/...}) for a
     * pool that is memory, not disk.
     */
    public static HostKvPool mapFile(KvGeometry geometry, Path file) {
        long size = fileBytes(geometry);
        Arena arena = Arena.ofShared();
        try (FileChannel ch = FileChannel.open(file, StandardOpenOption.CREATE, StandardOpenOption.READ, StandardOpenOption.WRITE)) {
            long existing = ch.size();
            if (existing != 0 && existing != size) {
                throw new IllegalArgumentException("worker.pool.path: " + file + " is " + existing + " bytes but this layout needs " + size
                        + " (" + geometry.regionCount() + " regions of " + geometry.regionBytes() + " bytes, 4 KiB aligned)");
            }
            MemorySegment all = ch.map(FileChannel.MapMode.READ_WRITE, 0, size, arena);
            // Fault every page in now: the first transfer into a fresh mapping would otherwise take one page fault
            // per 4 KiB on the data path.
            all.load();
            MemorySegment[] regions = new MemorySegment[geometry.regionCount()];
            long stride = stride(geometry);
            for (int r = 0; r < regions.length; r++) {
                regions[r] = all.asSlice(r * stride, geometry.regionBytes());
            }
            return new HostKvPool(geometry, arena, regions, file.toAbsolutePath());
        } catch (IOException e) {
            arena.close();
            throw new UncheckedIOException("worker.pool.path: cannot map " + file + ": " + e.getMessage(), e);
        } catch (RuntimeException e) {
            arena.close();
            throw e;
        }
    }

    /** Creates an empty file of the right size for {@code geometry} if none exists (for a process that fills it first). */
    public static void ensureFile(KvGeometry geometry, Path file) throws IOException {
        if (!Files.exists(file)) {
            try (FileChannel ch = FileChannel.open(file, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE)) {
                ch.write(java.nio.ByteBuffer.allocate(1), fileBytes(geometry) - 1);
            }
        }
    }

    @Override
    public KvGeometry geometry() {
        return geometry;
    }

    @Override
    public String location() {
        return "host";
    }

    @Override
    public long baseAddress(int region) {
        return regions[region].address();
    }

    @Override
    public Optional<MemorySegment> hostRegion(int region) {
        return Optional.of(regions[region]);
    }

    /** The region's host memory (never empty for this pool). */
    public MemorySegment region(int region) {
        return regions[region];
    }

    /** The shared file behind the pool, or null for anonymous memory. */
    public Path file() {
        return file;
    }

    @Override
    public void close() {
        if (closed.compareAndSet(false, true)) {
            arena.close();
        }
    }

    @Override
    public String toString() {
        return "HostKvPool[" + geometry.regionCount() + " regions × " + geometry.numBlocks() + " blocks × " + geometry.pageBytes() + " B"
                + (file == null ? "" : ", file " + file) + "]";
    }
}
