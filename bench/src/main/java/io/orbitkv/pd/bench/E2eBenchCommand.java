package io.orbitkv.pd.bench;

import static io.orbitkv.pd.harness.Samples.pct;

import io.orbitkv.pd.harness.HostsOption;
import io.orbitkv.pd.harness.LoadClient;
import io.orbitkv.pd.harness.RawStream;
import io.orbitkv.pd.harness.Pipeline;
import io.orbitkv.pd.harness.EngineJoin;
import io.orbitkv.pd.harness.PipelineSpec;
import io.orbitkv.pd.harness.Samples;
import io.orbitkv.pd.harness.PipelineLog;
import io.orbitkv.pd.engine.sim.ModelPreset;
import io.orbitkv.pd.engine.sim.SimModel;
import io.orbitkv.pd.logtools.trace.HandoffAnatomy;
import io.orbitkv.pd.tracing.Hop;
import io.orbitkv.pd.transport.tcp.TcpConfig;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code orbitkv-pd bench e2e}: end-to-end time to first token through the proxy, P/D (prefill engine → decider →
 * transfer worker push → decode engine) against the same engines colocated (one engine prefills and decodes, no
 * handoff), in the same run, at several concurrency levels — and the anatomy of the P/D handoff: every hop's p50/p99
 * from the records' timing marks ({@link HandoffAnatomy}), beside the physical references measured in the same run
 * (one raw Kafka hop on the same broker, the tcp transport pushing the same bytes in the same page size, the engines'
 * modelled compute), the in-situ targets of docs/architecture.md checked against them, and the CPU each component
 * spends per handoff.
 */
@Command(name = "e2e", mixinStandardHelpOptions = true,
        header = "End-to-end TTFT through the proxy, P/D against the same engines colocated, in one run.",
        description = {"End-to-end TTFT through the proxy, P/D against the same engines colocated (no handoff), in the same run, at",
                "several concurrency levels, with the anatomy of the handoff (every hop's p50/p99 from the records' timing marks) beside",
                "a raw Kafka hop and the tcp transport measured in the same run. Starts the whole pipeline as processes."})
public final class E2eBenchCommand implements Callable<Integer> {

    @Option(names = "--requests", defaultValue = "200", description = "Requests per level and path (default: ${DEFAULT-VALUE}).")
    int requests;

    @Option(names = "--concurrency", defaultValue = "1,4,16", split = ",", description = "Concurrency levels (default: ${DEFAULT-VALUE}).")
    List<Integer> levels;

    @Option(names = "--workload", defaultValue = "handoff", description = {"handoff: TTFT at fixed concurrency levels with the handoff's",
            "anatomy; mixed: the mixed workload (Poisson arrivals, long prompts) at --rates on P/D and colocated, TTFT/ITL/TPOT/goodput",
            "against SLOs, and the goodput-vs-rate plot (docs/bench/e2e-goodput.md) (default: ${DEFAULT-VALUE})."})
    String workload;

    @Option(names = "--preset", description = "KV layout shape (default: 8b; tiny with --workload mixed).")
    String preset;

    @Option(names = "--rates", defaultValue = "2,4,6,8,10", split = ",", description = "--workload mixed: arrival rates, requests/s (default:"
            + " ${DEFAULT-VALUE}).")
    List<Double> rates;

    @Option(names = "--seconds", defaultValue = "20", description = "--workload mixed: seconds of arrivals per rate and layout (default: ${DEFAULT-VALUE}).")
    double seconds;

    @Option(names = "--cost", defaultValue = "llama-8b-h100", description = "--workload mixed: the engines' step cost model (default: ${DEFAULT-VALUE}).")
    String cost;

    @Option(names = "--slo-ttft-ms", defaultValue = "500", description = "--workload mixed: TTFT objective (default: ${DEFAULT-VALUE}).")
    double sloTtftMs;

    @Option(names = "--slo-tpot-ms", defaultValue = "8", description = "--workload mixed: TPOT objective (default: ${DEFAULT-VALUE}).")
    double sloTpotMs;

    @Option(names = "--prompt-words", defaultValue = "40,200", split = ",", description = "Prompt length range in words (default: ${DEFAULT-VALUE}).")
    List<Integer> words;

    @Option(names = "--prefill-ms-per-token", defaultValue = "0.05", description = "Compute model (default: ${DEFAULT-VALUE}).")
    double prefillMs;

    @Option(names = "--decode-ms-per-token", defaultValue = "2", description = "Compute model (default: ${DEFAULT-VALUE}).")
    double decodeMs;

