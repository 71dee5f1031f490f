package io.orbitkv.pd.bench;

import io.orbitkv.pd.engine.sim.ModelPreset;
import io.orbitkv.pd.engine.sim.SimModel;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.harness.HostsOption;
import io.orbitkv.pd.harness.LoadClient;
import io.orbitkv.pd.harness.NetnsHosts;
import io.orbitkv.pd.harness.Pipeline;
import io.orbitkv.pd.harness.PipelineLog;
import io.orbitkv.pd.harness.PipelineSpec;
import io.orbitkv.pd.harness.RawStream;
import io.orbitkv.pd.harness.Samples;
import io.orbitkv.pd.logtools.trace.HandoffAnatomy;
import io.orbitkv.pd.tracing.Hop;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.Callable;
import java.util.stream.Collectors;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code orbitkv-pd bench layerwise}: P/D with the KV pushed whole after the prefill against pushed layer by layer while it
 * computes (docs/worker.md, "Layer by layer"), on separate network hosts whose links are rate-limited below, at and above
 * the rate the modelled prefill makes KV, per prompt length; each layout's colocated TTFT of the same prompts is the
 * baseline its exposed handoff is measured against, and issue 34's targets are judged from the same run.
 */
@Command(name = "layerwise", mixinStandardHelpOptions = true,
        header = "P/D with the KV pushed whole vs layer by layer over rate-limited links, per prompt length (needs root).",
        description = {"The pipeline on separate hosts (network namespaces; --hosts netns, needs root), every link limited by tc tbf to",
                "the rate of the round. One prefill + one decode simulated Java engine on their workers' engine API, pages shaped as",
                "the preset's model (8b: Llama-3-8B, 128 KiB of KV per token), steps timed by the cost model. Two pipelines, the same",
                "requests: worker.layerwise.min-bytes=-1 (whole) and the default (layer by layer). Per link and prompt length, the P/D",
                "requests one at a time, then their colocated twins; every answer checked; the push's anatomy and each process's CPU",
                "from the same run. Writes docs/bench/layerwise.md and bench/results/layerwise.json."})
public final class LayerwiseBenchCommand implements Callable<Integer> {

    private static final String WHOLE = "whole";
    private static final String LAYERWISE = "layer by layer";

    @Option(names = "--tokens", defaultValue = "256,1024,4096,8192", split = ",", description = "Prompt lengths, tokens (default: ${DEFAULT-VALUE}).")
    List<Integer> lengths;

    @Option(names = "--requests", defaultValue = "5", description = "P/D requests (and as many colocated) per link, length and layout, after"
            + " one discarded pair (default: ${DEFAULT-VALUE}).")
    int requests;

    @Option(names = "--hosts", defaultValue = "netns", description = "netns (each component a host of its own; needs root) or loopback"
            + " (then --link none) (default: ${DEFAULT-VALUE}).")
    String hosts;

    @Option(names = "--link", defaultValue = "2gbit,5gbit,10gbit", split = ",", description = "Link rates, tc units (none: unlimited)"
            + " (default: ${DEFAULT-VALUE}).")
    List<String> links;

    @Option(names = "--preset", defaultValue = "8b", description = "The engines' model preset: page shapes (default: ${DEFAULT-VALUE}).")
    String preset;

    @Option(names = "--cost", defaultValue = "per-token", description = "The engines' cost model, engine.cost (default: ${DEFAULT-VALUE}).")
    String cost;

    @Option(names = "--prefill-ms-per-token", defaultValue = "0.2", description = {"With --cost per-token: prefill time per prompt token, ms",
            "(default: ${DEFAULT-VALUE}: 8b's 128 KiB of KV a token made at 0.66 GB/s, 5.2 Gbit/s)."})
    double prefillMsPerToken;

    @Option(names = "--worker", description = "Extra property key=value for both transfer workers, both layouts (repeatable).")
    Map<String, String> workerProps = new LinkedHashMap<>();

    @Option(names = "--layouts", defaultValue = "whole,layer by layer", split = ",", description = "Which layouts to run (default: ${DEFAULT-VALUE}).")
    List<String> layouts;

    @Option(names = "--out", defaultValue = "docs/bench/layerwise.md", description = "Markdown result file (default: ${DEFAULT-VALUE}).")
    Path out;

    private final SimModel model = new SimModel(42);

