package io.orbitkv.pd.bench;

import io.orbitkv.pd.harness.Pipeline;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code orbitkv-pd bench vllm-connector}: what the vLLM connector ({@code orbitkv_pd.vllm}) adds on a request's handoff
 * path over the engine API alone. The measurement is the Python library's own ({@code python/orbitkv_pd/bench_vllm_connector.py}:
 * both engines are Python, as the connector is); this command runs it and relays its table.
 */
@Command(name = "vllm-connector", mixinStandardHelpOptions = true,
        header = "The vLLM connector's cost on the handoff's path, against the engine API alone, in the same run.",
        description = {"Two Python engines in one process on one scripted engine API worker in another: one calls the engine API client",
                "itself, one goes through the vLLM connector called as vLLM calls it (orbitkv_pd.vllm_sim); requests alternate. Per request:",
                "decode-ready (allocation -> the worker has the fact), kv in (the worker sends kv_ready -> the decode may run),",
                "prefill-completed (the prefill finished -> the worker has the fact). Writes docs/bench/vllm-connector.md and",
                "bench/results/vllm-connector.json."})
public final class VllmConnectorBenchCommand implements Callable<Integer> {

    @Option(names = "--requests", defaultValue = "2000", description = "Measured requests per engine (default: ${DEFAULT-VALUE}).")
    int requests;

    @Option(names = "--warmup", defaultValue = "200", description = "Requests per engine before measuring (default: ${DEFAULT-VALUE}).")
    int warmup;

    @Option(names = "--blocks", defaultValue = "64", description = "Pages a request holds (default: ${DEFAULT-VALUE}).")
    int blocks;

    @Option(names = "--out", defaultValue = "docs/bench/vllm-connector.md", description = "Markdown result file (default: ${DEFAULT-VALUE}).")
    Path out;

    @Override
    public Integer call() throws Exception {
        Path json = BenchFiles.jsonFor(out).toAbsolutePath();
        List<String> cmd = List.of("python3", "-m", "orbitkv_pd.bench_vllm_connector", "--requests", Integer.toString(requests), "--warmup",
                Integer.toString(warmup), "--blocks", Integer.toString(blocks), "--out", out.toAbsolutePath().toString(), "--json",
                json.toString());
        Process p = new ProcessBuilder(cmd).directory(Pipeline.pythonDir().toFile()).inheritIO().start();
        return p.waitFor();
    }
}
