package io.orbitkv.pd.bench;

import io.orbitkv.pd.engine.sim.ModelPreset;
import io.orbitkv.pd.engine.sim.SimModel;
import io.orbitkv.pd.harness.LoadClient;
import io.orbitkv.pd.harness.Pipeline;
import io.orbitkv.pd.harness.PipelineSpec;
import io.orbitkv.pd.harness.Samples;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code orbitkv-pd bench layerwise}: TTFT of P/D with the KV pushed whole after the prefill against pushed layer by layer
 * while it computes (docs/worker.md, "Layer by layer"), over a link slower than the engine makes KV, per prompt length; the
 * colocated TTFT of the same prompts in the same pipeline is the baseline the exposed handoff is measured against.
 */
@Command(name = "layerwise", mixinStandardHelpOptions = true,
        header = "P/D TTFT with the KV pushed whole vs layer by layer over a rate-limited link, per prompt length.",
        description = {"One prefill + one decode simulated Java engine on their workers' engine API, pages shaped as the preset's model",
                "(8b: Llama-3-8B, 128 KiB of KV per token), steps timed by the cost model; the prefill worker's tcp sends at most",
                "--link bytes/s. Two pipelines, the same requests: worker.layerwise.min-bytes=-1 (whole) and the default (layer by",
                "layer). Per prompt length, requests one at a time, each P/D request after its colocated twin; every answer checked.",
                "Writes docs/bench/layerwise.md and bench/results/layerwise.json."})
public final class LayerwiseBenchCommand implements Callable<Integer> {

    @Option(names = "--tokens", defaultValue = "128,1024,4096", split = ",", description = "Prompt lengths, tokens (default: ${DEFAULT-VALUE}).")
    List<Integer> lengths;

    @Option(names = "--requests", defaultValue = "6", description = "P/D requests (and as many colocated) per length and layout (default: ${DEFAULT-VALUE}).")
    int requests;

    @Option(names = "--link", defaultValue = "1250000000", description = "The prefill worker's send rate, bytes/s (default: ${DEFAULT-VALUE}, 10 Gbit/s).")
    long link;

    @Option(names = "--preset", defaultValue = "8b", description = "The engines' model preset: page shapes (default: ${DEFAULT-VALUE}).")
    String preset;

    @Option(names = "--cost", defaultValue = "llama-8b-h100", description = "The engines' cost model, engine.cost (default: ${DEFAULT-VALUE}).")
    String cost;

    @Option(names = "--prefill-ms-per-token", defaultValue = "0.05",
            description = "With --cost per-token: prefill time per prompt token, ms (default: ${DEFAULT-VALUE}).")
    double prefillMsPerToken;

    @Option(names = "--out", defaultValue = "docs/bench/layerwise.md", description = "Markdown result file (default: ${DEFAULT-VALUE}).")
    Path out;

    private final SimModel model = new SimModel(42);

    /** One length under one layout: colocated and P/D TTFT p50, handoff p50, and what moved. */
    record Point(String layout, int tokens, int ok, int wrong, double colocatedP50, double pdP50, double handoffP50, long kvBytes) {
        double exposed() {
            return pdP50 - colocatedP50;
        }
    }