    /** One (layout, link, length): p50s in ms over the P/D requests and their colocated twins. */
    record Point(String layout, String link, int tokens, int ok, int wrong, int notCompleted, double colocated, double pd, double handoff,
                 double prefill, double transfer, double afterPrefill, double orderAt, long kvBytes, double cpuMsPerRequest, Map<String, Double> cpu,
                 Map<String, Integer> decisions, java.util.Set<String> transports) {
        double exposed() {
            return pd - colocated;
        }
    }

    @Override
    public Integer call() throws Exception {
        boolean netns = HostsOption.netns(hosts, null);
        if (!netns && links.stream().anyMatch(l -> !l.equals("none"))) {
            throw new IllegalArgumentException("--link: rates need --hosts netns (a link of its own per host to limit)");
        }
        ModelPreset p = ModelPreset.of(preset);
        int maxTokens = lengths.stream().mapToInt(Integer::intValue).max().orElse(256);
        int layers = p.geometry(1, 1).numLayers();
        // One request at a time, but its pages come back a moment after its answer (the decider's release): room for two, or
        // for one and a quarter past 8K tokens (a 32K prompt's KV is 4 GiB on each side).
        int blocks = maxTokens / 16 * (maxTokens <= 8192 ? 8 : 5) / 4 + 64;
        List<Point> points = new ArrayList<>();
        Map<String, Double> raw = new LinkedHashMap<>();
        String machine = Runtime.getRuntime().availableProcessors() + " cores (" + MachineInfo.cpuModel() + "), load average before "
                + MachineInfo.loadAverage();
        for (String layout : layouts) {
            if (!layout.equals(WHOLE) && !layout.equals(LAYERWISE)) {
                throw new IllegalArgumentException("--layouts: whole and/or 'layer by layer', got " + layout);
            }
            Map<String, String> worker = new LinkedHashMap<>(workerProps);
            worker.putIfAbsent("worker.layerwise.min-bytes", Long.toString(io.orbitkv.pd.worker.WorkerConfig.DEFAULT_LAYERWISE_MIN_BYTES));
            if (layout.equals(WHOLE)) {
                worker.put("worker.layerwise.min-bytes", "-1");
            }
            PipelineSpec spec = PipelineSpec.defaults().withEngines(1, 1).withModel(p, blocks, prefillMsPerToken, 2.0).withEngineApi(true)
                    .withNetns(netns)
                    // no prefix cache: the colocated twins would leave the decode engine holding the P/D requests' prompts
                    .withExtra(Map.of(), Map.of("engine.cost", cost, "engine.max-batched-tokens", "8192", "engine.kv.verify", "false",
                                    "engine.prefix-cache.enabled", "false", "engine.max-prompt-tokens", Integer.toString(Math.max(32_768, maxTokens + 256))),
                            worker, Map.of());
            Path work = Files.createTempDirectory("orbitkv-bench-layerwise-");
            System.out.println("== " + layout);
            try (Pipeline pipeline = Pipeline.start(spec, work, s -> System.out.println("  " + s));
                 LoadClient client = new LoadClient(pipeline.proxyUrl(), "orbitkv-sim-" + p.key(), null, Duration.ofMinutes(5))) {
                // JIT warm-up of every process's paths before anything counts: 10 pairs of 1,024-token prompts, links unlimited
                for (int i = 0; i < 10; i++) {
                    LoadClient.Request r = new LoadClient.Request(i, false, prompt(1024, 900_000 + i), 4, true, false, LoadClient.Cancel.NONE, 0);
                    client.send(r);
                    client.send(r.colocatedTwin());
                }
                int seed = 0;
                for (String link : links) {
                    if (netns) {
                        NetnsHosts rig = pipeline.hosts().orElseThrow();
                        for (NetnsHosts.Host h : rig.hosts()) {
                            rig.rate(h.name(), link.equals("none") ? null : link);
                        }
                        // one raw TCP stream between the engines' hosts, 128 MiB: what the link carries (each layout's run)
                        raw.merge(link, RawStream.measure(rig, "prefill-0", "decode-0", 128L << 20) / 1e9, Math::max);
                    }
                    for (int tokens : lengths) {
                        Point x = run(pipeline, client, layout, link, tokens, seed++);
                        points.add(x);
                        System.out.println("  " + row(x));
                    }
                }
            }
        }
        List<String> targets = targets(points, raw, layers);
        targets.forEach(System.out::println);
        Files.createDirectories(out.toAbsolutePath().getParent());
        Files.writeString(out, markdown(points, raw, targets, machine, layers));
        Path json = BenchFiles.jsonFor(out);
        Files.writeString(json, json(points, raw));
        System.out.println("Wrote " + out + " and " + json);
        return points.stream().allMatch(x -> x.wrong() == 0 && x.ok() == requests) ? 0 : 1;
    }

