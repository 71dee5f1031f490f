package io.orbitkv.pd.bench;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.orbitkv.pd.gpu.HostPathWarmUp;
import io.orbitkv.pd.harness.Samples;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDate;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
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

    /** {@code pushes} pushes on a gate of their own (the warm-up's pushes, timed): per step, µs per push. */
    private double[][] measure(String tag) {
        HostPathWarmUp path = new HostPathWarmUp(4096, blocks, tag);
        double[][] out = new double[STEPS.length][pushes];
        long[] at = new long[4];
        for (int i = 0; i < pushes; i++) {
            if (!path.push(i, at)) {
                throw new IllegalStateException("push " + i + " of the " + tag + " phase did not complete");
            }
            out[0][i] = (at[1] - at[0]) / 1e3;
            out[1][i] = (at[2] - at[1]) / 1e3;
            out[2][i] = (at[3] - at[2]) / 1e3;
            out[3][i] = (at[3] - at[0]) / 1e3;
        }
        return out;
    }
}