    @Override
    public Integer call() throws Exception {
        ModelPreset p = ModelPreset.of(preset);
        int maxTokens = lengths.stream().mapToInt(Integer::intValue).max().orElse(128);
        int blocks = (maxTokens + 64) / 16 + 16; // one prompt at a time (and its colocated twin's, which has finished) fits
        List<Point> points = new ArrayList<>();
        String machine = MachineInfo.cpuModel() + ", load average before " + MachineInfo.loadAverage();
        for (String layout : List.of("whole", "layer by layer")) {
            String minBytes = layout.equals("whole") ? "-1" : Long.toString(io.orbitkv.pd.worker.WorkerConfig.DEFAULT_LAYERWISE_MIN_BYTES);
            PipelineSpec spec = PipelineSpec.defaults().withEngines(1, 1).withModel(p, blocks, prefillMsPerToken, 2.0).withEngineApi(true)
                    // no prefix cache: each P/D request follows its colocated twin, which would leave the decode engine holding it
                    .withExtra(Map.of(), Map.of("engine.cost", cost, "engine.max-batched-tokens", "8192", "engine.kv.verify", "false",
                                    "engine.prefix-cache.enabled", "false"),
                            Map.of("worker.layerwise.min-bytes", minBytes, "transfer.tcp.max-bytes-per-second", Long.toString(link)), Map.of());
            Path work = Files.createTempDirectory("orbitkv-bench-layerwise-");
            System.out.println("== " + layout);
            try (Pipeline pipeline = Pipeline.start(spec, work, s -> System.out.println("  " + s));
                 LoadClient client = new LoadClient(pipeline.proxyUrl(), "orbitkv-sim-" + p.key())) {
                for (int tokens : lengths) {
                    points.add(run(client, layout, tokens));
                    System.out.println("  " + row(points.get(points.size() - 1)));
                }
            }
        }
        List<String> findings = findings(points);
        findings.forEach(System.out::println);
        Files.createDirectories(out.toAbsolutePath().getParent());
        Files.writeString(out, markdown(points, findings, machine));
        Path json = BenchFiles.jsonFor(out);
        Files.writeString(json, json(points));
        System.out.println("Wrote " + out + " and " + json);
        return points.stream().allMatch(x -> x.wrong() == 0 && x.ok() == requests) ? 0 : 1;
    }

    private Point run(LoadClient client, String layout, int tokens) {
        List<Double> colocated = new ArrayList<>();
        List<LoadClient.Result> pd = new ArrayList<>();
        int wrong = 0;
        for (int i = -2; i < requests; i++) { // two discarded warm-up pairs
            String prompt = prompt(tokens, i);
            LoadClient.Request r = new LoadClient.Request(i, false, prompt, 4, true, false, LoadClient.Cancel.NONE, 0);
            LoadClient.Result c = client.send(r.colocatedTwin());
            LoadClient.Result x = client.send(r);
            if (i < 0) {
                continue;
            }
            if (!c.ok() || !x.ok() || !x.text().equals(r.expected(model)) || !c.text().equals(r.expected(model))) {
                if (wrong++ == 0) {
                    LoadClient.Result bad = x.ok() ? c : x;
                    System.out.println("  " + tokens + " tokens: " + (bad.request().colocated() ? "colocated" : "P/D") + " request " + bad.status() + " "
                            + (bad.error() != null ? bad.error() : "answered '" + bad.text() + "', the model says '" + r.expected(model) + "'"));
                }
                continue;
            }
            colocated.add(c.ttftNanos() / 1e6);
            pd.add(x);
        }
        double[] ttft = Samples.ttftMs(pd);
        return new Point(layout, tokens, pd.size(), wrong, Samples.pct(colocated.stream().mapToDouble(Double::doubleValue).toArray(), 50),
                Samples.pct(ttft, 50), Samples.pct(Samples.handoffMs(pd), 50), pd.isEmpty() ? 0 : pd.get(0).kvBytes());
    }

    /** A prompt of {@code tokens} tokens as the engines tokenize it (its number first: no two share a block). */
    static String prompt(int tokens, int i) {
        StringBuilder b = new StringBuilder("prompt ").append(tokens).append(' ').append(i);
        String[] words = {"north", "south", "east", "west"};
        for (int w = 0; SimModel.tokenize(b.toString()).length < tokens; w++) {
            b.append(' ').append(words[w % words.length]);
        }
        return b.toString();
    }

    private static String row(Point x) {
        return String.format(Locale.ROOT, "%-15s %6d tokens  KV %7.1f MiB  colocated %7.1f ms  P/D %7.1f ms  exposed %7.1f ms  handoff %7.1f ms%s",
                x.layout(), x.tokens(), x.kvBytes() / 1048576.0, x.colocatedP50(), x.pdP50(), x.exposed(), x.handoffP50(),
                x.wrong() > 0 ? "  WRONG " + x.wrong() : "");
    }

