package io.orbitkv.pd.bench.gpu;

import io.orbitkv.pd.gpu.CudaKernels;
import io.orbitkv.pd.gpu.KernelImage;
import io.orbitkv.pd.gpu.RunTable;
import io.orbitkv.pd.gpu.cuda.CudaDevice;
import io.orbitkv.pd.gpu.cuda.CudaDriver;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/** Helper kernels of the suite on one device: random fill and an independent byte-for-byte comparison of runs. */
final class DeviceOps implements AutoCloseable {

    private final CudaDevice device;
    private final CudaDriver driver;
    private final CudaKernels kernels;
    private final MemorySegment fill;
    private final MemorySegment compare;
    private final long counter;
    private long table;
    private long tableBytes;

    DeviceOps(CudaDevice device, CudaKernels kernels) {
        this.device = device;
        this.driver = device.driver();
        this.kernels = kernels;
        this.fill = kernels.function(KernelImage.FILL_RANDOM);
        this.compare = kernels.function(KernelImage.COMPARE_RUNS);
        this.counter = driver.memAlloc(8);
    }

    /** Launches a kernel whose parameters are all 64-bit values. */
    void launch(MemorySegment fn, int grid, int block, MemorySegment stream, String name, long... args) {
        try (Arena a = Arena.ofConfined()) {
            MemorySegment params = a.allocate(ValueLayout.ADDRESS, args.length);
            for (int i = 0; i < args.length; i++) {
                MemorySegment v = a.allocate(ValueLayout.JAVA_LONG);
                v.set(ValueLayout.JAVA_LONG, 0, args[i]);
                params.setAtIndex(ValueLayout.ADDRESS, i, v);
            }
            driver.launchKernel(fn, grid, block, 0, stream, params, name);
        }
    }

    /** Fills {@code bytes} (a multiple of 8) at {@code p} with random-looking words from {@code seed}. */
    void fillRandom(long p, long bytes, long seed, MemorySegment stream) {
        launch(fill, device.multiprocessors() * 8, 256, stream, KernelImage.FILL_RANDOM, p, bytes / 8, seed);
    }

    /** Bytes in which the destinations of {@code spans} differ from their sources (synchronizes the stream). */
    long mismatches(RunTable spans, MemorySegment stream) {
        long need = Math.max(24, spans.encodedBytes());
        if (tableBytes < need) {
            if (table != 0) {
                driver.streamSynchronize(stream);
                driver.memFree(table);
            }
            table = driver.memAlloc(need);
            tableBytes = need;
        }
        try (Arena a = Arena.ofConfined()) {
            MemorySegment host = a.allocate(need);
            spans.writeTo(host);
            // stream-ordered: the legacy-stream variants would not be ordered with this non-blocking stream
            driver.memcpyHtoDAsync(table, host, spans.encodedBytes(), stream);
            driver.memsetD8Async(counter, (byte) 0, 8, stream);
            launch(compare, Math.min(spans.size(), 65_535), 256, stream, KernelImage.COMPARE_RUNS, table, spans.size(), counter);
            driver.streamSynchronize(stream);
            MemorySegment out = a.allocate(ValueLayout.JAVA_LONG);
            driver.memcpyDtoH(out, counter, 8);
            return out.get(ValueLayout.JAVA_LONG, 0);
        }
    }

    CudaKernels kernels() {
        return kernels;
    }

    @Override
    public void close() {
        device.bind();
        if (table != 0) {
            driver.memFree(table);
        }
        driver.memFree(counter);
    }
}
