package io.orbitkv.pd.cli.demo;

import static io.orbitkv.pd.harness.Samples.pct;

import io.orbitkv.pd.harness.LoadClient;
import io.orbitkv.pd.harness.MixedWorkload;
import io.orbitkv.pd.harness.Pipeline;
import io.orbitkv.pd.harness.EngineJoin;
import io.orbitkv.pd.harness.HostsOption;
import io.orbitkv.pd.harness.PipelineSpec;
import io.orbitkv.pd.harness.PipelineLog;
import io.orbitkv.pd.harness.Samples;
import io.orbitkv.pd.engine.sim.ModelPreset;
import io.orbitkv.pd.engine.sim.SimModel;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.tracing.Hop;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code orbitkv-pd demo}: the whole pipeline on this machine — a real broker, the decider, a prefill and a decode
 * engine with their transfer workers (tcp) and the proxy, each its own process — and a workload through it, then a
 * summary read from the log. Exits 0 only if every answer equals the colocated reference.
 * {@code --events} runs the foundation demo instead (one event of every type through the broker, as a timeline).
 */
@Command(name = "demo", mixinStandardHelpOptions = true,
        header = "Runs the whole P/D pipeline on this machine, sends it load and prints what it measured.",
        description = {"Runs the whole P/D pipeline on this machine, every component its own process: an embedded KRaft broker, the",
                "decider, a prefill and a decode engine (simulated: each computes one step at a time as Llama-3.1-8B on an H100 does)",
                "with their transfer workers (tcp), and the proxy; sends a mixed workload (Poisson arrivals at a few rates) to P/D",
                "(1 prefill + 1 decode engine) and to the same two engines colocated, and prints TTFT, ITL, TPOT and goodput against",
                "the SLOs it judges by, the handoff, and the outcomes from the log. Exits 0 only if every answer equals the",
                "colocated reference. --events shows the foundation event timeline instead."})
public final class DemoCommand implements Callable<Integer> {

    /** Bars are redrawn in place only on a terminal (JDK 22+: {@code System.console()} exists even when redirected). */
    private static final boolean ON_TERMINAL = System.console() != null && System.console().isTerminal();

    @Option(names = "--events", description = "Send one event of every type through the broker and print the timeline (the foundation demo).")
    boolean events;

    @Option(names = "--work-dir", description = "Where configs, logs and broker data go (default: a new temporary directory).")
    Path workDir;

    @Option(names = "--keep", description = "--events: keep the broker's data and logs after the demo.")
    boolean keep;

    @Option(names = "--rates", defaultValue = "2,4,8", split = ",", description = "Arrival rates (requests/s, Poisson) of the mixed workload"
            + " (default: ${DEFAULT-VALUE}).")
    List<Double> rates;

    @Option(names = "--seconds", defaultValue = "7", description = "Seconds of arrivals per rate and layout (default: ${DEFAULT-VALUE}).")
    double seconds;

    @Option(names = "--slo-ttft-ms", defaultValue = "500", description = "Time-to-first-token objective of goodput (default: ${DEFAULT-VALUE}).")
    double sloTtftMs;

    @Option(names = "--slo-tpot-ms", defaultValue = "8", description = "Time-per-output-token objective of goodput: a request's mean inter-token"
            + " latency (default: ${DEFAULT-VALUE}: 1.25 times the 8B model's decode step at zero load, 6.5 ms).")
    double sloTpotMs;

    @Option(names = "--preset", defaultValue = "tiny", description = "The KV pages' shape: tiny (2 KiB a token), 8b (128 KiB a token), 70b"
            + " (default: ${DEFAULT-VALUE}: 8B-shaped KV of these prompts at these rates is more than 2 cores can copy; bench transport measures it).")
    String preset;

    @Option(names = "--cost", defaultValue = "llama-8b-h100", description = "How long the engines' steps take (engine.cost: llama-8b-h100,"
            + " llama-70b-tp4, tiny, per-token; default: ${DEFAULT-VALUE}).")
    String cost;

