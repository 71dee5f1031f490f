package io.orbitkv.pd.bench.gpu;

import io.orbitkv.pd.gpu.CopyKernel;
import io.orbitkv.pd.gpu.CudaKernels;
import io.orbitkv.pd.gpu.KernelImage;
import io.orbitkv.pd.gpu.RunTable;
import io.orbitkv.pd.gpu.cuda.CudaDevice;
import io.orbitkv.pd.gpu.cuda.CudaDriver;
import java.lang.foreign.MemorySegment;
import java.nio.file.Path;
import java.util.Arrays;

/**
 * The GPU machine's entry point (gpu/run-gpu-suite.sh runs it; it needs only the JDK's java.base and the jars of
 * this module, transfer-worker, schemas and Avro):
 *
 * <pre>
 *   info                                  driver, device, kernels as the JIT compiled them, one checked copy
 *   ipc-check --out DIR [--seed S] [--rounds N]   two engine processes + one worker process, every byte checked
 *   bench --out DIR [--quick]             the benchmark (docs/bench/gpu.md)
 *   engine ... / worker ...               the child processes of ipc-check
 * </pre>
 *
 * Output is this tool's own console output; exit code 0 only when every check passed.
 */
public final class GpuSuite {

    private GpuSuite() { }

    public static void main(String[] args) throws Exception {
        if (args.length == 0) {
            System.err.println("usage: GpuSuite info | ipc-check --out DIR [--seed S] [--rounds N] | bench --out DIR [--quick]");
            System.exit(2);
        }
        int rc = switch (args[0]) {
            case "info" -> info();
            case "ipc-check" -> IpcCheck.main(Path.of(option(args, "--out", "gpu-suite-out")),
                    Long.parseLong(option(args, "--seed", Long.toString(System.nanoTime() & 0xFFFF_FFFFL))),
                    Integer.parseInt(option(args, "--rounds", "8")));
            case "bench" -> GpuBench.main(Path.of(option(args, "--out", "gpu-suite-out")), Arrays.asList(args).contains("--quick"));
            case "engine" -> {
                IpcCheck.engine(args);
                yield 0;
            }
            case "worker" -> {
                IpcCheck.worker(args);
                yield 0;
            }
            default -> {
                System.err.println("unknown command " + args[0]);
                yield 2;
            }
        };
        System.exit(rc);
    }

    private static String option(String[] args, String name, String dflt) {
        for (int i = 0; i < args.length - 1; i++) {
            if (args[i].equals(name)) {
                return args[i + 1];
            }
        }
        return dflt;
    }

    private static int info() {
        CudaDriver.Availability a = CudaDriver.load();
        if (!a.available()) {
            System.out.println("CUDA unavailable: " + a.reason());
            return 1;
        }
        CudaDriver d = a.orElseThrow();
        System.out.println("driver: " + d.library() + ", CUDA " + d.driverVersion() / 1000 + "." + d.driverVersion() % 1000 / 10 + ", "
                + d.deviceCount() + " device(s), cuMemcpyBatchAsync " + (d.hasBatchCopy() ? "present" : "absent"));
        try (CudaDevice dev = CudaDevice.open(d, 0)) {
            System.out.println("device: " + dev + ", " + (d.deviceTotalMemory(dev.handle()) >> 30) + " GiB, uuid " + d.deviceUuid(dev.handle())
                    + ", L2 " + (d.deviceAttribute(dev.handle(), CudaDriver.ATTR_L2_CACHE_SIZE) >> 20) + " MiB");
            long t0 = System.nanoTime();
            try (CudaKernels k = CudaKernels.load(dev)) {
                System.out.printf("kernels: %s loaded (PTX %s, JIT) in %.0f ms%n", KernelImage.RESOURCE, KernelImage.target(KernelImage.ptxText()),
                        (System.nanoTime() - t0) / 1e6);
                for (CopyKernel c : CopyKernel.values()) {
                    System.out.printf("  %-22s %3d registers, %d resident blocks/SM%n", c.entryName(), k.registers(c),
                            d.maxActiveBlocksPerMultiprocessor(k.function(c), c.threads()));
                }
                // one small checked copy before anything else runs
                try (DeviceOps ops = new DeviceOps(dev, k)) {
                    MemorySegment s = d.streamCreate();
                    long n = 64L << 20;
                    long a1 = d.memAlloc(n);
                    long b1 = d.memAlloc(n);
                    try {
                        ops.fillRandom(a1, n, 1, s);
                        d.memsetD8Async(b1, (byte) 0, n, s);
                        // three alignment cases: bytes only (src and dst differ mod 4), 16-byte vectors, 16-byte vectors after a byte head
                        RunTable t = RunTable.of(new long[] {a1, a1 + 2_000_000, a1 + 40_000_005}, new long[] {b1 + 7, b1 + 33_554_432, b1 + 52_000_005},
                                new long[] {1_000_000, 16L << 20, 999_999});
                        try (var e = io.orbitkv.pd.gpu.CudaCopyEngine.create(k, io.orbitkv.pd.gpu.CudaCopyEngine.Mode.KERNEL, CopyKernel.DEFAULT,
                                io.orbitkv.pd.gpu.CudaCopyEngine.Grid.PER_CHUNK, 64 * 1024, 1024)) {
                            e.copy(t);
                        }
                        long bad = ops.mismatches(t, s);
                        System.out.println("sanity copy (" + t.bytes() + " bytes, unaligned and aligned): " + (bad == 0 ? "ok" : bad + " bytes differ"));
                        return bad == 0 ? 0 : 1;
                    } finally {
                        d.streamSynchronize(s);
                        d.memFree(a1);
                        d.memFree(b1);
                        d.streamDestroy(s);
                    }
                }
            }
        }
    }
}