    private Point run(Pipeline pipeline, LoadClient client, String layout, String link, int tokens, int seed) throws Exception {
        List<LoadClient.Request> pdWork = new ArrayList<>();
        for (int i = 0; i <= requests; i++) {
            pdWork.add(new LoadClient.Request(i, false, prompt(tokens, seed * 1000 + i), 4, true, false, LoadClient.Cancel.NONE, 0));
        }
        // the first pair warms this length's paths up (pages touched, stripes sized) and is not counted
        client.send(pdWork.get(0));
        client.send(pdWork.get(0).colocatedTwin());
        Map<String, Long> cpu0 = ProcessCpu.millis(pipeline);
        List<LoadClient.Result> pd = new ArrayList<>();
        for (LoadClient.Request r : pdWork.subList(1, pdWork.size())) {
            pd.add(client.send(r));
        }
        Map<String, Double> cpu = ProcessCpu.perRequest(cpu0, ProcessCpu.millis(pipeline), pd.size());
        List<LoadClient.Result> col = new ArrayList<>();
        for (LoadClient.Request r : pdWork.subList(1, pdWork.size())) {
            col.add(client.send(r.colocatedTwin()));
        }
        int wrong = 0;
        for (List<LoadClient.Result> rs : List.of(pd, col)) {
            for (LoadClient.Result r : rs) {
                if (!r.ok() || !r.text().equals(r.request().expected(model))) {
                    if (wrong++ == 0) {
                        System.out.println("  " + tokens + " tokens: " + (r.request().colocated() ? "colocated" : "P/D") + " request " + r.status() + " "
                                + (r.error() != null ? r.error() : "answered '" + r.text() + "', the model says '" + r.request().expected(model) + "'"));
                    }
                }
            }
        }
        PipelineLog log = PipelineLog.readUntilOutcomes(pipeline.bootstrapServers(),
                pd.stream().map(LoadClient.Result::requestId).filter(java.util.Objects::nonNull).toList(), Duration.ofSeconds(30));
        List<Double> prefill = new ArrayList<>();
        List<Double> transfer = new ArrayList<>();
        List<Double> after = new ArrayList<>();
        List<Double> orderAt = new ArrayList<>();
        Map<String, Integer> decisions = new TreeMap<>();
        java.util.Set<String> transports = new java.util.TreeSet<>();
        int notCompleted = 0;
        long kv = 0;
        for (LoadClient.Result r : pd) {
            PipelineLog.Story s = r.requestId() == null ? null : log.stories.get(r.requestId());
            if (s == null || s.outcomes.isEmpty() || s.outcomes.get(0).getKind() != OutcomeKind.COMPLETED) {
                notCompleted++;
                if (s == null) {
                    continue;
                }
            }
            s.facts.stream().filter(f -> f instanceof io.orbitkv.pd.events.TransferStarted)
                    .forEach(f -> transports.add(((io.orbitkv.pd.events.TransferStarted) f).getTransport()));
            decisions.merge(s.decisions.stream().map(d -> d.getClass().getSimpleName()).collect(Collectors.joining(" ")), 1, Integer::sum);
            HandoffAnatomy a = s.anatomy();
            kv = Math.max(kv, a.transferBytes());
            if (a.transferMicros() > 0) {
                transfer.add(a.transferMicros() / 1e3);
            }
            Long begun = null;
            Long computed = null;
            Long landed = null;
            Long taken = null;
            for (HandoffAnatomy.Span sp : a.spans()) {
                if (sp.hop() == Hop.PREFILL_COMPUTE) {
                    prefill.add(sp.micros() / 1e3);
                    begun = sp.fromMicros();
                    computed = sp.toMicros();
                } else if (sp.hop() == Hop.LANDED_TO_ENGINE) {
                    landed = sp.fromMicros();
                } else if (sp.hop() == Hop.WORKER_QUEUE) {
                    taken = sp.toMicros(); // the prefill worker took the order up (layer by layer: it then waits for the first report)
                }
            }
            if (computed != null && landed != null) {
                after.add((landed - computed) / 1e3);
            }
            if (begun != null && taken != null) {
                orderAt.add((taken - begun) / 1e3);
            }
            if (r == pd.get(pd.size() - 1)) { // one request's hops on the console, from its prefill's start
                long zero = a.spans().stream().filter(sp -> sp.hop() == Hop.PREFILL_COMPUTE).mapToLong(HandoffAnatomy.Span::fromMicros).findFirst()
                        .orElse(a.startMicros());
                System.out.println("    hops of " + r.requestId() + " (ms from its prefill's start): " + a.spans().stream()
                        .map(sp -> String.format(Locale.ROOT, "%s %.1f..%.1f", sp.hop().key(), (sp.fromMicros() - zero) / 1e3, (sp.toMicros() - zero) / 1e3))
                        .collect(Collectors.joining(", ")));
            }
        }
        double cpuTotal = cpu.values().stream().mapToDouble(Double::doubleValue).sum();
        return new Point(layout, link, tokens, (int) pd.stream().filter(LoadClient.Result::ok).count(), wrong, notCompleted,
                Samples.pct(Samples.ttftMs(col), 50), Samples.pct(Samples.ttftMs(pd), 50), Samples.pct(Samples.handoffMs(pd), 50),
                Samples.pct(Samples.ascending(prefill), 50), Samples.pct(Samples.ascending(transfer), 50), Samples.pct(Samples.ascending(after), 50),
                Samples.pct(Samples.ascending(orderAt), 50), kv, cpuTotal, cpu, decisions, transports);
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
        return String.format(Locale.ROOT, "%-15s %-7s %6d tokens  KV %7.1f MiB  colocated %7.1f  P/D %7.1f  exposed %7.1f  prefill %7.1f"
                        + "  transfer %7.1f  landed after prefill %7.1f  order at %7.1f ms  CPU %6.1f ms/req  via %s%s", x.layout(), x.link(), x.tokens(), x.kvBytes() / 1048576.0,
                x.colocated(), x.pd(), x.exposed(), x.prefill(), x.transfer(), x.afterPrefill(), x.orderAt(), x.cpuMsPerRequest(), String.join("+", x.transports()),
                x.wrong() + x.notCompleted() > 0 ? "  WRONG " + x.wrong() + " NOT COMPLETED " + x.notCompleted() : "");
    }

