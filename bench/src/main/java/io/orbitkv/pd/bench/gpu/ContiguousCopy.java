package io.orbitkv.pd.bench.gpu;

import io.orbitkv.pd.gpu.cuda.CudaDevice;
import io.orbitkv.pd.gpu.cuda.CudaDriver;
import java.lang.foreign.MemorySegment;
import java.util.Arrays;

/**
 * The physical reference of a device-to-device push: one contiguous {@code cuMemcpyDtoDAsync} of the same bytes on
 * the same device, timed on the GPU (events) and end to end from the host (enqueue → stream synchronized), as the
 * worker times its pushes. Used by {@code bench real-model} beside the {@code cuda} pushes of the same run.
 */
public final class ContiguousCopy {

    /** Medians over the measured copies. */
    public record Result(long bytes, double gpuMs, double wallMs) {
        public double gpuGbps() {
            return bytes / gpuMs / 1e6;
        }

        public double wallGbps() {
            return bytes / wallMs / 1e6;
        }
    }

    private ContiguousCopy() { }

    /** {@code reps} copies of {@code bytes} on device {@code ordinal} after three discarded ones. */
    public static Result measure(int ordinal, long bytes, int reps) {
        CudaDriver driver = CudaDriver.load().orElseThrow();
        CudaDevice device = CudaDevice.open(driver, ordinal);
        try {
            device.bind();
            MemorySegment stream = driver.streamCreate();
            MemorySegment start = driver.eventCreate(true);
            MemorySegment stop = driver.eventCreate(true);
            long a = driver.memAlloc(bytes);
            long b = driver.memAlloc(bytes);
            try {
                driver.memsetD8Async(a, (byte) 0x5a, bytes, stream);
                for (int i = 0; i < 3; i++) {
                    driver.memcpyDtoDAsync(b, a, bytes, stream);
                }
                driver.streamSynchronize(stream);
                double[] gpu = new double[reps];
                double[] wall = new double[reps];
                for (int i = 0; i < reps; i++) {
                    long t0 = System.nanoTime();
                    driver.eventRecord(start, stream);
                    driver.memcpyDtoDAsync(b, a, bytes, stream);
                    driver.eventRecord(stop, stream);
                    driver.streamSynchronize(stream);
                    wall[i] = (System.nanoTime() - t0) / 1e6;
                    gpu[i] = driver.eventElapsedMillis(start, stop);
                }
                return new Result(bytes, median(gpu), median(wall));
            } finally {
                driver.memFree(a);
                driver.memFree(b);
                driver.eventDestroy(start);
                driver.eventDestroy(stop);
                driver.streamDestroy(stream);
            }
        } finally {
            device.close();
        }
    }

    private static double median(double[] v) {
        double[] s = v.clone();
        Arrays.sort(s);
        return s[s.length / 2];
    }
}
