package io.orbitkv.pd.cli.demo;

import static io.orbitkv.pd.harness.Samples.pct;

import io.orbitkv.pd.harness.LoadClient;
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
                "decider, a prefill and a decode engine (simulated, 8B-shaped KV) with their transfer workers (tcp), and the proxy;",
                "sends a workload through the proxy at a few concurrency levels and prints a summary (throughput, TTFT, handoff",
                "overhead, KV bytes, outcomes from the log). Exits 0 only if every answer equals the colocated reference.",
                "--events shows the foundation event timeline instead."})
public final class DemoCommand implements Callable<Integer> {

    /** Bars are redrawn in place only on a terminal (JDK 22+: {@code System.console()} exists even when redirected). */
    private static final boolean ON_TERMINAL = System.console() != null && System.console().isTerminal();

    @Option(names = "--events", description = "Send one event of every type through the broker and print the timeline (the foundation demo).")
    boolean events;

    @Option(names = "--work-dir", description = "Where configs, logs and broker data go (default: a new temporary directory).")
    Path workDir;

    @Option(names = "--keep", description = "--events: keep the broker's data and logs after the demo.")
    boolean keep;

    @Option(names = "--requests", defaultValue = "300", description = "Requests in the workload, split over the levels (default: ${DEFAULT-VALUE}).")
    int requests;

    @Option(names = "--concurrency", defaultValue = "2,8,16", split = ",", description = "Concurrency levels (default: ${DEFAULT-VALUE}).")
    List<Integer> levels;

    @Option(names = "--max-tokens", defaultValue = "16", description = "Tokens generated per request (default: ${DEFAULT-VALUE}).")
    int maxTokens;