    @Option(names = "--warmup", defaultValue = "200", description = "Warm-up requests each way per round, discarded (default: ${DEFAULT-VALUE}).")
    int warmup;

    @Option(names = "--warmup-rounds", defaultValue = "12", description = "Warm-up rounds at most: they stop once the JIT compilers of"
            + " every process used under 3 %% of the round's CPU (default: ${DEFAULT-VALUE}).")
    int warmupRounds;

    @Option(names = "--decider", description = "Extra decider property key=value (repeatable), e.g. decider.guarantee=at_least_once.")
    Map<String, String> deciderProps = new LinkedHashMap<>();

    @Option(names = "--engine", description = "Extra property key=value for both engines (repeatable), e.g. engine.kv.verify=false.")
    Map<String, String> engineProps = new LinkedHashMap<>();

    @Option(names = "--worker", description = "Extra property key=value for both transfer workers (repeatable).")
    Map<String, String> workerProps = new LinkedHashMap<>();

    @Option(names = "--layerwise", defaultValue = "on", description = {"on: an order ahead of its prefill with enough KV is pushed layer by",
            "layer as the engine reports its progress (the workers' default); off: every push waits for the whole prefill",
            "(worker.layerwise.min-bytes=-1). `bench layerwise` compares the two in one run (default: ${DEFAULT-VALUE})."})
    String layerwise;

    @Option(names = "--proxy", description = "Extra proxy property key=value (repeatable).")
    Map<String, String> proxyProps = new LinkedHashMap<>();

    @Option(names = "--engines", defaultValue = "api", description = "How the engines join: api (their workers' engine API, as a Python"
            + " engine does) or kafka (Kafka clients of their own) (default: ${DEFAULT-VALUE}).")
    EngineJoin engines;

    @Option(names = "--hosts", defaultValue = "loopback", description = {"loopback (every process on 127.0.0.1) or netns (each component on a",
            "network namespace of its own: the push and every Kafka hop cross a link; needs root) (default: ${DEFAULT-VALUE})."})
    String hosts;

    @Option(names = "--link", description = {"With --hosts netns: every host's link limited to this rate (tc: 1gbit, 5gbit, 10gbit); the push",
            "is compared with a raw TCP stream of the same bytes between the same hosts over it."})
    String link;

    @Option(names = "--out", description = "Markdown result file (default: docs/bench/e2e.md; docs/bench/e2e-goodput.md with --workload mixed).")
    Path outFile;

    @Option(names = "--json", description = "Machine-readable results (default: bench/results/e2e.json; bench/results/e2e-goodput.json with"
            + " --workload mixed).")
    Path jsonFile;

    /** The Kafka hops whose in-situ p50 the target holds to 2× the raw hop. */
    static final List<Hop> KAFKA_HOPS = List.of(Hop.FACT_TO_DECIDER, Hop.ORDER_TO_WORKER, Hop.REPORT_TO_DECIDER, Hop.KV_READY_TO_ENGINE);

    /** The physical references, measured once in the same run with the pipeline idle. */
    record References(LatencyStats rawHop, double transportGbps, int pageBytes, long bytes, double prefillMsPerToken, double decodeMsPerToken,
                      double rawLinkGbps) { }

    /** One level's numbers (latencies in ms, sorted). */
    record Level(int concurrency, int requests, double[] pd, double[] colocated, double[] handoff, double pdRps, double colocatedRps, long kvBytes,
                 int wrong, Samples.Hops hops, double[] transferMs, double[] transferGbps, Map<String, Double> cpuMsPerHandoff,
                 Map<String, Double> cpuMsPerColocated) {
        double overheadP50() {
            return pct(pd, 50) - pct(colocated, 50);
        }
    }

