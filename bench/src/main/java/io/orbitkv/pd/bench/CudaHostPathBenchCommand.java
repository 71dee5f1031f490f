package io.orbitkv.pd.bench;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.gpu.HostPathWarmUp;
import io.orbitkv.pd.gpu.RunTable;
import io.orbitkv.pd.harness.Samples;
import io.orbitkv.pd.kv.BlockRuns;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvPool;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.schemas.OrderTokens;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.ReceiveSession;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDate;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code orbitkv-pd bench cuda-host-path}: the host side of a cuda push (the receiver's admission, the run table and the
 * claims, the completion and the landing's count) for the first pushes of a process, without and then with the warm-up the
 * cuda transport runs at start ({@code HostPathWarmUp}). A worker pushes a few times a second at most, so its host path may
 * never be compiled by the JIT; the GPU run of 2026-12-06 showed 125 µs for the admission alone. No GPU: the pools are
 * addresses only, nothing is launched.
 */
@Command(name = "cuda-host-path", mixinStandardHelpOptions = true,
        header = "The host side of a cuda push for a process's first pushes, without and with the transport's warm-up, same run.",
        description = {"An 8B-shaped pool (32 layers, K and V apart, 16-token pages of 32 KiB), a push of --blocks blocks in two",
                "destination runs: per push the gate's admission, the run table with the claims inside a frame, and the completion",
                "with the session's close (the landing's count). First --pushes pushes of this process (nothing compiled yet), then",
                "the warm-up of --warm-up synthetic pushes, then --pushes more on a new gate. Writes docs/bench/cuda-host-path.md and",
                "bench/results/cuda-host-path.json."})
public final class CudaHostPathBenchCommand implements Callable<Integer> {

    @Option(names = "--pushes", defaultValue = "130", description = "Pushes measured per phase: about a real-model run's (default: ${DEFAULT-VALUE}).")
    int pushes;
    @Option(names = "--warm-up", defaultValue = "12000", description = "Synthetic pushes of the warm-up (the transport's) (default: ${DEFAULT-VALUE}).")
    int warmUp;
    @Option(names = "--blocks", defaultValue = "512", description = "Blocks per push: 8K tokens (default: ${DEFAULT-VALUE}).")
    int blocks;
    @Option(names = "--out", defaultValue = "docs/bench/cuda-host-path.md", description = "Markdown result file (default: ${DEFAULT-VALUE}).")
    Path outFile;

    private static final String[] STEPS = {"admission", "run table and claims", "completion and close", "host path"};

    @Override
    public Integer call() throws Exception {
        if (pushes < 1 || warmUp < 0 || blocks < 2 || blocks > 1024) {
            throw new IllegalArgumentException("--pushes >= 1, --warm-up >= 0, --blocks 2..1024");
        }
        double[][] cold = measure("cold");
        long t0 = System.nanoTime();
        int warmed = HostPathWarmUp.run(warmUp);
        double warmMs = (System.nanoTime() - t0) / 1e6;
        double[][] warm = measure("warm");
        StringBuilder b = new StringBuilder(String.format(Locale.ROOT, "| step | first %d pushes, no warm-up: p50 / p99 µs | first %d pushes after"
                + " the warm-up: p50 / p99 µs |%n| --- | ---: | ---: |%n", pushes, pushes));
        Map<String, Object> json = new LinkedHashMap<>();
        for (int s = 0; s < STEPS.length; s++) {
            double[] c = cold[s].clone();
            double[] w = warm[s].clone();
            Arrays.sort(c);
            Arrays.sort(w);
            b.append(String.format(Locale.ROOT, "| %s | %.1f / %.1f | %.1f / %.1f |%n", STEPS[s], pct(c, 50), pct(c, 99), pct(w, 50), pct(w, 99)));
            json.put(STEPS[s], Map.of("cold_p50_us", pct(c, 50), "cold_p99_us", pct(c, 99), "warm_p50_us", pct(w, 50), "warm_p99_us", pct(w, 99)));
        }
        String head = String.format(Locale.ROOT, "%d synthetic pushes of the warm-up took %.0f ms (%d completed).", warmUp, warmMs, warmed);
        System.out.println(head);
        System.out.println(b);
        String machine = Runtime.getRuntime().availableProcessors() + " cores (" + MachineInfo.cpuModel() + "), load average "
                + MachineInfo.loadAverage() + ", Java " + Runtime.version();
        Path md = outFile;
        if (md.getParent() != null) {
            Files.createDirectories(md.getParent());
        }
        Files.writeString(md, "# The host side of a cuda push, cold and warmed (`./orbitkv-pd bench cuda-host-path`)\n\n" + LocalDate.now() + ", " + machine
                + ": " + blocks + "-block pushes into an 8B-shaped pool of addresses (no GPU: nothing launched); the first " + pushes
                + " pushes of the process, then " + head + " Then " + pushes + " more on a new gate. Baseline and change in the same"
                + " run. Command: `./orbitkv-pd bench cuda-host-path`.\n\n" + b);
        Map<String, Object> root = new LinkedHashMap<>();
        root.put("date", LocalDate.now().toString());
        root.put("machine", machine);
        root.put("blocks", blocks);
        root.put("pushes", pushes);
        root.put("warm_up_pushes", warmUp);
        root.put("warm_up_ms", warmMs);
        root.put("steps", json);
        Files.writeString(BenchFiles.jsonFor(md), new ObjectMapper().writerWithDefaultPrettyPrinter().writeValueAsString(root) + "\n");
        System.out.println("results written to " + md);
        return 0;
    }

    private static double pct(double[] sorted, double q) {
        return Samples.pct(sorted, q);
    }

    /** {@code pushes} pushes on a gate of their own: per step, µs per push. */
    private double[][] measure(String tag) {
        KvGeometry g = new KvGeometry(32, KvSplit.SEPARATE, 16, 8, 128, Dtype.BF16, 16 * 8 * 128 * 2, 4096);
        KvPool pool = addresses(g);
        OrderTokens tokens = new OrderTokens(("bench-cuda-host-path-" + tag).getBytes(StandardCharsets.UTF_8));
        PushGate gate = new PushGate("decode-0", () -> 7, pool, tokens, 1024, 1024);
        // the destination in two runs and the source apart from them (one pool of addresses plays both sides)
        List<BlockRun> dest = List.of(BlockRuns.run(100, blocks / 2), BlockRuns.run(1500, blocks - blocks / 2));
        TransferPlan plan = TransferPlan.build(g, List.of(BlockRuns.run(3072, blocks)), g, dest);
        double[][] out = new double[STEPS.length][pushes];
        for (int i = 0; i < pushes; i++) {
            String order = "req-" + tag + "-" + i + "/a1";
            PushRequest r = new PushRequest("req-" + tag + "-" + i, order, 1, "lease-" + i, 1, "decode-0", 7, dest,
                    tokens.sign(order, 1, "decode-0", 7, dest), 0, "worker-0");
            long a = System.nanoTime();
            ReceiveSession s = gate.open("cuda", r, g);
            long b = System.nanoTime();
            RunTable table = RunTable.build(plan, pool, pool, BlockRuns.intervals(dest));
            s.beginFrame();
            for (int k = 0; k < plan.spans(); k++) {
                s.claim(plan.spanRegion(k), plan.spanDestOffset(k), plan.spanLength(k));
            }
            s.endFrame(table.bytes());
            long c = System.nanoTime();
            s.complete();
            s.close();
            long d = System.nanoTime();
            out[0][i] = (b - a) / 1e3;
            out[1][i] = (c - b) / 1e3;
            out[2][i] = (d - c) / 1e3;
            out[3][i] = (d - a) / 1e3;
        }
        return out;
    }

    private static KvPool addresses(KvGeometry g) {
        return new KvPool() {
            @Override
            public KvGeometry geometry() {
                return g;
            }

            @Override
            public String location() {
                return "cuda:bench";
            }

            @Override
            public long baseAddress(int region) {
                return 0x7000_0000_0000L + region * g.regionBytes();
            }

            @Override
            public Optional<MemorySegment> hostRegion(int region) {
                return Optional.empty();
            }

            @Override
            public void close() { }
        };
    }
}