    @Option(names = "--routing", defaultValue = "least_in_flight", description = "The proxy's routing policy (proxy.routing): round_robin,"
            + " least_in_flight or prefix_aware (the engines' cached prefix against load, docs/routing.md); every answer's routing decision"
            + " is in the log (trace shows it) (default: ${DEFAULT-VALUE}).")
    String routing;

    @Option(names = "--local-prefill", description = "Conditional disaggregation (proxy.routing.local-prefill): a P/D request is prefilled on"
            + " its decode engine when that engine already holds most of the prompt.")
    boolean localPrefill;

    @Option(names = "--prefill-engines", defaultValue = "1", description = "Prefill engines (default: ${DEFAULT-VALUE}).")
    int prefillEngines;

    @Option(names = "--decode-engines", defaultValue = "1", description = "Decode engines (default: ${DEFAULT-VALUE}).")
    int decodeEngines;

    @Option(names = "--python-engines", split = ",", description = "Run these engines (e.g. decode-0 or prefill-0,decode-0) as the Python"
            + " simulated engine (python/orbitkv_pd) on their worker's engine API; the rest run the Java engine. Default: none.")
    List<String> pythonEngines = new ArrayList<>();

    @Option(names = "--via-vllm-connector", description = "Every engine runs as the Python simulated engine whose P/D flow goes through the"
            + " vLLM connector (orbitkv_pd.vllm, the code a vLLM user loads), called as vLLM's scheduler and model runner call it"
            + " (engine.vllm-connector; docs/vllm.md).")
    boolean viaVllmConnector;

    @Option(names = "--engines", defaultValue = "api", description = "How the Java engines join: api (their workers' engine API, as the Python"
            + " engines and vLLM/SGLang engines do; the worker starts the push on the engine's own prefill report and hands the decode engine"
            + " its KV as it lands) or kafka (Kafka clients of their own) (default: ${DEFAULT-VALUE}).")
    EngineJoin engines;

    @Option(names = "--stay", description = "Keep the pipeline and the dashboard running after the summary (to query the decider, engines and"
            + " dashboard) until Ctrl-C.")
    boolean stay;

    @Option(names = "--no-dashboard", description = "Do not start the dashboard (by default it runs as one more process; its URL is printed).")
    boolean noDashboard;

    @Option(names = "--bootstrap", description = "Run on this Kafka cluster (e.g. './orbitkv-pd broker' at 127.0.0.1:9092) instead of an"
            + " embedded broker: the log outlives the demo, for trace, audit and replay.")
    String bootstrap;

    @Option(names = "--hosts", description = {"Where the components run: loopback (default: every process on 127.0.0.1) or netns (each",
            "broker, decider, engine node, proxy and the dashboard on a network namespace of its own with its own address; needs root;",
            "docs/deploy.md, \"Several hosts on one machine\")."})
    String hosts = "loopback";

    @Option(names = "--link", description = "With --hosts netns: every host's link limited to this rate (tc: 10gbit, 1gbit, 500mbit).")
    String link;