    private static Point find(List<Point> ps, String layout, String link, int tokens) {
        return ps.stream().filter(x -> x.layout().equals(layout) && x.link().equals(link) && x.tokens() == tokens).findFirst().orElse(null);
    }

    /** Issue 34's targets, each judged per (link, length) from this run. */
    private List<String> targets(List<Point> ps, Map<String, Double> raw, int layers) {
        List<String> out = new ArrayList<>();
        for (Point l : ps) {
            Point w = find(ps, WHOLE, l.link(), l.tokens());
            if (!l.layout().equals(LAYERWISE) || w == null) {
                continue;
            }
            Double gbs = raw.get(l.link());
            double t = gbs == null ? w.transfer() : l.kvBytes() / (gbs * 1e6); // ms the link needs for the KV
            double bound = Math.max(0, t - l.prefill()) + t / layers + 2;
            // What the P/D path costs beside the push (proxy, engine API, the decode engine's start), from the whole
            // layout of the same link and length: its exposed handoff less its push.
            double fixed = w.exposed() - w.transfer();
            double cut = 100 * (w.pd() - l.pd()) / w.pd();
            out.add(String.format(Locale.ROOT, "%s, %d tokens (%.0f MiB): exposed %.1f ms layer by layer (whole %.1f) vs bound %.1f ms"
                            + " [max(0, transfer %.1f − prefill %.1f) + one layer %.1f + 2] %s; beyond the P/D path's own %.1f ms: %.1f %s;"
                            + " landed %.1f ms after the prefill (whole %.1f); P/D TTFT %.1f → %.1f ms (%s%.0f %%); CPU %.1f → %.1f ms a request (%.2f×) %s",
                    l.link(), l.tokens(), l.kvBytes() / 1048576.0, l.exposed(), w.exposed(), bound, t, l.prefill(), t / layers,
                    l.exposed() <= bound ? "met" : "not met", fixed, l.exposed() - fixed, l.exposed() - fixed <= bound ? "met" : "not met",
                    l.afterPrefill(), w.afterPrefill(), w.pd(), l.pd(), cut >= 0 ? "−" : "+", Math.abs(cut), w.cpuMsPerRequest(), l.cpuMsPerRequest(),
                    l.cpuMsPerRequest() / w.cpuMsPerRequest(), l.cpuMsPerRequest() <= 1.2 * w.cpuMsPerRequest() ? "met" : "not met"));
        }
        return out;
    }

