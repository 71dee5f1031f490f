package io.orbitkv.pd.bench.gpu;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.gpu.CopyEngine;
import io.orbitkv.pd.gpu.CopyKernel;
import io.orbitkv.pd.gpu.CudaConfig;
import io.orbitkv.pd.gpu.CudaCopyEngine;
import io.orbitkv.pd.gpu.CudaFabric;
import io.orbitkv.pd.gpu.CudaKernels;
import io.orbitkv.pd.gpu.CudaTransport;
import io.orbitkv.pd.gpu.DeviceKvPool;
import io.orbitkv.pd.gpu.RunTable;
import io.orbitkv.pd.gpu.cuda.CudaDevice;
import io.orbitkv.pd.gpu.cuda.CudaDriver;
import io.orbitkv.pd.kv.BlockRuns;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.schemas.OrderTokens;
import io.orbitkv.pd.transport.PeerEndpoint;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.TransferResult;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;

/**
 * The GPU benchmark: 256 MiB of KV in 16, 32 and 128 KiB pages, scattered through a pool four times larger, moved
 * by every copy method, each against one contiguous device-to-device copy of the same bytes in the same run; plus
 * the per-order overhead of a launch and of a whole transport push. Every method's output is checked (destination
 * poisoned first, then compared byte for byte with the source by an independent kernel) before it is timed.
 *
 * <p>Times are medians of CUDA-event-timed repetitions after warm-up (wall clock for host round trips). GB/s is
 * bytes moved (not read + written) per second, 1 GB = 10^9 bytes.
 */
final class GpuBench {

    static final long MOVED = 256L << 20;
    static final int LAYERS = 32;
    static final int POOL_FACTOR = 4;
    static final int[] PAGE_KIB = {16, 32, 128};
    private static final byte POISON = (byte) 0x5A;
    private static final OrderTokens TOKENS = new OrderTokens("gpu-bench-auth-key-0123456789".getBytes(StandardCharsets.UTF_8));

    private final CudaDriver driver;
    private final CudaDevice device;
    private final CudaKernels kernels;
    private final DeviceOps ops;
    private final MemorySegment stream;
    private final MemorySegment start;
    private final MemorySegment stop;
    private final boolean quick;
    private final List<Map<String, Object>> rows = new ArrayList<>();
    private final List<String> failures = new ArrayList<>();
    private final Map<String, Object> overhead = new LinkedHashMap<>();

    GpuBench(CudaDevice device, CudaKernels kernels, boolean quick) {
        this.driver = device.driver();
        this.device = device;
        this.kernels = kernels;
        this.quick = quick;
        device.bind();
        this.ops = new DeviceOps(device, kernels);
        this.stream = driver.streamCreate();
        this.start = driver.eventCreate(true);
        this.stop = driver.eventCreate(true);
    }

    /** Median milliseconds of {@code reps} event-timed runs of {@code enqueue} on {@code s}, after {@code warm} untimed ones. */
    private double[] time(MemorySegment s, Runnable enqueue, int warm, int reps) {
        for (int i = 0; i < warm; i++) {
            enqueue.run();
        }
        driver.streamSynchronize(s);
        double[] t = new double[reps];
        for (int i = 0; i < reps; i++) {
            driver.eventRecord(start, s);
            enqueue.run();
            driver.eventRecord(stop, s);
            driver.eventSynchronize(stop);
            t[i] = driver.eventElapsedMillis(start, stop);
        }
        return stats(t);
    }

    /** Median, min and max microseconds of a host round trip. */
    private static double[] wallMicros(Runnable op, int warm, int reps) {
        for (int i = 0; i < warm; i++) {
            op.run();
        }
        double[] t = new double[reps];
        for (int i = 0; i < reps; i++) {
            long t0 = System.nanoTime();
            op.run();
            t[i] = (System.nanoTime() - t0) / 1e3;
        }
        return stats(t);
    }