    @Override
    public Integer call() throws Exception {
        if ("mixed".equals(workload)) {
            Path md = outFile != null ? outFile : Path.of("docs/bench/e2e-goodput.md");
            String base = md.getFileName().toString().replaceFirst("\\.md$", "");
            return GoodputBench.run(new GoodputBench.Options(ModelPreset.of(preset != null ? preset : "tiny"), cost, rates, seconds, 40, 24,
                    new io.orbitkv.pd.harness.MixedWorkload.Slo(sloTtftMs, sloTpotMs), md,
                    jsonFile != null ? jsonFile : Path.of("bench/results/" + base + ".json"), md.resolveSibling(base + ".svg"), engineProps));
        }
        if (!"handoff".equals(workload)) {
            throw new picocli.CommandLine.ParameterException(new picocli.CommandLine(this), "--workload: handoff or mixed, got '" + workload + "'");
        }
        if (outFile == null) {
            outFile = Path.of("docs/bench/e2e.md");
        }
        if (jsonFile == null) {
            jsonFile = Path.of("bench/results/e2e.json");
        }
        switch (layerwise) {
            case "on" -> { }
            case "off" -> workerProps.putIfAbsent("worker.layerwise.min-bytes", "-1");
            default -> throw new picocli.CommandLine.ParameterException(new picocli.CommandLine(this), "--layerwise: on or off, got '" + layerwise + "'");
        }
        Path work = Files.createTempDirectory("orbitkv-bench-e2e-");
        ModelPreset p = ModelPreset.of(preset != null ? preset : "8b");
        // Room for the longest prompt (about a token per word) on both sides, at least the default pool.
        int blocks = Math.max(384, (words.get(1) * 2 + 64) / 16 * 2);
        PipelineSpec spec = PipelineSpec.defaults().withModel(p, blocks, prefillMs, decodeMs).withExtra(deciderProps, engineProps, workerProps,
                proxyProps).withEngineApi(engines == EngineJoin.api).withNetns(HostsOption.netns(hosts, link)).withLink(link);
        SimModel model = new SimModel(42);
        double load0 = loadAverage();
        List<Level> rows = new ArrayList<>();
        References refs;
        try (Pipeline pipeline = Pipeline.start(spec, work, s -> System.out.println("  " + s));
             LoadClient client = new LoadClient(pipeline.proxyUrl(), "orbitkv-sim-" + p.key())) {
            warmUp(pipeline, client);
            refs = references(pipeline, p);
            int seed = 100;
            for (int c : levels) {
                List<LoadClient.Request> work1 = LoadClient.workload(seed++, requests, words.get(0), words.get(1), 16, true);
                System.out.printf("c=%d: %d P/D requests, then the same %d colocated ...%n", c, requests, requests);
                Map<String, Long> cpu0 = ProcessCpu.millis(pipeline);
                long t = System.nanoTime();
                List<LoadClient.Result> pd = client.run(work1, c, () -> { });
                double pdSecs = (System.nanoTime() - t) / 1e9;
                Map<String, Long> cpu1 = ProcessCpu.millis(pipeline);
                t = System.nanoTime();
                List<LoadClient.Result> col = client.run(work1.stream().map(LoadClient.Request::colocatedTwin).toList(), c, () -> { });
                double colSecs = (System.nanoTime() - t) / 1e9;
                Map<String, Double> cpuColocated = ProcessCpu.perRequest(cpu1, ProcessCpu.millis(pipeline), (int) col.stream().filter(LoadClient.Result::ok).count());
                int wrong = 0;
                for (LoadClient.Result r : concat(pd, col)) {
                    if (!r.ok() || !r.text().equals(r.request().expected(model))) {
                        wrong++;
                    }
                }
                Level row = level(c, pd, col, pdSecs, colSecs, wrong, PipelineLog.read(pipeline.bootstrapServers()), cpu0, cpu1, cpuColocated);
                rows.add(row);
                System.out.printf(Locale.ROOT, "  TTFT P/D p50 %.1f p99 %.1f ms | colocated p50 %.1f p99 %.1f ms | overhead p50 %.1f ms | "
                                + "handoff p50 %.1f p99 %.1f ms | transfer p50 %.1f ms (%.2f GB/s) | wrong %d%n", pct(row.pd, 50), pct(row.pd, 99),
                        pct(row.colocated, 50), pct(row.colocated, 99), row.overheadP50(), pct(row.handoff, 50), pct(row.handoff, 99),
                        pct(row.transferMs, 50), pct(row.transferGbps, 50), wrong);
            }
        }
        double load1 = loadAverage();
        String text = ttftTable(rows) + "\n" + anatomyTable(rows, refs) + "\n" + targetsTable(rows, refs, engines) + "\n" + cpuTable(rows);
        System.out.println();
        System.out.println(text);
        write(text, rows, refs, p, load0, load1);
        return rows.stream().allMatch(r -> r.wrong == 0) ? 0 : 1;
    }