    private static List<String> findings(List<Point> ps) {
        List<String> out = new ArrayList<>();
        for (Point w : ps) {
            if (!w.layout().equals("whole")) {
                continue;
            }
            ps.stream().filter(l -> !l.layout().equals("whole") && l.tokens() == w.tokens()).findFirst().ifPresent(l -> out.add(String.format(Locale.ROOT,
                    "%d tokens (%.0f MiB of KV): exposed handoff %.1f ms whole, %.1f ms layer by layer (%.0f %% of it); P/D TTFT %.1f -> %.1f ms, "
                            + "%.1f %% of the colocated TTFT (%.1f ms) exposed layer by layer.", w.tokens(), w.kvBytes() / 1048576.0, w.exposed(),
                    l.exposed(), 100 * l.exposed() / w.exposed(), w.pdP50(), l.pdP50(), 100 * l.exposed() / l.colocatedP50(), l.colocatedP50())));
        }
        return out;
    }

    private String markdown(List<Point> ps, List<String> findings, String machine) {
        StringBuilder b = new StringBuilder("# Layer by layer: P/D TTFT with the KV pushed whole vs layer by layer\n\n");
        b.append("Measured ").append(LocalDate.now()).append(" by `./orbitkv-pd bench layerwise --tokens ")
                .append(String.join(",", lengths.stream().map(String::valueOf).toList())).append(" --requests ").append(requests).append(" --link ")
                .append(link).append(" --preset ").append(preset).append(" --cost ").append(cost)
                .append(cost.equals("per-token") ? " --prefill-ms-per-token " + prefillMsPerToken : "").append("` on ").append(machine)
                .append(". One prefill + one decode simulated Java engine on their workers' engine API, pages shaped as the `").append(preset)
                .append("` preset's model, steps timed by `").append(cost).append("`; the prefill worker's tcp sends at most ")
                .append(String.format(Locale.ROOT, "%.2f GB/s", link / 1e9)).append(" (`transfer.tcp.max-bytes-per-second`: a link slower than the engine"
                        + " makes KV). Per length, ").append(requests).append(" P/D requests one at a time, each after its colocated twin on the same"
                        + " pipeline (the baseline), 2 discarded warm-up pairs; 4 tokens out; every answer checked. Whole: `worker.layerwise.min-bytes=-1`"
                        + " (the push starts at the prefill's end); layer by layer: the default (8 MiB), the engine reporting its prefill's progress"
                        + " 8 times a step. Exposed: P/D TTFT p50 − colocated TTFT p50. Handoff: the proxy's prefill answered → decode's first byte.\n\n");
        b.append("| layout | prompt tokens | KV MiB | colocated TTFT p50 (ms) | P/D TTFT p50 (ms) | exposed (ms) | handoff p50 (ms) |\n");
        b.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        for (Point x : ps) {
            b.append(String.format(Locale.ROOT, "| %s | %d | %.1f | %.1f | %.1f | %.1f | %.1f |%n", x.layout(), x.tokens(), x.kvBytes() / 1048576.0,
                    x.colocatedP50(), x.pdP50(), x.exposed(), x.handoffP50()));
        }
        b.append('\n');
        findings.forEach(f -> b.append("- ").append(f).append('\n'));
        return b.toString();
    }

    private String json(List<Point> ps) {
        com.fasterxml.jackson.databind.ObjectMapper m = new com.fasterxml.jackson.databind.ObjectMapper();
        com.fasterxml.jackson.databind.node.ObjectNode root = m.createObjectNode().put("date", LocalDate.now().toString()).put("link_bytes_per_s", link)
                .put("preset", preset).put("cost", cost).put("requests", requests);
        com.fasterxml.jackson.databind.node.ArrayNode a = root.putArray("points");
        for (Point x : ps) {
            a.addObject().put("layout", x.layout()).put("prompt_tokens", x.tokens()).put("kv_bytes", x.kvBytes()).put("ok", x.ok()).put("wrong", x.wrong())
                    .put("colocated_ttft_p50_ms", x.colocatedP50()).put("pd_ttft_p50_ms", x.pdP50()).put("exposed_ms", x.exposed())
                    .put("handoff_p50_ms", x.handoffP50());
        }
        return root.toPrettyString();
    }
}