    private static double[] stats(double[] t) {
        double[] s = t.clone();
        Arrays.sort(s);
        double median = s.length % 2 == 1 ? s[s.length / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
        return new double[] {median, s[0], s[s.length - 1]};
    }

    static KvGeometry geometry(int pageKib) {
        int pageBytes = pageKib * 1024;
        int tokens = pageBytes / (8 * 128 * 2);
        int moved = (int) (MOVED / ((long) pageBytes * LAYERS * 2));
        return new KvGeometry(LAYERS, KvSplit.SEPARATE, tokens, 8, 128, Dtype.BF16, pageBytes, moved * POOL_FACTOR);
    }

    /** {@code n} distinct blocks of {@code [0, pool)} in random order. */
    static int[] scattered(SplittableRandom rnd, int pool, int n) {
        int[] all = new int[pool];
        for (int i = 0; i < pool; i++) {
            all[i] = i;
        }
        for (int i = pool - 1; i > 0; i--) {
            int j = rnd.nextInt(i + 1);
            int x = all[i];
            all[i] = all[j];
            all[j] = x;
        }
        return Arrays.copyOf(all, n);
    }

    Map<String, Object> run() {
        Map<String, Object> result = new LinkedHashMap<>();
        result.put("when", Instant.now().toString());
        result.put("gpu", device.name());
        result.put("compute_capability", device.computeCapability());
        result.put("multiprocessors", device.multiprocessors());
        result.put("driver_cuda_version", driver.driverVersion());
        result.put("java", Runtime.version().toString());
        result.put("moved_bytes", MOVED);
        result.put("pool_factor", POOL_FACTOR);
        Map<String, Object> regs = new LinkedHashMap<>();
        for (CopyKernel k : CopyKernel.values()) {
            regs.put(k.shortName(), kernels.registers(k));
        }
        result.put("kernel_registers", regs);
        for (int kib : PAGE_KIB) {
            pageSize(kib);
        }
        launchOverhead();
        result.put("rows", rows);
        result.put("per_order_overhead", overhead);
        result.put("failures", failures);
        return result;
    }

    private void row(int pageKib, int pages, String method, String detail, double[] ms, double contiguousMs, long mismatches) {
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("page_kib", pageKib);
        r.put("pages", pages);
        r.put("method", method);
        r.put("detail", detail);
        r.put("median_ms", ms[0]);
        r.put("min_ms", ms[1]);
        r.put("max_ms", ms[2]);
        r.put("gb_per_s", MOVED / (ms[0] * 1e6));
        r.put("pct_of_contiguous", 100.0 * contiguousMs / ms[0]);
        r.put("mismatched_bytes", mismatches);
        rows.add(r);
        System.out.printf(Locale.ROOT, "  %3d KiB  %-34s %9.3f ms %8.1f GB/s %6.1f %%  %s%s%n", pageKib, method, ms[0], MOVED / (ms[0] * 1e6),
                100.0 * contiguousMs / ms[0], detail, mismatches == 0 ? "" : "  MISMATCH " + mismatches + " bytes");
        if (mismatches != 0) {
            failures.add(pageKib + " KiB " + method + ": " + mismatches + " bytes differ from the source");
        }
    }

    private void poison(DeviceKvPool dst, MemorySegment s) {
        for (int r = 0; r < dst.geometry().regionCount(); r++) {
            driver.memsetD8Async(dst.baseAddress(r), POISON, dst.geometry().regionBytes(), s);
        }
    }

    private void pageSize(int kib) {
        KvGeometry g = geometry(kib);
        int movedBlocks = g.numBlocks() / POOL_FACTOR;
        int pages = movedBlocks * g.regionCount();
        System.out.printf(Locale.ROOT, "%d KiB pages: %d blocks × %d regions = %d pages (%d MiB) scattered through pools of %d MiB%n", kib,
                movedBlocks, g.regionCount(), pages, MOVED >> 20, g.poolBytes() >> 20);
        SplittableRandom rnd = new SplittableRandom(1000 + kib);
        List<BlockRun> srcRuns = BlockRuns.fromBlocks(scattered(rnd, g.numBlocks(), movedBlocks));
        List<BlockRun> dstRuns = BlockRuns.fromBlocks(scattered(rnd, g.numBlocks(), movedBlocks));
        TransferPlan plan = TransferPlan.build(g, srcRuns, g, dstRuns);
        device.bind();
        try (DeviceKvPool src = DeviceKvPool.allocate(device, g); DeviceKvPool dst = DeviceKvPool.allocate(device, g)) {
            for (int r = 0; r < g.regionCount(); r++) {
                ops.fillRandom(src.baseAddress(r), g.regionBytes(), 77L * r + kib, stream);
            }
            RunTable spans = RunTable.build(plan, src, dst, null);
            if (spans.bytes() != MOVED) {
                throw new IllegalStateException("plan moves " + spans.bytes() + " bytes, not " + MOVED);
            }
            // the baseline: one contiguous copy of the same number of bytes, in this run
            long a = driver.memAlloc(MOVED);
            long b = driver.memAlloc(MOVED);
            double contiguous;
            try {
                ops.fillRandom(a, MOVED, 5, stream);
                driver.memsetD8Async(b, POISON, MOVED, stream);
                driver.memcpyDtoDAsync(b, a, MOVED, stream);
                RunTable whole = RunTable.of(new long[] {a}, new long[] {b}, new long[] {MOVED});
                long bad = ops.mismatches(whole, stream);
                double[] base = time(stream, () -> driver.memcpyDtoDAsync(b, a, MOVED, stream), 3, quick ? 5 : 20);
                contiguous = base[0];
                row(kib, pages, "contiguous cuMemcpyDtoDAsync", "one copy of " + (MOVED >> 20) + " MiB (baseline)", base, contiguous, bad);
                // the default kernel over the same contiguous bytes: what the kernel reaches without scattering
                try (CudaCopyEngine e = engine(CudaCopyEngine.Mode.KERNEL, CopyKernel.DEFAULT, CudaCopyEngine.Grid.PER_CHUNK,
                        CudaConfig.DEFAULT_CHUNK_BYTES)) {
                    measure(kib, pages, "kernel, contiguous", e, whole, null, contiguous, quick ? 5 : 20);
                }
            } finally {
                driver.streamSynchronize(stream);
                driver.memFree(a);
                driver.memFree(b);
            }
            // every kernel variant, both grid shapes
            for (CopyKernel k : CopyKernel.values()) {
                for (CudaCopyEngine.Grid grid : CudaCopyEngine.Grid.values()) {
                    if (quick && k != CopyKernel.DEFAULT) {
                        continue;
                    }
                    try (CudaCopyEngine e = engine(CudaCopyEngine.Mode.KERNEL, k, grid, CudaConfig.DEFAULT_CHUNK_BYTES)) {
                        measure(kib, pages, "kernel " + k.shortName() + (grid == CudaCopyEngine.Grid.PER_CHUNK ? "" : " persistent"), e, spans, dst,
                                contiguous, 20);
                    }
                }
            }
            // chunk size, default kernel
            for (long chunk : new long[] {16 << 10, 32 << 10, 128 << 10, 256 << 10}) {
                if (quick) {
                    break;
                }
                try (CudaCopyEngine e = engine(CudaCopyEngine.Mode.KERNEL, CopyKernel.DEFAULT, CudaCopyEngine.Grid.PER_CHUNK, chunk)) {
                    measure(kib, pages, "kernel " + CopyKernel.DEFAULT.shortName() + " chunk " + (chunk >> 10) + " KiB", e, spans, dst, contiguous, 20);
                }
            }
            if (driver.hasBatchCopy()) {
                try (CudaCopyEngine e = engine(CudaCopyEngine.Mode.BATCH, CopyKernel.DEFAULT, CudaCopyEngine.Grid.PER_CHUNK,
                        CudaConfig.DEFAULT_CHUNK_BYTES)) {
                    measure(kib, pages, "cuMemcpyBatchAsync", e, spans, dst, contiguous, quick ? 3 : 10);
                }
            } else {
                failures.add("cuMemcpyBatchAsync is not in this driver");
            }
            try (CudaCopyEngine e = engine(CudaCopyEngine.Mode.PER_COPY, CopyKernel.DEFAULT, CudaCopyEngine.Grid.PER_CHUNK,
                    CudaConfig.DEFAULT_CHUNK_BYTES)) {
                measure(kib, pages, "cuMemcpyDtoDAsync per page", e, spans, dst, contiguous, 3);
            }
            transportPush(kib, pages, g, src, dst, srcRuns, dstRuns, plan, contiguous);
            // the same two measurements again, last: their difference is the noise the other rows sit in
            try (CudaCopyEngine e = engine(CudaCopyEngine.Mode.KERNEL, CopyKernel.DEFAULT, CudaCopyEngine.Grid.PER_CHUNK,
                    CudaConfig.DEFAULT_CHUNK_BYTES)) {
                measure(kib, pages, "kernel " + CopyKernel.DEFAULT.shortName() + " (default, again)", e, spans, dst, contiguous, 20);
            }
            long a2 = driver.memAlloc(MOVED);
            long b2 = driver.memAlloc(MOVED);
            try {
                ops.fillRandom(a2, MOVED, 6, stream);
                driver.memsetD8Async(b2, POISON, MOVED, stream);
                driver.memcpyDtoDAsync(b2, a2, MOVED, stream);
                long bad2 = ops.mismatches(RunTable.of(new long[] {a2}, new long[] {b2}, new long[] {MOVED}), stream);
                double[] again = time(stream, () -> driver.memcpyDtoDAsync(b2, a2, MOVED, stream), 3, quick ? 5 : 20);
                row(kib, pages, "contiguous cuMemcpyDtoDAsync (again)", "the baseline timed a second time", again, contiguous, bad2);
            } finally {
                driver.streamSynchronize(stream);
                driver.memFree(a2);
                driver.memFree(b2);
            }
        }
    }

    private CudaCopyEngine engine(CudaCopyEngine.Mode mode, CopyKernel k, CudaCopyEngine.Grid grid, long chunk) {
        return CudaCopyEngine.create(kernels, mode, k, grid, chunk, CudaConfig.DEFAULT_MAX_BATCH);
    }

    /** Checks the method's output (destination poisoned first: the whole pool when given, else each run), then times it. */
    private void measure(int kib, int pages, String method, CudaCopyEngine e, RunTable spans, DeviceKvPool poisonPool, double contiguous,
                         int reps) {
        CudaCopyEngine.Staged st = e.stage(spans);
        MemorySegment s = e.stream();
        if (poisonPool != null) {
            poison(poisonPool, s);
        } else {
            for (int i = 0; i < spans.size(); i++) {
                driver.memsetD8Async(spans.dest(i), POISON, spans.length(i), s);
            }
        }
        e.enqueue(st);
        long bad = ops.mismatches(spans, s);
        st = e.stage(spans); // the check reused the stream; stage again so the timed runs start clean
        CudaCopyEngine.Staged staged = st;
        double[] ms = time(s, () -> e.enqueue(staged), 3, reps);
        String detail = e.describe() + (e.mode() == CudaCopyEngine.Mode.KERNEL ? ", " + staged.table().size() + " entries, grid " + staged.gridBlocks()
                : ", " + staged.table().size() + " copies");
        row(kib, pages, method, detail, ms, contiguous, bad);
    }

    /** The whole cuda transport path: gate admission (token, epochs, bounds), run table, upload, launch, event wait. */
    private void transportPush(int kib, int pages, KvGeometry g, DeviceKvPool src, DeviceKvPool dst, List<BlockRun> srcRuns, List<BlockRun> dstRuns,
                               TransferPlan plan, double contiguous) {
        CudaFabric fabric = new CudaFabric();
        CudaConfig cfg = CudaConfig.parse(Map.of("node-id", "bench"));
        PushGate gate = new PushGate("decode-b", () -> 1, dst, TOKENS, 1 << 20, 1000);
        Supplier<CopyEngine> engines = () -> {
            device.bind();
            return engine(cfg.mode(), cfg.kernel(), cfg.grid(), cfg.chunkBytes());
        };
        try (CudaTransport receiver = CudaTransport.start(cfg, fabric, "bench", gate, engines);
             CudaTransport sender = CudaTransport.start(cfg, fabric, "bench", null, engines)) {
            PeerEndpoint peer = new PeerEndpoint("decode-b", 1, "cuda", "bench", null);
            int[] n = {0};
            Runnable push = () -> {
                String order = "bench-" + kib + "/a" + (++n[0]);
                PushRequest r = new PushRequest("bench-" + kib, order, n[0], "lease-b", 1, "decode-b", 1, dstRuns, TOKENS.sign(order, 1, "decode-b", 1, dstRuns), 0,
                        "bench");
                try {
                    TransferResult res = sender.push(r, src, plan, peer).result().get(60, TimeUnit.SECONDS);
                    if (res.bytes() != MOVED) {
                        throw new IllegalStateException("push moved " + res.bytes());
                    }
                } catch (Exception ex) {
                    throw new IllegalStateException("transport push failed: " + ex, ex);
                }
            };
            device.bind();
            poison(dst, stream);
            driver.streamSynchronize(stream);
            push.run();
            long bad = ops.mismatches(RunTable.build(plan, src, dst, null), stream);
            // a worker pushes orders all day: time it after the JIT compiled the per-order Java path
            double[] us = wallMicros(push, quick ? 20 : 400, quick ? 5 : 50);
            double[] ms = {us[0] / 1e3, us[1] / 1e3, us[2] / 1e3};
            row(kib, pages, "cuda transport push (end to end)", "wall clock: gate + run table + upload + launch + event wait", ms, contiguous, bad);
        }
    }

    private void launchOverhead() {
        KvGeometry g = geometry(32);
        System.out.println("per-order overhead (32 KiB pages)");
        try (DeviceKvPool src = DeviceKvPool.allocate(device, g); DeviceKvPool dst = DeviceKvPool.allocate(device, g)) {
            List<BlockRun> one = List.of(BlockRuns.run(3, 1));
            List<BlockRun> oneDst = List.of(BlockRuns.run(9, 1));
            TransferPlan blockPlan = TransferPlan.build(g, one, g, oneDst);
            RunTable page = RunTable.of(new long[] {src.baseAddress(0) + 3L * g.pageBytes()}, new long[] {dst.baseAddress(0) + 9L * g.pageBytes()},
                    new long[] {g.pageBytes()});
            try (CudaCopyEngine k = engine(CudaCopyEngine.Mode.KERNEL, CopyKernel.DEFAULT, CudaCopyEngine.Grid.PER_CHUNK, CudaConfig.DEFAULT_CHUNK_BYTES)) {
                CudaCopyEngine.Staged st = k.stage(page);
                double[] gpu = time(k.stream(), () -> k.enqueue(st), 10, 200);
                overhead.put("kernel_1_page_gpu_us", gpu[0] * 1e3);
                overhead.put("kernel_1_page_round_trip_us", wallMicros(() -> k.copy(page), 20, 500)[0]);
                RunTable block = RunTable.build(blockPlan, src, dst, null);
                overhead.put("kernel_1_block_64_pages_round_trip_us", wallMicros(() -> k.copy(block), 20, 500)[0]);
            }
            if (driver.hasBatchCopy()) {
                try (CudaCopyEngine b = engine(CudaCopyEngine.Mode.BATCH, CopyKernel.DEFAULT, CudaCopyEngine.Grid.PER_CHUNK, CudaConfig.DEFAULT_CHUNK_BYTES)) {
                    overhead.put("batch_1_page_round_trip_us", wallMicros(() -> b.copy(page), 20, 500)[0]);
                }
            }
            MemorySegment ev = driver.eventCreate(false);
            try {
                long s = page.source(0);
                long d = page.dest(0);
                overhead.put("memcpy_1_page_round_trip_us", wallMicros(() -> {
                    driver.memcpyDtoDAsync(d, s, g.pageBytes(), stream);
                    driver.eventRecord(ev, stream);
                    driver.eventSynchronize(ev);
                }, 20, 500)[0]);
            } finally {
                driver.eventDestroy(ev);
            }
            CudaFabric fabric = new CudaFabric();
            CudaConfig cfg = CudaConfig.parse(Map.of("node-id", "bench"));
            PushGate gate = new PushGate("decode-o", () -> 1, dst, TOKENS, 1024, 100_000);
            Supplier<CopyEngine> engines = () -> {
                device.bind();
                return engine(cfg.mode(), cfg.kernel(), cfg.grid(), cfg.chunkBytes());
            };
            try (CudaTransport receiver = CudaTransport.start(cfg, fabric, "bench", gate, engines);
                 CudaTransport sender = CudaTransport.start(cfg, fabric, "bench", null, engines)) {
                PeerEndpoint peer = new PeerEndpoint("decode-o", 1, "cuda", "bench", null);
                int[] n = {0};
                overhead.put("transport_push_1_block_64_pages_us", wallMicros(() -> {
                    String order = "o/a" + (++n[0]);
                    PushRequest r = new PushRequest("o", order, n[0], "lease-o", 1, "decode-o", 1, oneDst, TOKENS.sign(order, 1, "decode-o", 1, oneDst), 0, "bench");
                    try {
                        sender.push(r, src, blockPlan, peer).result().get(60, TimeUnit.SECONDS);
                    } catch (Exception ex) {
                        throw new IllegalStateException("transport push failed: " + ex, ex);
                    }
                }, quick ? 100 : 3000, quick ? 100 : 1000)[0]);
            }
        }
        overhead.forEach((k, v) -> System.out.printf(Locale.ROOT, "  %-40s %8.1f µs%n", k, (Double) v));
    }

    /** The summary table (markdown) of a result. */
    @SuppressWarnings("unchecked")
    static String markdown(Map<String, Object> result) {
        StringBuilder b = new StringBuilder();
        b.append(String.format(Locale.ROOT, "GPU: %s (sm_%s, %s SMs), driver CUDA %s, Java %s, %s%n%n", result.get("gpu"),
                String.valueOf(result.get("compute_capability")).replace(".", ""), result.get("multiprocessors"), result.get("driver_cuda_version"),
                result.get("java"), result.get("when")));
        b.append("256 MiB moved per order, pages scattered at random through pools of 1 GiB (32 layers × K/V); medians; GB/s = bytes moved / time.\n\n");
        b.append("| page | method | time (ms) | GB/s | % of contiguous | checked |\n|---|---|---:|---:|---:|---|\n");
        List<Map<String, Object>> rows = (List<Map<String, Object>>) result.get("rows");
        for (Map<String, Object> r : rows) {
            b.append(String.format(Locale.ROOT, "| %d KiB | %s | %.3f | %.1f | %.1f | %s |%n", r.get("page_kib"), r.get("method"), r.get("median_ms"),
                    r.get("gb_per_s"), r.get("pct_of_contiguous"), ((Number) r.get("mismatched_bytes")).longValue() == 0 ? "ok" : "MISMATCH"));
        }
        b.append("\nPer-order overhead (32 KiB pages; medians):\n\n| what | µs |\n|---|---:|\n");
        ((Map<String, Object>) result.get("per_order_overhead")).forEach((k, v) -> b.append(String.format(Locale.ROOT, "| %s | %.1f |%n", k, v)));
        List<String> failures = (List<String>) result.get("failures");
        b.append(failures.isEmpty() ? "\nEvery method's output matched its source byte for byte.\n" : "\nFAILURES: " + failures + "\n");
        return b.toString();
    }

    static int main(Path out, boolean quick) throws IOException {
        CudaDriver driver = CudaDriver.load().orElseThrow();
        try (CudaDevice device = CudaDevice.open(driver, 0); CudaKernels kernels = CudaKernels.load(device)) {
            GpuBench bench = new GpuBench(device, kernels, quick);
            Map<String, Object> result = bench.run();
            Files.createDirectories(out);
            Files.writeString(out.resolve("gpu.json"), Json.write(result));
            String md = markdown(result);
            Files.writeString(out.resolve("gpu.md"), md);
            System.out.println();
            System.out.print(md);
            bench.close();
            return bench.failures.isEmpty() ? 0 : 1;
        }
    }

    private void close() {
        device.bind();
        driver.streamSynchronize(stream);
        driver.eventDestroy(start);
        driver.eventDestroy(stop);
        driver.streamDestroy(stream);
        ops.close();
    }
}
