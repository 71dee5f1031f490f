package io.orbitkv.pd.bench.gpu;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.gpu.CudaConfig;
import io.orbitkv.pd.gpu.CudaFabric;
import io.orbitkv.pd.gpu.CudaTransport;
import io.orbitkv.pd.gpu.DeviceKvPool;
import io.orbitkv.pd.gpu.ImportedKvPool;
import io.orbitkv.pd.gpu.cuda.CudaDevice;
import io.orbitkv.pd.gpu.cuda.CudaDriver;
import io.orbitkv.pd.kv.BlockRuns;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.schemas.OrderTokens;
import io.orbitkv.pd.transport.PeerEndpoint;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.TransferException;
import io.orbitkv.pd.transport.TransferResult;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.io.PrintWriter;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

/**
 * The cross-process correctness check of the cuda transport, as a node runs it: two engine processes each allocate
 * a paged KV pool on the GPU and register it (IPC handles in the regions); one worker process maps both pools
 * through CUDA IPC and pushes orders from the prefill pool into the decode pool through the cuda transport and
 * the decode engine's gate. Every round: random page tables, the source filled with a pattern of (seed, region,
 * block), the destination poisoned; afterwards the decode engine reads its whole pool back and checks every byte —
 * copied pages against the pattern of their source page, every other page still poison. Refused pushes (released
 * lease, runs outside the pool, forged token) must leave the pool untouched.
 *
 * <p>The processes talk over stdin/stdout, one line per command and reply ({@code OK ...} or {@code ERR ...}).
 */
final class IpcCheck {

    private static final String KEY_TEXT = "gpu-suite-auth-key-0123456789";
    private static final long REPLY_TIMEOUT_S = 120;

    private IpcCheck() { }

    /** A pool shape: {@code SEPARATE:<layers>:<block tokens>:<blocks>} (bf16, 8 heads × 128) or {@code FUSED:<layers>:<page bytes>:<blocks>}. */
    static KvGeometry geometry(String spec) {
        String[] p = spec.split(":");
        int layers = Integer.parseInt(p[1]);
        int blocks = Integer.parseInt(p[3]);
        return switch (p[0]) {
            case "SEPARATE" -> {
                int tokens = Integer.parseInt(p[2]);
                yield new KvGeometry(layers, KvSplit.SEPARATE, tokens, 8, 128, Dtype.BF16, tokens * 8 * 128 * 2, blocks);
            }
            case "FUSED" -> new KvGeometry(layers, KvSplit.FUSED, 16, 1, 1, Dtype.UNKNOWN, Integer.parseInt(p[2]), blocks);
            default -> throw new IllegalArgumentException("geometry: " + spec);
        };
    }

    static String runs(List<BlockRun> runs) {
        if (runs.isEmpty()) {
            return "-";
        }
        StringBuilder b = new StringBuilder();
        for (BlockRun r : runs) {
            b.append(b.isEmpty() ? "" : ",").append(r.getStart()).append('+').append(r.getCount());
        }
        return b.toString();
    }

    static List<BlockRun> runs(String s) {
        List<BlockRun> out = new ArrayList<>();
        if (!s.equals("-")) {
            for (String r : s.split(",")) {
                int plus = r.indexOf('+');
                out.add(BlockRuns.run(Integer.parseInt(r.substring(0, plus)), Integer.parseInt(r.substring(plus + 1))));
            }
        }
        return out;
    }

    /** Serves one-line commands from stdin until QUIT or EOF; a failing command answers {@code ERR}, never kills the loop. */
    private interface Handler {
        String handle(String[] cmd) throws Exception;
    }

