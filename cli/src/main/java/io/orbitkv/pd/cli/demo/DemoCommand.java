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
import java.util.concurrent.atomic.AtomicInteger;
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

    @Option(names = "--seconds", defaultValue = "8", description = "Seconds of arrivals per rate and layout (default: ${DEFAULT-VALUE}).")
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

    @Option(names = "--prefill-engines", defaultValue = "1", description = "Prefill engines (default: ${DEFAULT-VALUE}).")
    int prefillEngines;

    @Option(names = "--decode-engines", defaultValue = "1", description = "Decode engines (default: ${DEFAULT-VALUE}).")
    int decodeEngines;

    @Option(names = "--python-engines", split = ",", description = "Run these engines (e.g. decode-0 or prefill-0,decode-0) as the Python"
            + " simulated engine (python/orbitkv_pd) on their worker's engine API; the rest run the Java engine. Default: none.")
    List<String> pythonEngines = new ArrayList<>();

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
        PipelineSpec spec = PipelineSpec.defaults().withEngines(prefillEngines, decodeEngines)
                .withModel(ModelPreset.of(preset), ModelPreset.of(preset) == ModelPreset.TINY ? 4096 : 512, 0.05, 2.0)
                .withExtra(java.util.Map.of(), java.util.Map.of("engine.cost", cost), java.util.Map.of(), java.util.Map.of()).withDashboard(!noDashboard).withPythonEngines(java.util.Set.copyOf(pythonEngines))
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
                    + " SLOs: TTFT <= " + num(sloTtftMs) + " ms and TPOT <= " + num(sloTpotMs) + " ms");
            // Cold JVMs on 2 cores measure the JIT, not the design: a discarded pass first, P/D and colocated (without it the
            // first level's P/D TTFT p50 read ~200 ms against ~20 ms colocated).
            List<LoadClient.Request> warm = MixedWorkload.requests(7, 64, shape, false);
            AtomicInteger wdone = new AtomicInteger();
            client.run(warm, 8, () -> progress(out, "  warming up     ", wdone.incrementAndGet(), warm.size() * 2));
            client.run(MixedWorkload.requests(7, 64, shape, true), 8,
                    () -> progress(out, "  warming up     ", wdone.incrementAndGet(), warm.size() * 2));
            out.println(" (not measured)");
            // Zero load: one request at a time, the reference the loaded ITL is compared with.
            List<LoadClient.Request> alone = MixedWorkload.requests(11, 8, shape, false);
            AtomicInteger zdone = new AtomicInteger();
            List<LoadClient.Result> zeroPd = client.run(alone, 1, () -> progress(out, "  zero load      ", zdone.incrementAndGet(), alone.size() * 2));
            List<LoadClient.Result> zeroCol = client.run(MixedWorkload.requests(11, 8, shape, true), 1,
                    () -> progress(out, "  zero load      ", zdone.incrementAndGet(), alone.size() * 2));
            out.println();
            List<Level> results = new ArrayList<>();
            results.add(new Level(0, zeroPd, zeroCol));
            for (int li = 0; li < rates.size(); li++) {
                double rate = rates.get(li);
                int n = Math.max(4, (int) Math.round(rate * seconds));
                List<LoadClient.Request> work = MixedWorkload.requests(42 + li, n, shape, false);
                long[] at = MixedWorkload.poisson(42 + li, rate, n);
                AtomicInteger done = new AtomicInteger();
                String label = String.format(Locale.ROOT, "  P/D       %4s/s", num(rate));
                List<LoadClient.Result> rs = client.runOpen(work, at, () -> progress(out, label, done.incrementAndGet(), n));
                out.println();
                AtomicInteger cdone = new AtomicInteger();
                String clabel = String.format(Locale.ROOT, "  colocated %4s/s", num(rate));
                List<LoadClient.Result> col = client.runOpen(MixedWorkload.requests(42 + li, n, shape, true), at,
                        () -> progress(out, clabel, cdone.incrementAndGet(), n));
                out.println();
                results.add(new Level(rate, rs, col));
            }
            // Let the last outcomes reach the log before reading it.
            long admitted = results.stream().mapToLong(l -> l.results.size()).sum() + warm.size();
            PipelineLog log = PipelineLog.read(p.bootstrapServers());
            long until = System.nanoTime() + 20_000_000_000L;
            while (log.outcomeCount() < admitted && System.nanoTime() < until) {
                Thread.sleep(500);
                log = PipelineLog.read(p.bootstrapServers());
            }
            int verified = 0;
            int total = 0;
            List<String> wrong = new ArrayList<>();
            for (Level l : results) {
                for (List<LoadClient.Result> rs : List.of(l.results, l.colocated)) {
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
            printSummary(out, results, slo, log, verified, total, wrong);
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

    /** One rate's results (rate 0: zero load, one request at a time). */
    private record Level(double rate, List<LoadClient.Result> results, List<LoadClient.Result> colocated) { }

    private static String firstId(List<Level> levels) {
        return levels.stream().flatMap(l -> l.results.stream()).map(LoadClient.Result::requestId).filter(java.util.Objects::nonNull).findFirst()
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


    private static void printSummary(PrintStream out, List<Level> levels, MixedWorkload.Slo slo, PipelineLog log, int verified, int total,
                                     List<String> wrong) {
        out.println();
        out.println("Summary (client side: TTFT = time to the first streamed token; ITL = between streamed tokens, every gap of every request;"
                + " TPOT = a request's mean ITL; goodput = requests/s meeting TTFT <= " + num(slo.ttftMs()) + " ms and TPOT <= "
                + num(slo.tpotMs()) + " ms; handoff = prefill answered -> decode's first byte, at the proxy)");
        out.printf("%-6s %-10s %-5s %-10s %-10s %-9s %-9s %-9s %-13s %-11s %-13s %-7s%n", "rate", "layout", "reqs", "TTFT p50", "TTFT p99",
                "ITL p50", "ITL p99", "TPOT p50", "SLOs met", "goodput", "handoff p50", "KV MiB");
        List<MixedWorkload.Point> pd = new ArrayList<>();
        List<MixedWorkload.Point> col = new ArrayList<>();
        for (Level l : levels) {
            MixedWorkload.Point a = MixedWorkload.Point.of("P/D 1+1", l.rate, l.results, slo);
            MixedWorkload.Point b = MixedWorkload.Point.of("colocated", l.rate, l.colocated, slo);
            for (MixedWorkload.Point x : List.of(a, b)) {
                out.printf(Locale.ROOT, "%-6s %-10s %-5d %-10s %-10s %-9s %-9s %-9s %-13s %-11s %-13s %-7.1f%n", l.rate == 0 ? "zero" : num(l.rate),
                        x.layout(), x.requests(), ms(x.ttftP50()), ms(x.ttftP99()), ms(x.itlP50()), ms(x.itlP99()), ms(x.tpotP50()),
                        String.format(Locale.ROOT, "%.0f %%", 100 * x.attained()) + (x.failed() > 0 ? " (" + x.failed() + " failed)" : ""),
                        l.rate == 0 ? "-" : String.format(Locale.ROOT, "%.2f/s", x.goodput()), ms(x.handoffP50()), x.kvBytes() / 1048576.0);
            }
            if (l.rate > 0) {
                pd.add(a);
                col.add(b);
            }
        }
        MixedWorkload.Point zPd = MixedWorkload.Point.of("P/D", 0, levels.get(0).results, slo);
        MixedWorkload.Point zCol = MixedWorkload.Point.of("colocated", 0, levels.get(0).colocated, slo);
        if (!pd.isEmpty()) {
            MixedWorkload.Point top = pd.get(pd.size() - 1);
            MixedWorkload.Point topCol = col.get(col.size() - 1);
            out.printf(Locale.ROOT, "At %s requests/s, ITL p99 against zero load: colocated %.1fx (%s vs %s), P/D decode %.1fx (%s vs %s).%n",
                    num(top.rate()), topCol.itlP99() / zCol.itlP99(), ms(topCol.itlP99()), ms(zCol.itlP99()), top.itlP99() / zPd.itlP99(),
                    ms(top.itlP99()), ms(zPd.itlP99()));
            double from = MixedWorkload.crossover(pd, col);
            out.println(Double.isNaN(from) ? "P/D goodput does not overtake colocated goodput at these rates."
                    : "P/D goodput overtakes colocated goodput (same two engines) from " + num(from) + " requests/s on.");
        }
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

    private static String ms(double v) {
        return Double.isNaN(v) ? "-" : String.format(Locale.ROOT, "%.1f ms", v);
    }

    static String join(int[] a) {
        return Arrays.toString(a);
    }
}
