package io.orbitkv.pd.gpu;

import io.orbitkv.pd.gpu.cuda.CudaDevice;
import io.orbitkv.pd.gpu.cuda.CudaDriver;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.Objects;

/**
 * Runs {@link RunTable}s on one GPU, on a stream of its own.
 *
 * <ul>
 *   <li>{@link Mode#KERNEL}: the table is cut into chunks, written into pinned host memory, uploaded with one
 *       asynchronous copy and executed by one launch of a {@link CopyKernel} (grid: one block per chunk, or a
 *       persistent grid of as many blocks as fit on the GPU at once).</li>
 *   <li>{@link Mode#BATCH}: one {@code cuMemcpyBatchAsync} per {@code maxBatch} entries.</li>
 *   <li>{@link Mode#PER_COPY}: one {@code cuMemcpyDtoDAsync} per entry: the naive baseline, ~5 µs per call.</li>
 * </ul>
 *
 * <p>{@link #copy} waits for an event recorded after the work, so it returns only when every byte landed. One
 * thread uses an engine, with the device's context current; the staging buffers are reused from call to call.
 */
public final class CudaCopyEngine implements CopyEngine {

    /** How a table is executed. */
    public enum Mode { KERNEL, BATCH, PER_COPY }

    /** Kernel grid size: one block per chunk, or only as many blocks as are resident at once (each loops over chunks). */
    public enum Grid { PER_CHUNK, PERSISTENT }

    private final CudaDevice device;
    private final CudaDriver driver;
    private final CudaKernels kernels;
    private final Mode mode;
    private final CopyKernel kernel;
    private final Grid grid;
    private final long chunkBytes;
    private final int maxBatch;
    private final MemorySegment function;
    private final int persistentBlocks;
    private final MemorySegment stream;
    private final MemorySegment done;
    private final Arena arena = Arena.ofShared();
    private final MemorySegment params;
    private final MemorySegment argTable;
    private final MemorySegment argCount;
    private MemorySegment staging;
    private long deviceTable;
    private long deviceTableBytes;
    private boolean inFlight;
    private final long[] steps = new long[2];
    private boolean closed;

    private CudaCopyEngine(CudaKernels kernels, Mode mode, CopyKernel kernel, Grid grid, long chunkBytes, int maxBatch) {
        this.device = kernels.device();
        this.driver = device.driver();
        this.kernels = kernels;
        this.mode = Objects.requireNonNull(mode, "mode");
        this.kernel = Objects.requireNonNull(kernel, "kernel");
        this.grid = Objects.requireNonNull(grid, "grid");
        if (chunkBytes < 16 || chunkBytes > RunTable.MAX_CHUNK) {
            throw new IllegalArgumentException("transfer.cuda.chunk-bytes: must be 16.." + RunTable.MAX_CHUNK + ", got " + chunkBytes);
        }
        if (maxBatch < 1) {
            throw new IllegalArgumentException("transfer.cuda.max-batch: must be >= 1, got " + maxBatch);
        }
        this.chunkBytes = chunkBytes;
        this.maxBatch = maxBatch;
        device.bind();
        if (mode == Mode.BATCH && !driver.hasBatchCopy()) {
            throw new io.orbitkv.pd.gpu.cuda.CudaUnavailableException("transfer.cuda.mode=batch: cuMemcpyBatchAsync is not in this driver "
                    + "(CUDA 12.8 or newer needed); use mode=kernel");
        }
        this.function = kernels.function(kernel);
        this.persistentBlocks = device.multiprocessors() * Math.max(1, driver.maxActiveBlocksPerMultiprocessor(function, kernel.threads()));
        this.stream = driver.streamCreate();
        this.done = driver.eventCreate(false);
        this.params = arena.allocate(ValueLayout.ADDRESS, 2);
        this.argTable = arena.allocate(ValueLayout.JAVA_LONG);
        this.argCount = arena.allocate(ValueLayout.JAVA_LONG);
        params.setAtIndex(ValueLayout.ADDRESS, 0, argTable);
        params.setAtIndex(ValueLayout.ADDRESS, 1, argCount);
    }