    private static void serve(Handler h) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = System.out;
        out.println("READY");
        out.flush();
        String line;
        while ((line = in.readLine()) != null) {
            String[] cmd = line.strip().split(" ");
            if (cmd[0].equals("QUIT")) {
                out.println("OK bye");
                out.flush();
                return;
            }
            String reply;
            try {
                reply = h.handle(cmd);
            } catch (TransferException e) {
                reply = "ERR " + e.kind() + " " + e.getMessage();
            } catch (Exception e) {
                reply = "ERR " + e.getClass().getSimpleName() + " " + e.getMessage();
            }
            out.println(reply.replace('\n', ' '));
            out.flush();
        }
    }

    // ---- engine process -------------------------------------------------------------------------------------------

    /** {@code engine <id> <PREFILL|DECODE> <geometry> <registration file>}. */
    static void engine(String[] args) throws Exception {
        String id = args[1];
        EngineRole role = EngineRole.valueOf(args[2]);
        KvGeometry g = geometry(args[3]);
        Path regFile = Path.of(args[4]);
        CudaDriver driver = CudaDriver.load().orElseThrow();
        try (CudaDevice device = CudaDevice.open(driver, 0); DeviceKvPool pool = DeviceKvPool.allocate(device, g)) {
            EngineRegistration reg = EngineRegistration.newBuilder().setEngineId(id).setRole(role).setInstanceEpoch(1).setModel("gpu-suite")
                    .setLayout(g.toLayout(0, 1)).setRegions(pool.memoryRegions()).setRegisteredAtMs(System.currentTimeMillis()).build();
            ByteBuffer bytes = reg.toByteBuffer();
            byte[] a = new byte[bytes.remaining()];
            bytes.get(a);
            Files.write(regFile, a);
            serve(cmd -> switch (cmd[0]) {
                case "FILL" -> fill(device, pool, Long.parseLong(cmd[1]));
                case "POISON" -> {
                    pool.fill((byte) Integer.parseInt(cmd[1]));
                    yield "OK";
                }
                case "CHECK" -> check(device, pool, Long.parseLong(cmd[1]), (byte) Integer.parseInt(cmd[2]), runs(cmd[3]), runs(cmd[4]));
                default -> "ERR unknown command " + cmd[0];
            });
        }
    }

    private static String fill(CudaDevice device, DeviceKvPool pool, long seed) {
        KvGeometry g = pool.geometry();
        device.bind();
        try (Arena a = Arena.ofConfined()) {
            MemorySegment host = a.allocate(g.regionBytes(), 4096);
            for (int r = 0; r < g.regionCount(); r++) {
                for (int b = 0; b < g.numBlocks(); b++) {
                    PagePattern.fill(host.asSlice((long) b * g.pageBytes(), g.pageBytes()), seed, r, b);
                }
                device.driver().memcpyHtoD(pool.baseAddress(r), host, g.regionBytes());
            }
            device.driver().contextSynchronize();
        }
        return "OK";
    }

    /** Reads the whole pool back: pages named by the order hold their source page's pattern, every other byte is poison. */
    private static String check(CudaDevice device, DeviceKvPool pool, long seed, byte poison, List<BlockRun> srcRuns, List<BlockRun> dstRuns) {
        KvGeometry g = pool.geometry();
        int[] src = BlockRuns.toBlocks(srcRuns);
        int[] dst = BlockRuns.toBlocks(dstRuns);
        int[] sourceOf = new int[g.numBlocks()];
        java.util.Arrays.fill(sourceOf, -1);
        for (int i = 0; i < dst.length; i++) {
            sourceOf[dst[i]] = src[i];
        }
        device.bind();
        long copied = 0;
        try (Arena a = Arena.ofConfined()) {
            MemorySegment host = a.allocate(g.regionBytes(), 4096);
            MemorySegment expected = a.allocate(g.pageBytes());
            MemorySegment clean = a.allocate(g.pageBytes());
            clean.fill(poison);
            for (int r = 0; r < g.regionCount(); r++) {
                device.driver().memcpyDtoH(host, pool.baseAddress(r), g.regionBytes());
                for (int b = 0; b < g.numBlocks(); b++) {
                    MemorySegment page = host.asSlice((long) b * g.pageBytes(), g.pageBytes());
                    if (sourceOf[b] >= 0) {
                        PagePattern.fill(expected, seed, r, sourceOf[b]);
                        long m = page.mismatch(expected);
                        if (m != -1) {
                            return "ERR MISMATCH region " + r + " block " + b + " (copy of source block " + sourceOf[b] + "): first differing byte "
                                    + m + " of " + g.pageBytes();
                        }
                        copied += g.pageBytes();
                    } else {
                        long m = page.mismatch(clean);
                        if (m != -1) {
                            return "ERR WRITTEN region " + r + " block " + b + " was not a destination but byte " + m + " is no longer poison";
                        }
                    }
                }
            }
        }
        return "OK " + g.poolBytes() + " " + copied;
    }

    // ---- worker process -------------------------------------------------------------------------------------------

    /** {@code worker <prefill registration> <decode registration>}: maps both pools, pushes what it is told to. */
    static void worker(String[] args) throws Exception {
        EngineRegistration pre = read(Path.of(args[1]));
        EngineRegistration dec = read(Path.of(args[2]));
        CudaDriver driver = CudaDriver.load().orElseThrow();
        OrderTokens tokens = new OrderTokens(KEY_TEXT.getBytes(StandardCharsets.UTF_8));
        OrderTokens forger = new OrderTokens("not-the-deciders-key-0123456789".getBytes(StandardCharsets.UTF_8));
        try (CudaDevice device = CudaDevice.open(driver, 0);
             ImportedKvPool src = ImportedKvPool.open(device, pre.getEngineId(), KvGeometry.of(pre.getLayout()), pre.getRegions());
             ImportedKvPool dst = ImportedKvPool.open(device, dec.getEngineId(), KvGeometry.of(dec.getLayout()), dec.getRegions())) {
            PushGate gate = new PushGate(dec.getEngineId(), dec::getInstanceEpoch, dst, tokens, 1 << 16, 10_000);
            CudaFabric fabric = new CudaFabric();
            CudaConfig kernelCfg = CudaConfig.parse(Map.of("node-id", "gpu-node"));
            try (CudaTransport receiver = CudaTransport.open(kernelCfg, fabric, "gpu-suite-worker", gate, driver);
                 CudaTransport kernel = CudaTransport.open(kernelCfg, fabric, "gpu-suite-worker", null, driver);
                 CudaTransport batch = CudaTransport.open(kernelCfg.withMode(io.orbitkv.pd.gpu.CudaCopyEngine.Mode.BATCH), fabric, "gpu-suite-worker",
                         null, driver)) {
                System.err.println("worker: mapped " + src + " and " + dst + "; receiver endpoint " + receiver.endpoint().orElseThrow());
                PeerEndpoint peer = PeerEndpoint.of(dec.getEngineId(), dec.getInstanceEpoch(), receiver.endpoint().orElseThrow());
                serve(cmd -> switch (cmd[0]) {
                    case "PUSH" -> {
                        // PUSH <kernel|batch> <order id> <lease> <lease epoch> <source runs> <dest runs> [forge] [wide-plan]
                        CudaTransport t = cmd[1].equals("batch") ? batch : kernel;
                        List<BlockRun> sr = runs(cmd[5]);
                        List<BlockRun> dr = runs(cmd[6]);
                        List<String> flags = List.of(cmd).subList(7, cmd.length);
                        KvGeometry dg = flags.contains("wide-plan") ? dst.geometry().withNumBlocks(dst.geometry().numBlocks() * 2) : dst.geometry();
                        TransferPlan plan = TransferPlan.build(src.geometry(), sr, dg, dr);
                        String order = cmd[2];
                        long epoch = Long.parseLong(cmd[4]);
                        byte[] token = (flags.contains("forge") ? forger : tokens).sign(order, epoch, dec.getEngineId(), dec.getInstanceEpoch(), dr);
                        PushRequest r = new PushRequest(order.substring(0, order.lastIndexOf("/a")), order, 1, cmd[3], epoch, dec.getEngineId(),
                                dec.getInstanceEpoch(), dr, token, 0, "gpu-suite-worker");
                        long t0 = System.nanoTime();
                        try {
                            TransferResult res = t.push(r, src, plan, peer).result().get(60, TimeUnit.SECONDS);
                            yield "OK " + res.bytes() + " " + (System.nanoTime() - t0);
                        } catch (ExecutionException e) {
                            if (e.getCause() instanceof TransferException te) {
                                throw te;
                            }
                            throw e;
                        }
                    }
                    case "RELEASE" -> {
                        gate.releaseLease(cmd[1], Long.parseLong(cmd[2]));
                        yield "OK";
                    }
                    default -> "ERR unknown command " + cmd[0];
                });
            }
        }
    }

    private static EngineRegistration read(Path p) throws IOException {
        return EngineRegistration.fromByteBuffer(ByteBuffer.wrap(Files.readAllBytes(p)));
    }

    // ---- orchestrator ---------------------------------------------------------------------------------------------

    /** A child process of the suite, spoken to line by line. */
    private static final class Child implements AutoCloseable {
        final String name;
        final Process process;
        final BufferedReader out;
        final PrintWriter in;

        Child(String name, String... args) throws IOException {
            this.name = name;
            String java = ProcessHandle.current().info().command().orElse("java");
            List<String> cmd = new ArrayList<>(List.of(java, "--enable-native-access=ALL-UNNAMED", "-Xmx2g", "-cp", System.getProperty("java.class.path"),
                    GpuSuite.class.getName()));
            cmd.addAll(List.of(args));
            this.process = new ProcessBuilder(cmd).redirectError(ProcessBuilder.Redirect.INHERIT).start();
            this.out = new BufferedReader(new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8));
            this.in = new PrintWriter(process.getOutputStream(), true, StandardCharsets.UTF_8);
            String ready = readLine();
            if (!"READY".equals(ready)) {
                throw new IllegalStateException(name + " did not start: " + ready);
            }
        }

        String readLine() {
            CompletableFuture<String> f = CompletableFuture.supplyAsync(() -> {
                try {
                    return out.readLine();
                } catch (IOException e) {
                    return "ERR io " + e.getMessage();
                }
            }, r -> Thread.ofVirtual().start(r));
            try {
                String s = f.get(REPLY_TIMEOUT_S, TimeUnit.SECONDS);
                return s == null ? "ERR " + name + " exited (code " + process.waitFor() + ")" : s;
            } catch (Exception e) {
                process.destroyForcibly();
                return "ERR " + name + " gave no answer within " + REPLY_TIMEOUT_S + " s";
            }
        }

        String ask(String line) {
            in.println(line);
            return readLine();
        }

        @Override
        public void close() {
            if (process.isAlive()) {
                in.println("QUIT");
                try {
                    if (!process.waitFor(20, TimeUnit.SECONDS)) {
                        process.destroyForcibly();
                    }
                } catch (InterruptedException e) {
                    process.destroyForcibly();
                    Thread.currentThread().interrupt();
                }
            }
        }
    }

    /** Segments of 1..8 consecutive blocks of {@code [0, pool)} in random order, cut to {@code n} blocks: how allocators leave free lists. */
    static int[] randomBlocks(SplittableRandom rnd, int pool, int n) {
        List<int[]> segs = new ArrayList<>();
        for (int b = 0; b < pool; ) {
            int len = Math.min(1 + rnd.nextInt(8), pool - b);
            segs.add(new int[] {b, len});
            b += len;
        }
        Collections.shuffle(segs, new java.util.Random(rnd.nextLong()));
        int[] out = new int[n];
        int k = 0;
        for (int[] s : segs) {
            for (int j = 0; j < s[1] && k < n; j++) {
                out[k++] = s[0] + j;
            }
            if (k == n) {
                break;
            }
        }
        return out;
    }

    static int main(Path outDir, long seed, int rounds) throws Exception {
        Files.createDirectories(outDir);
        List<String[]> geometries = List.of(
                new String[] {"SEPARATE:4:16:256", "SEPARATE:4:16:192"},   // 32 KiB pages, 8 regions
                new String[] {"FUSED:3:4100:300", "FUSED:3:4100:200"},     // odd 4100-byte pages: every alignment case of the kernel
                new String[] {"SEPARATE:2:64:96", "SEPARATE:2:64:64"});    // 128 KiB pages: cut into 64 KiB chunks
        List<Map<String, Object>> results = new ArrayList<>();
        List<String> failures = new ArrayList<>();
        SplittableRandom rnd = new SplittableRandom(seed);
        long verifiedBytes = 0;
        long copiedBytes = 0;
        System.out.println("ipc-check: seed " + seed + ", " + rounds + " random rounds per geometry, two engine processes + one worker process");
        for (String[] geo : geometries) {
            Path dir = Files.createTempDirectory("orbitkv-ipc");
            Path preReg = dir.resolve("prefill.reg");
            Path decReg = dir.resolve("decode.reg");
            KvGeometry pg = geometry(geo[0]);
            KvGeometry dg = geometry(geo[1]);
            try (Child prefill = new Child("prefill", "engine", "prefill-0", "PREFILL", geo[0], preReg.toString());
                 Child decode = new Child("decode", "engine", "decode-0", "DECODE", geo[1], decReg.toString());
                 Child worker = new Child("worker", "worker", preReg.toString(), decReg.toString())) {
                List<String[]> plan = new ArrayList<>();
                for (int i = 0; i < rounds; i++) {
                    int max = Math.min(pg.numBlocks(), dg.numBlocks());
                    int n = i == 0 ? max : 1 + rnd.nextInt(max);
                    String mode = i % 2 == 0 ? "kernel" : "batch";
                    plan.add(new String[] {mode, "req-" + i + "/a1", "lease-" + i, "1",
                            runs(BlockRuns.fromBlocks(randomBlocks(rnd, pg.numBlocks(), n))),
                            runs(BlockRuns.fromBlocks(randomBlocks(rnd, dg.numBlocks(), n))), "", "OK"});
                }
                if (geo == geometries.get(0)) {
                    // refusals: each must leave the destination pool exactly as poisoned
                    plan.add(new String[] {"kernel", "req-f1/a1", "lease-f", "5", "0+8", "8+8", "release-first", "ERR STALE_EPOCH"});
                    plan.add(new String[] {"kernel", "req-f2/a1", "lease-g", "1", "0+8", (dg.numBlocks() - 4) + "+8", "wide-plan", "ERR OUT_OF_RANGE"});
                    plan.add(new String[] {"batch", "req-f3/a1", "lease-h", "1", "0+8", "8+8", "forge", "ERR UNAUTHORIZED"});
                    plan.add(new String[] {"kernel", "req-f4/a1", "lease-i", "1", "0+8", "100+8", "", "OK"});
                }
                for (String[] p : plan) {
                    long fillSeed = rnd.nextLong();
                    int poison = 1 + rnd.nextInt(255);
                    Map<String, Object> r = new LinkedHashMap<>();
                    r.put("source_geometry", geo[0]);
                    r.put("dest_geometry", geo[1]);
                    r.put("mode", p[0]);
                    r.put("order", p[1]);
                    r.put("blocks", BlockRuns.totalBlocks(runs(p[4])));
                    r.put("source_runs", runs(p[4]).size());
                    r.put("dest_runs", runs(p[5]).size());
                    r.put("expect", p[7]);
                    String f = prefill.ask("FILL " + fillSeed);
                    String z = decode.ask("POISON " + poison);
                    String flags = p[6];
                    if (flags.equals("release-first")) {
                        worker.ask("RELEASE " + p[2] + " " + p[3]);
                        flags = "";
                    }
                    String push = worker.ask("PUSH " + p[0] + " " + p[1] + " " + p[2] + " " + p[3] + " " + p[4] + " " + p[5] + (flags.isEmpty() ? "" : " " + flags));
                    boolean expectOk = p[7].equals("OK");
                    String check = decode.ask("CHECK " + fillSeed + " " + poison + " " + (expectOk ? p[4] + " " + p[5] : "- -"));
                    r.put("push", push.length() > 300 ? push.substring(0, 300) : push);
                    r.put("check", check);
                    boolean ok = f.equals("OK") && z.equals("OK") && push.startsWith(p[7]) && check.startsWith("OK");
                    r.put("pass", ok);
                    results.add(r);
                    if (check.startsWith("OK")) {
                        String[] c = check.split(" ");
                        verifiedBytes += Long.parseLong(c[1]);
                        copiedBytes += Long.parseLong(c[2]);
                    }
                    System.out.printf(Locale.ROOT, "  %-22s %-6s %4d blocks %5d/%5d runs  push: %-45s check: %s%n", geo[0] + "→" + geo[1].split(":")[3],
                            p[0], (Long) r.get("blocks"), (Integer) r.get("source_runs"), (Integer) r.get("dest_runs"),
                            push.length() > 45 ? push.substring(0, 45) : push, check.length() > 60 ? check.substring(0, 60) : check);
                    if (!ok) {
                        failures.add(p[1] + " on " + geo[0] + ": fill " + f + ", poison " + z + ", push " + push + ", check " + check);
                    }
                }
            } finally {
                Files.deleteIfExists(preReg);
                Files.deleteIfExists(decReg);
                Files.deleteIfExists(dir);
            }
        }
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("when", Instant.now().toString());
        out.put("seed", seed);
        out.put("rounds", results.size());
        out.put("verified_pool_bytes", verifiedBytes);
        out.put("copied_bytes_checked", copiedBytes);
        out.put("failures", failures);
        out.put("results", results);
        Files.writeString(outDir.resolve("ipc.json"), Json.write(out));
        String verdict = failures.isEmpty()
                ? String.format(Locale.ROOT, "IPC CHECK PASSED: %d pushes across 3 processes (2 engines, 1 worker); %d MiB of destination pools read back"
                        + " and checked byte for byte, %d MiB of it copied pages", results.size(), verifiedBytes >> 20, copiedBytes >> 20)
                : "IPC CHECK FAILED: " + failures;
        System.out.println(verdict);
        Files.writeString(outDir.resolve("ipc.txt"), verdict + "\n");
        return failures.isEmpty() ? 0 : 1;
    }
}