    @Override
    public Integer call() throws Exception {
        if (events) {
            return EventsDemo.run(workDir, keep);
        }
        PrintStream out = System.out;
        Path dir = workDir != null ? workDir.toAbsolutePath() : Files.createTempDirectory("orbitkv-demo-");
        long t0 = System.nanoTime();
        out.println("OrbitKV P/D demo: the whole pipeline, each component its own process, under " + dir);
        if (viaVllmConnector) {
            // the connector is Python: every engine is the Python engine, driving its P/D flow through it
            pythonEngines = new ArrayList<>();
            for (int i = 0; i < prefillEngines; i++) {
                pythonEngines.add("prefill-" + i);
            }
            for (int i = 0; i < decodeEngines; i++) {
                pythonEngines.add("decode-" + i);
            }
            out.println("  every engine: the Python simulated engine through the vLLM connector (orbitkv_pd.vllm), called as vLLM calls it");
        }
        java.util.Map<String, String> engineKeys = viaVllmConnector ? java.util.Map.of("engine.cost", cost, "engine.vllm-connector", "true")
                : java.util.Map.of("engine.cost", cost);
        PipelineSpec spec = PipelineSpec.defaults().withEngines(prefillEngines, decodeEngines)
                .withModel(ModelPreset.of(preset), ModelPreset.of(preset) == ModelPreset.TINY ? 4096 : 512, 0.05, 2.0)
                .withExtra(java.util.Map.of(), engineKeys, java.util.Map.of(), java.util.Map.of("proxy.routing", routing,
                        "proxy.routing.local-prefill", Boolean.toString(localPrefill))).withDashboard(!noDashboard).withPythonEngines(java.util.Set.copyOf(pythonEngines))
                .withEngineApi(engines == EngineJoin.api).withNetns(HostsOption.netns(hosts, link)).withLink(link);
        SimModel model = new SimModel(42);
        try (Pipeline p = Pipeline.start(spec, dir, s -> out.println("  " + s), bootstrap);
             LoadClient client = new LoadClient(p.proxyUrl(), "orbitkv-sim-" + ModelPreset.of(preset).key())) {
            out.println("  proxy " + p.proxyUrl() + "   decider queries " + p.deciderUrl());
            if (p.dashboardUrl() != null) {
                out.println("  dashboard " + p.dashboardUrl() + "  (live statistics from the log; Prometheus " + p.dashboardUrl() + "metrics)");
            }
            MixedWorkload.Slo slo = new MixedWorkload.Slo(sloTtftMs, sloTpotMs);
            MixedWorkload.Shape shape = MixedWorkload.Shape.DEFAULT;
            out.println("  engines: engine.cost=" + cost + ", KV pages shaped " + preset + "; workload: Poisson arrivals, " + shape + ", seed 42;"
                    + " SLOs: TTFT <= " + num(sloTtftMs) + " ms and TPOT <= " + num(sloTpotMs) + " ms; routing " + routing
                    + (localPrefill ? " with conditional disaggregation" : "") + " (each answer's routing decision: ./orbitkv-pd trace <request id>)");
            MixedWorkload.Run run = MixedWorkload.run(client, shape, WARM_UP, ZERO_LOAD, rates, seconds, (label, done, all) -> {
                progress(out, String.format(Locale.ROOT, "  %-26s", label), done, all);
                if (done == all) {
                    out.println();
                }
            });
            List<MixedWorkload.Level> results = run.levels();
            // Let the last outcomes reach the log before reading it.
            long admitted = results.stream().mapToLong(l -> l.pd().size()).sum() + run.warmed();
            PipelineLog log = PipelineLog.read(p.bootstrapServers());
            long until = System.nanoTime() + 20_000_000_000L;
            while (log.outcomeCount() < admitted && System.nanoTime() < until) {
                Thread.sleep(500);
                log = PipelineLog.read(p.bootstrapServers());
            }
            int verified = 0;
            int total = 0;
            List<String> wrong = new ArrayList<>();
            for (MixedWorkload.Level l : results) {
                for (List<LoadClient.Result> rs : List.of(l.pd(), l.colocated())) {
                    for (LoadClient.Result r : rs) {
                        total++;
                        if (r.ok() && r.text().equals(r.request().expected(model))) {
                            verified++;
                        } else if (wrong.size() < 5) {
                            wrong.add("#" + r.request().index() + (r.request().colocated() ? " (colocated)" : "") + ": status " + r.status()
                                    + (r.error() != null ? " " + r.error() : " answer differs from the reference"));
                        }
                    }
                }
            }
            out.println();
            MixedWorkload.Summary.of(run, slo).print(out);
            printLog(out, log, verified, total, wrong);
            out.printf(Locale.ROOT, "%nDone in %.0f s. Logs of every component: %s%n", (System.nanoTime() - t0) / 1e9, p.logsDir());
            out.println("Look further: one request's story  curl " + p.deciderUrl() + "/requests/" + firstId(results)
                    + "   phases  curl " + p.deciderUrl() + "/states   engines  curl " + p.deciderUrl() + "/engines");
            out.println("              (live only with --stay); run a component alone: ./orbitkv-pd <decider|engine|worker|proxy> --config "
                    + p.dir().resolve("config") + "/<name>.properties");
            String logArgs = " --config " + p.dir().resolve("config").resolve("decider.properties");
            out.println("The log:     ./orbitkv-pd trace " + firstId(results) + logArgs + "   ./orbitkv-pd audit" + logArgs
                    + "   ./orbitkv-pd replay" + logArgs + (bootstrap == null && !stay ? "  (needs the broker: --bootstrap or --stay)" : ""));
            if (p.dashboardUrl() != null) {
                out.println("Dashboard:   " + p.dashboardUrl() + (stay ? "" : "  (live only with --stay)"));
            }
            if (stay) {
                out.println("Pipeline stays up (--stay): proxy " + p.proxyUrl()
                        + (p.dashboardUrl() != null ? ", dashboard " + p.dashboardUrl() : "") + ". Ctrl-C stops every component.");
                Thread.currentThread().join();
            }
            if (verified == total) {
                out.printf("OK: all %d answers (P/D and colocated) equal the colocated reference.%n", total);
                return 0;
            }
            out.printf("FAILED: %d of %d answers are missing or differ from the colocated reference.%n", total - verified, total);
            return 1;
        }
    }