    /**
     * An engine on {@code kernels}' device; call on the thread that will use it.
     *
     * @param chunkBytes largest piece of a run one block copies (kernel mode)
     * @param maxBatch   most copies in one {@code cuMemcpyBatchAsync} (batch mode)
     */
    public static CudaCopyEngine create(CudaKernels kernels, Mode mode, CopyKernel kernel, Grid grid, long chunkBytes, int maxBatch) {
        return new CudaCopyEngine(kernels, mode, kernel, grid, chunkBytes, maxBatch);
    }

    /** A table ready to run: chunked and (kernel mode) uploaded. Valid until the next {@link #stage}. */
    public record Staged(RunTable table, int gridBlocks) { }

    /** Prepares {@code spans}: for the kernel, chunks them and enqueues the upload of the encoded table on the stream. */
    public Staged stage(RunTable spans) {
        if (closed) {
            throw new IllegalStateException("copy engine is closed");
        }
        if (inFlight) {
            // the staging buffer and the device table may still be read by earlier work
            driver.streamSynchronize(stream);
            inFlight = false;
        }
        if (mode != Mode.KERNEL) {
            return new Staged(spans, 0);
        }
        RunTable t = spans.chunked(chunkFor(spans.bytes(), chunkBytes, WAVES * persistentBlocks));
        long need = t.encodedBytes();
        ensureStaging(need);
        if (deviceTableBytes < need) {
            if (deviceTable != 0) {
                driver.memFree(deviceTable);
                deviceTable = 0;
            }
            long cap = Math.max(64 * 1024, Long.highestOneBit(need - 1) << 1);
            deviceTable = driver.memAlloc(cap);
            deviceTableBytes = cap;
        }
        t.writeTo(staging);
        driver.memcpyHtoDAsync(deviceTable, staging, need, stream);
        inFlight = true;
        int blocks = grid == Grid.PER_CHUNK ? t.size() : Math.min(t.size(), persistentBlocks);
        return new Staged(t, blocks);
    }

    /** Waves of chunks a large order is cut into (see {@link #chunkFor}). */
    static final int WAVES = 4;

    /**
     * The chunk a table of {@code bytes} is cut into: {@code minChunk}, or larger so that the table has about
     * {@code entries} entries (the copy engine asks for {@link #WAVES} waves of the blocks the GPU runs at once). The host
     * writes and uploads every entry before the kernel can start, so the number of entries bounds that work whatever the
     * size of the order (a GiB in 64 KiB chunks is 16,384 entries; in four waves ~4,000), and a few waves keep the blocks
     * balanced. Measured in situ (docs/gpu.md): staging took 54–74 µs per push once warm, and the GPU copied a GiB in
     * 717 µs with one wave of 1 MiB chunks and 720 µs with four: the chunk size did not move the copy. Small orders keep
     * {@code minChunk}.
     */
    static long chunkFor(long bytes, long minChunk, int entries) {
        long wave = (bytes + Math.max(1, entries) - 1) / Math.max(1, entries);
        if (wave <= minChunk) {
            return minChunk;
        }
        long chunk = (wave + minChunk - 1) / minChunk * minChunk; // a multiple of minChunk (16-byte aligned entries)
        return Math.min(chunk, RunTable.MAX_CHUNK);
    }