    /**
     * Warm-up rounds (discarded) until the JIT is done: on two cores every process's C1/C2 compiler threads compete with
     * the handoff for minutes after start (measured: ~10 % of the machine after 400 requests, under 3 % after a few
     * thousand), and a production pipeline runs warm. A round is {@code --warmup} requests each way at 8 in flight.
     */
    private void warmUp(Pipeline pipeline, LoadClient client) throws Exception {
        for (int round = 1; round <= warmupRounds; round++) {
            JitShare before = JitShare.of(pipeline);
            List<LoadClient.Request> warm = LoadClient.workload(5 + round, warmup, words.get(0), words.get(1), 16, true);
            client.run(warm, 8, () -> { });
            client.run(warm.stream().map(LoadClient.Request::colocatedTwin).toList(), 8, () -> { });
            double share = JitShare.of(pipeline).since(before);
            System.out.printf(Locale.ROOT, "warm-up round %d: %d requests each way, JIT compilers %.1f %% of the pipeline's CPU%n", round, warmup,
                    100 * share);
            if (share < 0.03) {
                return;
            }
        }
        System.out.println("warm-up: the JIT is still busy after " + warmupRounds + " rounds; measuring anyway");
    }

    /** CPU (clock ticks) of every pipeline process, and of their JIT compiler threads, from /proc (Linux). */
    private record JitShare(long compiler, long total) {
        static JitShare of(Pipeline pipeline) {
            long compiler = 0;
            long total = 0;
            List<ProcessHandle> procs = new ArrayList<>();
            pipeline.brokerProcess().ifPresent(procs::add);
            pipeline.children().forEach(c -> procs.add(c.process().toHandle()));
            procs.add(ProcessHandle.current());
            for (ProcessHandle h : procs) {
                try (var tasks = Files.list(Path.of("/proc", Long.toString(h.pid()), "task"))) {
                    for (Path t : tasks.toList()) {
                        try {
                            String stat = Files.readString(t.resolve("stat"));
                            String[] f = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
                            long ticks = Long.parseLong(f[11]) + Long.parseLong(f[12]); // utime, stime
                            total += ticks;
                            if (Files.readString(t.resolve("comm")).startsWith("C")
                                    && Files.readString(t.resolve("comm")).contains("CompilerThre")) {
                                compiler += ticks;
                            }
                        } catch (java.io.IOException | RuntimeException e) {
                            // a thread that ended meanwhile
                        }
                    }
                } catch (java.io.IOException e) {
                    // not Linux, or the process ended: no JIT figure
                }
            }
            return new JitShare(compiler, total);
        }

        double since(JitShare before) {
            long t = total - before.total;
            return t <= 0 ? 0 : (compiler - before.compiler) / (double) t;
        }
    }

    /**
     * The references, with the pipeline idle after the warm-up: one raw produce→consume hop on the pipeline's broker,
     * and the tcp transport (this JVM, loopback) pushing the warm-up's median transfer size in the preset's page size.
     */
    private References references(Pipeline pipeline, ModelPreset p) throws Exception {
        System.out.println("references: a raw Kafka hop on the same broker, the tcp transport on the same page size and bytes ...");
        LatencyStats raw = RawHop.measure(pipeline.bootstrapServers(), "orbitkv-bench-raw-" + System.nanoTime(), 200, Duration.ofSeconds(4),
                Duration.ofSeconds(6), true);
        PipelineLog log = PipelineLog.read(pipeline.bootstrapServers());
        long[] sizes = log.stories.values().stream().map(PipelineLog.Story::anatomy).mapToLong(HandoffAnatomy::transferBytes).filter(b -> b > 0)
                .sorted().toArray();
        int page = p.geometry(1, 1).pageBytes();
        long median = sizes.length == 0 ? 16L << 20 : sizes[sizes.length / 2];
        long bytes = Math.max(page, median / page * page);
        TransportBench tb = new TransportBench(new TransportBench.Options(bytes, List.of(page), 3, 15, List.of(TcpConfig.defaults().connections()), false),
                s -> { });
        TransportBench.Result r = tb.run(page);
        System.out.printf(Locale.ROOT, "  raw hop p50 %.3f ms p99 %.3f ms; tcp transport %.2f GB/s for %.1f MiB in %d KiB pages%n", raw.p50ms(),
                raw.p99ms(), r.transport().get(0), bytes / 1048576.0, page / 1024);
        double link = Double.NaN;
        if (pipeline.hosts().isPresent()) {
            // Across hosts the push crosses the prefill node's and the decode node's links: its reference is one plain TCP
            // stream of the same bytes between the same two hosts over the same links, now.
            link = RawStream.measure(pipeline.hosts().get(), "prefill-0", "decode-0", bytes) / 1e9;
            System.out.printf(Locale.ROOT, "  raw stream prefill-0 -> decode-0 over the link%s: %.2f GB/s (%.1f Gbit/s)%n",
                    this.link == null ? " (unlimited veth)" : " at " + this.link, link, link * 8);
        }
        return new References(raw, r.transport().get(0), page, bytes, prefillMs, decodeMs, link);
    }