    @Option(names = "--preset", defaultValue = "8b", description = "KV layout shape: 8b, 70b, tiny (default: ${DEFAULT-VALUE}).")
    String preset;

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
                .withModel(ModelPreset.of(preset), 512, 0.05, 2.0).withDashboard(!noDashboard).withPythonEngines(java.util.Set.copyOf(pythonEngines))
                .withEngineApi(engines == EngineJoin.api).withNetns(HostsOption.netns(hosts, link)).withLink(link);
        SimModel model = new SimModel(42);
        try (Pipeline p = Pipeline.start(spec, dir, s -> out.println("  " + s), bootstrap);
             LoadClient client = new LoadClient(p.proxyUrl(), "orbitkv-sim-" + ModelPreset.of(preset).key())) {
            out.println("  proxy " + p.proxyUrl() + "   decider queries " + p.deciderUrl());
            if (p.dashboardUrl() != null) {
                out.println("  dashboard " + p.dashboardUrl() + "  (live statistics from the log; Prometheus " + p.dashboardUrl() + "metrics)");
            }
            // Cold JVMs on 2 cores measure the JIT, not the design: a discarded pass first, P/D and colocated, at the middle
            // concurrency (24 requests at c=4 left the first level's P/D TTFT p50 at ~200 ms against ~20 ms colocated).
            List<LoadClient.Request> warm = LoadClient.workload(7, 96, 40, 200, maxTokens, true);
            AtomicInteger wdone = new AtomicInteger();
            client.run(warm, 8, () -> progress(out, "  warming up   ", wdone.incrementAndGet(), warm.size() * 2));
            client.run(warm.stream().map(LoadClient.Request::colocatedTwin).toList(), 8,
                    () -> progress(out, "  warming up   ", wdone.incrementAndGet(), warm.size() * 2));
            out.println(" (not measured)");
            List<LoadClient.Request> work = LoadClient.workload(42, requests, 40, 200, maxTokens, true);
            List<Level> results = new ArrayList<>();
            int per = Math.max(1, requests / levels.size());
            for (int li = 0; li < levels.size(); li++) {
                int c = levels.get(li);
                List<LoadClient.Request> slice = work.subList(Math.min(work.size(), li * per), li == levels.size() - 1 ? work.size()
                        : Math.min(work.size(), (li + 1) * per));
                if (slice.isEmpty()) {
                    continue;
                }
                AtomicInteger done = new AtomicInteger();
                String label = String.format(Locale.ROOT, "  P/D        c=%-3d", c);
                long s = System.nanoTime();
                List<LoadClient.Result> rs = client.run(slice, c, () -> progress(out, label, done.incrementAndGet(), slice.size()));
                double secs = (System.nanoTime() - s) / 1e9;
                out.println();
                AtomicInteger cdone = new AtomicInteger();
                String clabel = String.format(Locale.ROOT, "  colocated  c=%-3d", c);
                List<LoadClient.Result> col = client.run(slice.stream().map(LoadClient.Request::colocatedTwin).toList(), c,
                        () -> progress(out, clabel, cdone.incrementAndGet(), slice.size()));
                out.println();
                results.add(new Level(c, rs, secs, col));
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
            printSummary(out, results, log, verified, total, wrong);
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

    private record Level(int concurrency, List<LoadClient.Result> results, double seconds, List<LoadClient.Result> colocated) { }

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


    private static void printSummary(PrintStream out, List<Level> levels, PipelineLog log, int verified, int total, List<String> wrong) {
        out.println();
        out.println("Summary (TTFT = client-side time to first streamed token; ITL = between streamed tokens; TPOT = a request's mean ITL;"
                + " handoff = prefill answered -> decode's first byte, at the proxy; coloc = the same engines without a handoff)");
        out.printf("%-5s %-9s %-8s %-11s %-11s %-11s %-11s %-11s %-11s %-11s %-13s %-13s %-10s%n", "conc", "requests", "req/s", "TTFT p50",
                "TTFT p99", "coloc p50", "ITL p50", "ITL p99", "coloc ITL99", "TPOT p50", "handoff p50", "handoff p99", "KV MiB");
        for (Level l : levels) {
            double[] ttft = Samples.ttftMs(l.results);
            double[] col = Samples.ttftMs(l.colocated);
            double[] hand = l.results.stream().filter(r -> r.ok() && !Double.isNaN(r.handoffMs())).mapToDouble(LoadClient.Result::handoffMs).sorted()
                    .toArray();
            long kv = l.results.stream().mapToLong(LoadClient.Result::kvBytes).sum();
            double[] itl = Samples.itlMs(l.results);
            double[] colItl = Samples.itlMs(l.colocated);
            double[] tpot = Samples.tpotMs(l.results);
            out.printf(Locale.ROOT, "%-5d %-9d %-8.1f %-11s %-11s %-11s %-11s %-11s %-11s %-11s %-13s %-13s %-10.0f%n", l.concurrency,
                    l.results.size(), l.results.size() / l.seconds, ms(pct(ttft, 50)), ms(pct(ttft, 99)), ms(pct(col, 50)), ms(pct(itl, 50)),
                    ms(pct(itl, 99)), ms(pct(colItl, 99)), ms(pct(tpot, 50)), ms(pct(hand, 50)), ms(pct(hand, 99)), kv / 1048576.0);
        }
        Map<OutcomeKind, Integer> o = log.outcomes;
        out.printf(Locale.ROOT, "%nFrom the log: %d requests admitted; outcomes %s; %d transfers moved %.1f MiB of KV at %.2f GB/s (bytes / summed"
                        + " transfer time)%n", log.admitted(), o, log.transfers, log.transferBytes / 1048576.0,
                log.transferMicros == 0 ? 0 : log.transferBytes / (log.transferMicros * 1000.0));
        printHops(out, log);
        out.printf("Answers verified: %d / %d equal to the colocated reference%n", verified, total);
        wrong.forEach(w -> out.println("  " + w));
    }

    /** The handoff hop by hop, p50 over the run's requests, from the records' timing marks (what `trace` shows for one). */
    private static void printHops(PrintStream out, PipelineLog log) {
        Samples.Hops hops = Samples.hops(log.stories.values().stream().map(PipelineLog.Story::anatomy).filter(a -> !a.spans().isEmpty()).toList());
        if (hops.ms().isEmpty()) {
            return;
        }
        StringBuilder b = new StringBuilder("Where a handoff's time went (p50 ms, wall clock, from the log; the first minutes run on cold JVMs,"
                + " './orbitkv-pd bench e2e' warms up first):");
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