    /** Enqueues the copies of a staged table on the stream (no wait). */
    public void enqueue(Staged s) {
        RunTable t = s.table();
        if (t.size() == 0) {
            return;
        }
        switch (mode) {
            case KERNEL -> {
                argTable.set(ValueLayout.JAVA_LONG, 0, deviceTable);
                argCount.set(ValueLayout.JAVA_LONG, 0, t.size());
                driver.launchKernel(function, s.gridBlocks(), kernel.threads(), 0, stream, params, kernel.entryName());
            }
            case BATCH -> {
                for (int from = 0; from < t.size(); from += maxBatch) {
                    int n = Math.min(maxBatch, t.size() - from);
                    try (Arena a = Arena.ofConfined()) {
                        MemorySegment dsts = a.allocate(ValueLayout.JAVA_LONG, n);
                        MemorySegment srcs = a.allocate(ValueLayout.JAVA_LONG, n);
                        MemorySegment sizes = a.allocate(ValueLayout.JAVA_LONG, n);
                        t.writeBatchArrays(from, n, dsts, srcs, sizes);
                        driver.memcpyBatchAsync(dsts, srcs, sizes, n, device.ordinal(), stream);
                    }
                }
            }
            case PER_COPY -> {
                for (int i = 0; i < t.size(); i++) {
                    driver.memcpyDtoDAsync(t.dest(i), t.source(i), t.length(i), stream);
                }
            }
        }
        inFlight = true;
    }

    @Override
    public void copy(RunTable table) {
        Staged s = stage(table);
        steps[0] = io.orbitkv.pd.tracing.Marks.nowMicros();
        enqueue(s);
        driver.eventRecord(done, stream);
        steps[1] = io.orbitkv.pd.tracing.Marks.nowMicros();
        driver.eventSynchronize(done);
        inFlight = false;
    }

    @Override
    public long[] lastSteps() {
        return steps.clone();
    }

    /**
     * Runs {@code rounds} copies of a small table (entries of two chunks each, so they are cut) inside a scratch
     * allocation of its own, so that the JIT has compiled the staging and launch path before the first push; at the few
     * pushes a second of a real handoff it may never be. Measured in situ (docs/gpu.md): staging and launch took ~350 µs
     * per push without the warm-up and ~110 µs with it, against a copy of ~500 µs for a GiB.
     */
    public void warmUp(int rounds) {
        int n = 64;
        long len = 2 * chunkBytes;
        long stride = len + 4096; // gaps, so the entries are not merged into one
        long scratch = driver.memAlloc(2 * n * stride);
        try {
            long[] s = new long[n];
            long[] d = new long[n];
            long[] l = new long[n];
            for (int i = 0; i < n; i++) {
                s[i] = scratch + i * stride;
                d[i] = scratch + (n + i) * stride;
                l[i] = len;
            }
            RunTable t = RunTable.of(s, d, l);
            for (int r = 0; r < rounds; r++) {
                copy(t);
            }
        } finally {
            driver.memFree(scratch);
        }
    }

    /** The engine's stream (benchmarks record timing events on it). */
    public MemorySegment stream() {
        return stream;
    }

    /** Blocks of the persistent grid: multiprocessors × resident blocks of the kernel per multiprocessor. */
    public int persistentBlocks() {
        return persistentBlocks;
    }

    public Mode mode() {
        return mode;
    }

    public CopyKernel kernel() {
        return kernel;
    }

    @Override
    public String describe() {
        return switch (mode) {
            case KERNEL -> "kernel " + kernel.shortName() + ", " + chunkBytes / 1024 + " KiB chunks, "
                    + (grid == Grid.PER_CHUNK ? "one block per chunk" : "persistent grid of " + persistentBlocks);
            case BATCH -> "cuMemcpyBatchAsync, up to " + maxBatch + " copies per call";
            case PER_COPY -> "one cuMemcpyDtoDAsync per run";
        };
    }

    private void ensureStaging(long need) {
        if (staging == null || staging.byteSize() < need) {
            if (staging != null) {
                driver.memFreeHost(staging);
                staging = null;
            }
            long cap = Math.max(64 * 1024, Long.highestOneBit(need - 1) << 1);
            staging = driver.memAllocHost(cap);
        }
    }

    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        device.bind();
        try {
            driver.streamSynchronize(stream);
        } finally {
            if (deviceTable != 0) {
                driver.memFree(deviceTable);
            }
            if (staging != null) {
                driver.memFreeHost(staging);
            }
            driver.eventDestroy(done);
            driver.streamDestroy(stream);
            arena.close();
        }
    }

    @Override
    public String toString() {
        return "CudaCopyEngine[" + device.location() + ", " + describe() + "]";
    }
}