    private Level level(int c, List<LoadClient.Result> pd, List<LoadClient.Result> col, double pdSecs, double colSecs, int wrong, PipelineLog log,
                        Map<String, Long> cpu0, Map<String, Long> cpu1, Map<String, Double> cpuColocated) {
        List<HandoffAnatomy> handoffs = new ArrayList<>();
        List<Double> transfer = new ArrayList<>();
        List<Double> gbps = new ArrayList<>();
        for (LoadClient.Result r : pd) {
            PipelineLog.Story s = r.requestId() == null ? null : log.stories.get(r.requestId());
            if (s == null || !r.ok()) {
                continue;
            }
            HandoffAnatomy a = s.anatomy();
            handoffs.add(a);
            if (a.transferMicros() > 0) {
                transfer.add(a.transferMicros() / 1e3);
                gbps.add(a.transferBytes() / (a.transferMicros() * 1e3));
            }
        }
        Map<String, Double> cpu = ProcessCpu.perRequest(cpu0, cpu1, (int) pd.stream().filter(LoadClient.Result::ok).count());
        return new Level(c, requests, Samples.ttftMs(pd), Samples.ttftMs(col), Samples.handoffMs(pd), requests / pdSecs, requests / colSecs,
                pd.stream().mapToLong(LoadClient.Result::kvBytes).sum(), wrong, Samples.hops(handoffs), Samples.ascending(transfer),
                Samples.ascending(gbps), cpu, cpuColocated);
    }

    private static List<LoadClient.Result> concat(List<LoadClient.Result> a, List<LoadClient.Result> b) {
        List<LoadClient.Result> out = new ArrayList<>(a);
        out.addAll(b);
        return out;
    }


    // ------------------------------------------------------------------------------------------------ tables

    private static String ttftTable(List<Level> rows) {
        StringBuilder b = new StringBuilder("### TTFT: P/D against colocated\n\n");
        b.append("| concurrency | requests | TTFT P/D p50 ms | p99 ms | TTFT colocated p50 ms | p99 ms | overhead p50 ms | overhead p99 ms |"
                + " handoff at proxy p50 ms | p99 ms | P/D req/s | colocated req/s | KV MiB moved | answers wrong |\n");
        b.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
        for (Level r : rows) {
            b.append(String.format(Locale.ROOT, "| %d | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f | %d |%n",
                    r.concurrency, r.requests, pct(r.pd, 50), pct(r.pd, 99), pct(r.colocated, 50), pct(r.colocated, 99), r.overheadP50(),
                    pct(r.pd, 99) - pct(r.colocated, 99), pct(r.handoff, 50), pct(r.handoff, 99), r.pdRps, r.colocatedRps, r.kvBytes / 1048576.0,
                    r.wrong));
        }
        return b.toString();
    }

    private static String anatomyTable(List<Level> rows, References refs) {
        StringBuilder b = header("Anatomy of a handoff (wall clock, from the records' timing marks; ms)", "| hop | where |", 2, rows, " p50 | p99 |");
        for (Hop h : Hop.values()) {
            b.append("| ").append(h.key()).append(h.crossProcess() ? " *" : "").append(" | ").append(h.label()).append(" |");
            for (Level r : rows) {
                double[] v = r.hops.ms().get(h);
                b.append(String.format(Locale.ROOT, " %s%s | %s |", fmt(pct(v, 50)), r.hops.share(h), fmt(pct(v, 99))));
            }
            b.append('\n');
        }
        b.append("| **transfer** (push start → all acked) | worker |");
        for (Level r : rows) {
            b.append(String.format(Locale.ROOT, " %s | %s |", fmt(pct(r.transferMs, 50)), fmt(pct(r.transferMs, 99))));
        }
        b.append("\n| **handoff at the proxy** | prefill answered → first token |");
        for (Level r : rows) {
            b.append(String.format(Locale.ROOT, " %s | %s |", fmt(pct(r.handoff, 50)), fmt(pct(r.handoff, 99))));
        }
        b.append(String.format(Locale.ROOT, "%n%n\\* between two processes (two clocks; one host here). References measured in the same run, pipeline"
                        + " idle: **raw Kafka hop** p50 %.3f ms, p99 %.3f ms (plain producer → plain consumer, %d records at 200/s on the"
                        + " pipeline's broker); **tcp transport** %.2f GB/s pushing %.1f MiB in %d KiB pages (as `bench transport` measures"
                        + " it: loopback, this JVM); the engines' **modelled compute**: prefill %.3f ms per prompt token, decode %.1f ms per"
                        + " token.%n", refs.rawHop.p50ms(), refs.rawHop.p99ms(), refs.rawHop.count(), refs.transportGbps, refs.bytes / 1048576.0,
                refs.pageBytes / 1024, refs.prefillMsPerToken, refs.decodeMsPerToken));
        return b.toString();
    }