    /** Discarded warm-up requests per layout, and zero-load requests per layout (one at a time). */
    private static final int WARM_UP = 40;
    private static final int ZERO_LOAD = 12;

    private static String firstId(List<MixedWorkload.Level> levels) {
        return levels.stream().flatMap(l -> l.pd().stream()).map(LoadClient.Result::requestId).filter(java.util.Objects::nonNull).findFirst()
                .orElse("<id>");
    }

    /**
     * The level's bar, redrawn in place on a terminal; written to a file or a CI log only once, finished (every redraw
     * would stay in the file).
     */
    private static void progress(PrintStream out, String label, int done, int total) {
        if (!ON_TERMINAL && done < total) {
            return;
        }
        synchronized (out) {
            int w = 30;
            int filled = (int) ((long) w * done / total);
            out.print((ON_TERMINAL ? "\r" : "") + label + " [" + "#".repeat(filled) + ".".repeat(w - filled) + "] " + done + "/" + total);
            out.flush();
        }
    }


    private static void printLog(PrintStream out, PipelineLog log, int verified, int total, List<String> wrong) {
        Map<OutcomeKind, Integer> o = log.outcomes;
        out.printf(Locale.ROOT, "%nFrom the log: %d requests admitted; outcomes %s; %d transfers moved %.1f MiB of KV at %.2f GB/s (bytes / summed"
                        + " transfer time)%n", log.admitted(), o, log.transfers, log.transferBytes / 1048576.0,
                log.transferMicros == 0 ? 0 : log.transferBytes / (log.transferMicros * 1000.0));
        printHops(out, log);
        out.printf("Answers verified: %d / %d equal to the colocated reference%n", verified, total);
        wrong.forEach(w -> out.println("  " + w));
    }

    private static String num(double v) {
        return v == Math.rint(v) ? Long.toString((long) v) : String.format(Locale.ROOT, "%.1f", v);
    }

    /** The handoff hop by hop, p50 over the run's requests, from the records' timing marks (what `trace` shows for one). */
    private static void printHops(PrintStream out, PipelineLog log) {
        Samples.Hops hops = Samples.hops(log.stories.values().stream().map(PipelineLog.Story::anatomy).filter(a -> !a.spans().isEmpty()).toList());
        if (hops.ms().isEmpty()) {
            return;
        }
        StringBuilder b = new StringBuilder("Where a handoff's time went (p50 ms, wall clock, from the log, warm-up included):");
        int col = 0;
        for (Map.Entry<Hop, double[]> e : hops.ms().entrySet()) {
            if (e.getKey().ordinal() < Hop.FACT_TO_DECIDER.ordinal() || e.getKey() == Hop.PREFILL_ANSWER) {
                continue; // the handoff: from the fact that completed the pair to the first token at the proxy
            }
            b.append(col++ % 6 == 0 ? "\n  " : " · ").append(e.getKey().key()).append(' ')
                    .append(String.format(Locale.ROOT, "%.2f", pct(e.getValue(), 50))).append(hops.share(e.getKey()));
        }
        out.println(b);
    }

    static String join(int[] a) {
        return Arrays.toString(a);
    }
}