    private String markdown(List<Point> ps, Map<String, Double> raw, List<String> targets, String machine, int layers) {
        StringBuilder b = new StringBuilder("# Layer by layer: P/D with the KV pushed whole vs layer by layer, over rate-limited links\n\n");
        b.append("Measured ").append(LocalDate.now()).append(" on ").append(machine).append(" by `./orbitkv-pd bench layerwise --tokens ")
                .append(lengths.stream().map(String::valueOf).collect(Collectors.joining(","))).append(" --requests ").append(requests)
                .append(" --hosts ").append(hosts).append(" --link ").append(String.join(",", links)).append(" --preset ").append(preset)
                .append(" --cost ").append(cost).append(cost.equals("per-token") ? " --prefill-ms-per-token " + prefillMsPerToken : "")
                .append(workerProps.entrySet().stream().map(e -> " --worker " + e.getKey() + "=" + e.getValue()).collect(Collectors.joining()))
                .append(layouts.size() == 2 ? "" : " --layouts '" + String.join(",", layouts) + "'").append("`.\n\n")
                .append(hosts.equals("netns") ? "The pipeline on separate hosts (network namespaces on a bridge: broker, decider, prefill node,"
                        + " decode node, proxy), every host's link limited to the row's rate (tc tbf both ways)." : "The pipeline on this one host"
                        + " (loopback), links not limited.")
                .append(workerProps.isEmpty() ? "" : " Workers: " + workerProps.entrySet().stream().map(e -> "`" + e.getKey() + "=" + e.getValue() + "`")
                        .collect(Collectors.joining(", ")) + ".")
                .append(" One prefill + one decode simulated Java engine on their"
                        + " workers' engine API, pages shaped as the `").append(preset).append("` preset's model (").append(layers)
                .append(" layers), steps timed by `").append(cost).append('`')
                .append(cost.equals("per-token") ? String.format(Locale.ROOT, " at %.2f ms a prompt token: the engine makes KV at %.2f GB/s",
                        prefillMsPerToken, 131072 / (prefillMsPerToken * 1e6)) : "")
                .append(". Per link and length: one discarded pair, then ").append(requests).append(" P/D requests one at a time, then their"
                        + " colocated twins (the baseline, same pipeline); 4 tokens out; every answer checked. *whole*: `worker.layerwise.min-bytes=-1`"
                        + " (the push starts at the prefill's end); *layer by layer*: the default (")
                .append(io.orbitkv.pd.worker.WorkerConfig.DEFAULT_LAYERWISE_MIN_BYTES >> 20).append(" MiB), the engine reporting its"
                        + " prefill's progress once a layer (`engine.layerwise.reports-per-step`, 32). p50s, ms. *exposed*: P/D TTFT − colocated TTFT; *prefill*: the engine's compute;"
                        + " *transfer*: push start → every byte acknowledged; *landed after prefill*: the prefill's end → the last byte in the"
                        + " decode pool (the transfer left on TTFT); *order at the prefill worker*: the prefill's start → its worker took the order up"
                        + " (whole: at the prefill's end; layer by layer: ahead of it, from the decider at the decode engine's DecodeReady); *CPU*: every process's CPU ms per P/D request (broker, decider, engines,"
                        + " workers, proxy, load generator) over the P/D requests.\n\n");
        if (!raw.isEmpty()) {
            b.append("Raw stream (one plain TCP stream of 128 MiB between the engines' hosts, best of the two pipelines): ")
                    .append(raw.entrySet().stream().map(e -> String.format(Locale.ROOT, "%s %.2f GB/s", e.getKey(), e.getValue()))
                            .collect(Collectors.joining(", "))).append(".\n\n");
        }
        b.append("| link | prompt tokens | KV MiB | layout | colocated TTFT | P/D TTFT | exposed | handoff | prefill | transfer | landed after prefill"
                + " | order at the prefill worker | CPU ms / request | transport | wrong | not completed |\n");
        b.append("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: |\n");
        for (String link : links) {
            for (int t : lengths) {
                for (String layout : List.of(WHOLE, LAYERWISE)) {
                    Point x = find(ps, layout, link, t);
                    if (x != null) {
                        b.append(String.format(Locale.ROOT, "| %s | %d | %.0f | %s | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %s | %d | %d |%n",
                                link, t, x.kvBytes() / 1048576.0, layout, x.colocated(), x.pd(), x.exposed(), x.handoff(), x.prefill(), x.transfer(),
                                x.afterPrefill(), x.orderAt(), x.cpuMsPerRequest(), String.join("+", x.transports()), x.wrong(), x.notCompleted()));
                    }
                }
            }
        }
        b.append("\n## Targets (issue 34), per link and length\n\n");
        targets.forEach(t -> b.append("- ").append(t).append('\n'));
        b.append("\n## The decider's decisions per request, by layout (kinds in order: count of requests)\n\n");
        for (String layout : List.of(WHOLE, LAYERWISE)) {
            Map<String, Integer> all = new TreeMap<>();
            ps.stream().filter(x -> x.layout().equals(layout)).forEach(x -> x.decisions().forEach((k, v) -> all.merge(k, v, Integer::sum)));
            b.append("- ").append(layout).append(": ").append(all.entrySet().stream().map(e -> "`" + e.getKey() + "`: " + e.getValue())
                    .collect(Collectors.joining("; "))).append('\n');
        }
        b.append("\n## CPU ms per P/D request, by process (the longest prompt, each link)\n\n");
        int longest = lengths.stream().mapToInt(Integer::intValue).max().orElse(0);
        for (String link : links) {
            for (String layout : List.of(WHOLE, LAYERWISE)) {
                Point x = find(ps, layout, link, longest);
                if (x != null) {
                    b.append("- ").append(link).append(", ").append(layout).append(": ").append(x.cpu().entrySet().stream()
                            .map(e -> String.format(Locale.ROOT, "%s %.1f", e.getKey(), e.getValue())).collect(Collectors.joining(", "))).append('\n');
                }
            }
        }
        return b.toString();
    }