    private static String targetsTable(List<Level> rows, References refs, EngineJoin engines) {
        StringBuilder b = header("In-situ targets (docs/architecture.md), p50", "| target | limit |", 2, rows, " |");
        double raw = refs.rawHop.p50ms();
        for (Hop h : KAFKA_HOPS) {
            // On the engine API the push starts on the engine's own report and the decode engine learns of its KV from its
            // worker: these four hops carry the record of the handoff (the decider's bookkeeping), not the handoff itself.
            b.append("| ").append(h.key()).append(" ≤ 2× raw hop").append(engines == EngineJoin.api ? " (beside the handoff on the engine API)" : "")
                    .append(" | ").append(String.format(Locale.ROOT, "%.3f ms |", 2 * raw));
            for (Level r : rows) {
                double v = pct(r.hops.ms().get(h), 50);
                if (Double.isNaN(v)) {
                    // no request crossed it on its handoff (every KV handed over on landing: the report's hops are beside it)
                    b.append(" — (on no request's handoff) |");
                    continue;
                }
                b.append(String.format(Locale.ROOT, " %s (%.1f×) %s |", fmt(v), v / raw, mark(v <= 2 * raw)));
            }
            b.append('\n');
        }
        if (!Double.isNaN(refs.rawLinkGbps)) {
            b.append(String.format(Locale.ROOT, "| push over the link ≥ 90 %% of a raw stream over it, same run | %.2f GB/s |", 0.9 * refs.rawLinkGbps));
            for (Level r : rows) {
                double g = pct(r.transferGbps, 50);
                b.append(String.format(Locale.ROOT, " %.2f GB/s (%.0f %%) %s |", g, 100 * g / refs.rawLinkGbps, mark(g >= 0.9 * refs.rawLinkGbps)));
            }
            b.append('\n');
        }
        if (Double.isNaN(refs.rawLinkGbps)) {
            // (on a link of its own the push is judged against the raw stream over that link, above)
            b.append(String.format(Locale.ROOT, "| transfer in situ ≥ 70 %% of the tcp transport | %.2f GB/s |", 0.7 * refs.transportGbps));
            for (Level r : rows) {
                double g = pct(r.transferGbps, 50);
                b.append(String.format(Locale.ROOT, " %.2f GB/s (%.0f %%) %s |", g, 100 * g / refs.transportGbps, mark(g >= 0.7 * refs.transportGbps)));
            }
            b.append('\n');
        }
        b.append("| handoff ≤ transfer + 4 raw hops + 3 ms | per level |");
        for (Level r : rows) {
            double limit = pct(r.transferMs, 50) + 4 * raw + 3;
            double v = pct(r.handoff, 50);
            b.append(String.format(Locale.ROOT, " %s ≤ %.1f %s |", fmt(v), limit, mark(v <= limit)));
        }
        b.append("\n| P/D TTFT overhead ≤ 1.5 × transfer + 5 ms | per level |");
        for (Level r : rows) {
            double limit = 1.5 * pct(r.transferMs, 50) + 5;
            double v = r.overheadP50();
            b.append(String.format(Locale.ROOT, " %s ≤ %.1f %s |", fmt(v), limit, mark(v <= limit)));
        }
        return b.append('\n').toString();
    }

    private static String cpuTable(List<Level> rows) {
        StringBuilder b = header("CPU per request (ms of CPU per answered request, each process, during each path's phase): what a handoff costs"
                + " beside a colocated answer", "| process |", 1, rows, " P/D | colocated |");
        List<String> names = rows.isEmpty() ? List.of() : new ArrayList<>(rows.get(0).cpuMsPerHandoff.keySet());
        double[][] total = new double[rows.size()][2];
        for (String n : names) {
            b.append("| ").append(n).append(" |");
            for (int i = 0; i < rows.size(); i++) {
                double p = rows.get(i).cpuMsPerHandoff.getOrDefault(n, Double.NaN);
                double c = rows.get(i).cpuMsPerColocated.getOrDefault(n, Double.NaN);
                total[i][0] += Double.isNaN(p) ? 0 : p;
                total[i][1] += Double.isNaN(c) ? 0 : c;
                b.append(String.format(Locale.ROOT, " %.2f | %.2f |", p, c));
            }
            b.append('\n');
        }
        b.append("| **all** |");
        for (double[] t : total) {
            b.append(String.format(Locale.ROOT, " **%.2f** | **%.2f** |", t[0], t[1]));
        }
        b.append("\n| **cores busy** (all × requests/s ÷ 1000) |");
        for (int i = 0; i < rows.size(); i++) {
            b.append(String.format(Locale.ROOT, " %.2f | %.2f |", total[i][0] * rows.get(i).pdRps / 1000, total[i][1] * rows.get(i).colocatedRps / 1000));
        }
        return b.append('\n').toString();
    }

    /** A table's title and header row: {@code first} columns, then one group per level ({@code perLevel}: its cells after "c=N"). */
    private static StringBuilder header(String title, String first, int firstColumns, List<Level> rows, String perLevel) {
        StringBuilder b = new StringBuilder("### ").append(title).append("\n\n").append(first);
        StringBuilder sep = new StringBuilder("|" + " --- |".repeat(firstColumns));
        int cells = perLevel.length() - perLevel.replace("|", "").length();
        for (Level r : rows) {
            b.append(" c=").append(r.concurrency).append(perLevel);
            sep.append(" --- |".repeat(cells));
        }
        return b.append('\n').append(sep).append('\n');
    }

    private static String mark(boolean ok) {
        return ok ? "met" : "**not met**";
    }

    private static String fmt(double v) {
        return Double.isNaN(v) ? "—" : String.format(Locale.ROOT, "%.2f", v);
    }

    // ------------------------------------------------------------------------------------------------ files