    private String json(List<Point> ps, Map<String, Double> raw) {
        com.fasterxml.jackson.databind.ObjectMapper m = new com.fasterxml.jackson.databind.ObjectMapper();
        com.fasterxml.jackson.databind.node.ObjectNode root = m.createObjectNode().put("date", LocalDate.now().toString()).put("hosts", hosts)
                .put("preset", preset).put("cost", cost).put("prefill_ms_per_token", prefillMsPerToken).put("requests", requests);
        com.fasterxml.jackson.databind.node.ObjectNode r = root.putObject("raw_stream_gb_per_s");
        raw.forEach(r::put);
        com.fasterxml.jackson.databind.node.ArrayNode a = root.putArray("points");
        for (Point x : ps) {
            com.fasterxml.jackson.databind.node.ObjectNode o = a.addObject().put("layout", x.layout()).put("link", x.link()).put("prompt_tokens", x.tokens())
                    .put("kv_bytes", x.kvBytes()).put("ok", x.ok()).put("wrong", x.wrong()).put("not_completed", x.notCompleted())
                    .put("colocated_ttft_p50_ms", x.colocated()).put("pd_ttft_p50_ms", x.pd()).put("exposed_ms", x.exposed())
                    .put("handoff_p50_ms", x.handoff()).put("prefill_p50_ms", x.prefill()).put("transfer_p50_ms", x.transfer())
                    .put("transports", String.join("+", x.transports())).put("landed_after_prefill_p50_ms", x.afterPrefill()).put("order_at_prefill_worker_p50_ms", x.orderAt()).put("cpu_ms_per_request", x.cpuMsPerRequest());
            x.cpu().forEach(o.putObject("cpu_ms_per_request_by_process")::put);
            x.decisions().forEach(o.putObject("decisions")::put);
        }
        return root.toPrettyString();
    }
}