    private void write(String text, List<Level> rows, References refs, ModelPreset p, double load0, double load1) throws Exception {
        StringBuilder extra = new StringBuilder();
        deciderProps.forEach((k, v) -> extra.append(" --decider ").append(k).append('=').append(v));
        engineProps.forEach((k, v) -> extra.append(" --engine ").append(k).append('=').append(v));
        workerProps.forEach((k, v) -> extra.append(" --worker ").append(k).append('=').append(v));
        proxyProps.forEach((k, v) -> extra.append(" --proxy ").append(k).append('=').append(v));
        String cmd = "./orbitkv-pd bench e2e --engines " + engines + " --requests " + requests + " --concurrency " + join(levels) + " --warmup "
                + warmup + " --preset " + p.key() + " --prompt-words " + join(words) + " --prefill-ms-per-token " + prefillMs + " --decode-ms-per-token " + decodeMs + extra
                + (hosts.equals("loopback") ? "" : " --hosts " + hosts) + (link == null ? "" : " --link " + link);
        Files.createDirectories(outFile.toAbsolutePath().getParent());
        Files.writeString(outFile, "# End-to-end benchmark: P/D TTFT against colocated, and the anatomy of a handoff\n\nMeasured " + LocalDate.now()
                + " on " + Runtime.getRuntime().availableProcessors() + " cores with `" + cmd + "` (load average "
                + String.format(Locale.ROOT, "%.2f", load0) + " before, " + String.format(Locale.ROOT, "%.2f", load1) + " after). Every component"
                + " is its own process on this machine: broker, decider, one prefill and one decode engine (" + p.key() + "-shaped KV: "
                + p.geometry(1, 1).bytesPerBlock() / 1024 + " KiB per 16-token block over all layers) with their tcp transfer workers, the proxy,"
                + " and this load generator. TTFT = client-side time to the first streamed token through the proxy. P/D: " + (engines == EngineJoin.api
                ? "the engines join through their workers' engine API; the decider orders the push as soon as the decode engine is ready (an order"
                + " ahead of the prefill); the prefill engine computes the KV and reports it to its worker, which starts the push at once and"
                + " writes the fact to Kafka; the decode worker hands its engine the KV as the last page lands (the decider's KvReady follows on"
                + " the log); the decode engine streams"
                : "the engines have Kafka clients of their own; the prefill engine computes the KV and reports it, the decider orders the push,"
                + " the prefill worker pushes the pages to the decode worker, the decider says KV ready, the decode engine streams")
                + " (verifying every received page beside the decode; the answer ends only on verified KV). Colocated: the same requests, through the same proxy, to the decode engine alone (x-orbitkv-route: colocated),"
                + " which prefills itself — no handoff; both paths run the same modelled compute and materialise the same KV. Overhead = P/D −"
                + " colocated at the same percentile; handoff at proxy = prefill answered → decode's first byte. Every answer of both paths was"
                + " checked against the model's reference.\n\n" + text);
        Files.createDirectories(jsonFile.toAbsolutePath().getParent());
        StringBuilder j = new StringBuilder("{\"date\":\"" + LocalDate.now() + "\",\"command\":\"" + cmd + "\",\"engines\":\"" + engines
                + "\",\"cores\":"
                + Runtime.getRuntime().availableProcessors() + ",\"load_before\":" + num(load0) + ",\"load_after\":" + num(load1)
                + ",\"references\":{\"raw_hop_ms\":{\"p50\":" + num(refs.rawHop.p50ms()) + ",\"p99\":" + num(refs.rawHop.p99ms())
                + "},\"hosts\":\"" + hosts + "\",\"link\":" + (link == null ? "null" : "\"" + link + "\"") + ",\"raw_link_gbps\":" + num(refs.rawLinkGbps)
                + ",\"transport_gbps\":" + num(refs.transportGbps) + ",\"transport_bytes\":" + refs.bytes + ",\"page_bytes\":" + refs.pageBytes
                + ",\"prefill_ms_per_token\":" + num(refs.prefillMsPerToken) + ",\"decode_ms_per_token\":" + num(refs.decodeMsPerToken) + "},\"levels\":[");
        for (int i = 0; i < rows.size(); i++) {
            Level r = rows.get(i);
            j.append(i == 0 ? "" : ",").append("{\"concurrency\":").append(r.concurrency).append(",\"requests\":").append(r.requests)
                    .append(",\"handoff_p50_ms\":").append(num(pct(r.handoff, 50))).append(",\"transfer_p50_ms\":").append(num(pct(r.transferMs, 50)))
                    .append(",\"raw_hop_p50_ms\":").append(num(refs.rawHop.p50ms())).append(",\"transport_gbps_same_run\":").append(num(refs.transportGbps))
                    .append(",\"transfer_gbps_in_situ\":").append(num(pct(r.transferGbps, 50))).append(",\"overhead_p50_ms\":")
                    .append(num(r.overheadP50())).append(",\"ttft_pd_ms\":").append(pq(r.pd)).append(",\"ttft_colocated_ms\":").append(pq(r.colocated))
                    .append(",\"handoff_ms\":").append(pq(r.handoff)).append(",\"transfer_ms\":").append(pq(r.transferMs))
                    .append(",\"pd_rps\":").append(num(r.pdRps)).append(",\"colocated_rps\":").append(num(r.colocatedRps))
                    .append(",\"kv_bytes\":").append(r.kvBytes).append(",\"wrong_answers\":").append(r.wrong).append(",\"hops_ms\":{");
            int k = 0;
            for (Map.Entry<Hop, double[]> e : r.hops.ms().entrySet()) {
                j.append(k++ == 0 ? "" : ",").append('"').append(e.getKey().key()).append("\":").append(pq(e.getValue()));
            }
            j.append("},\"cpu_ms_per_handoff\":{");
            k = 0;
            for (Map.Entry<String, Double> e : r.cpuMsPerHandoff.entrySet()) {
                j.append(k++ == 0 ? "" : ",").append('"').append(e.getKey().replace("\"", "")).append("\":").append(num(e.getValue()));
            }
            j.append("},\"cpu_ms_per_colocated\":{");
            k = 0;
            for (Map.Entry<String, Double> e : r.cpuMsPerColocated.entrySet()) {
                j.append(k++ == 0 ? "" : ",").append('"').append(e.getKey().replace("\"", "")).append("\":").append(num(e.getValue()));
            }
            j.append("}}");
        }
        Files.writeString(jsonFile, j.append("]}\n").toString());
        System.out.println("results written to " + outFile + " and " + jsonFile);
    }

    private static String pq(double[] v) {
        return "{\"p50\":" + num(pct(v, 50)) + ",\"p99\":" + num(pct(v, 99)) + "}";
    }

    private static String num(double v) {
        return Double.isNaN(v) || Double.isInfinite(v) ? "null" : String.format(Locale.ROOT, "%.3f", v);
    }

    private static String join(List<?> l) {
        return String.join(",", l.stream().map(String::valueOf).toList());
    }

    private static double loadAverage() {
        try {
            return Double.parseDouble(Files.readString(Path.of("/proc/loadavg")).split(" ")[0]);
        } catch (Exception e) {
            return Double.NaN;
        }
    }
}
