package io.orbitkv.pd.bench;

import io.orbitkv.pd.engine.sim.ModelPreset;
import io.orbitkv.pd.harness.Samples;
import io.orbitkv.pd.harness.LoadClient;
import io.orbitkv.pd.harness.Pipeline;
import io.orbitkv.pd.harness.PipelineSpec;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code orbitkv-pd bench scale}: the same closed-loop load through layouts of different size, one after another in one
 * run — the 1-broker / 1-decider / 1+1-engine / 1-proxy layout as the baseline, the scaled-out one (3 KRaft nodes, 2
 * decider instances, 4 + 4 engines with their workers, 2 proxies), and the scaled-out one with 1 decider instance and
 * with twice the partitions: throughput, TTFT and handoff, and the decider's share of the work.
 */
@Command(name = "scale", mixinStandardHelpOptions = true,
        header = "Throughput and handoff latency of larger layouts (brokers, deciders, engines) under the same load.",
        description = {"Throughput and handoff latency of layouts of different size under the same load, in one run: 1 broker / 1 decider /",
                "1+1 engines / 1 proxy against 3 KRaft nodes / 2 deciders / 4+4 engines / 2 proxies (and that with 1 decider, and",
                "with more partitions). Every component is a process on this machine. Prints a table, writes --out and its JSON."})
public final class ScaleBenchCommand implements Callable<Integer> {

    @Option(names = "--requests", defaultValue = "400", description = "Measured requests per layout (default: ${DEFAULT-VALUE}).")
    int requests;
    @Option(names = "--warmup", defaultValue = "150", description = "Requests first, not measured (default: ${DEFAULT-VALUE}).")
    int warmup;
    @Option(names = "--concurrency", defaultValue = "16", description = "Requests in flight over all proxies (default: ${DEFAULT-VALUE}).")
    int concurrency;
    @Option(names = "--preset", defaultValue = "tiny", description = "KV layout shape (default: ${DEFAULT-VALUE}: the control plane is what scales here).")
    String preset;
    @Option(names = "--layouts", defaultValue = "single,scaled,scaled-1-decider,scaled-12-partitions", split = ",",
            description = "Which layouts, in order (default: ${DEFAULT-VALUE}).")
    List<String> layouts;
    @Option(names = "--out", defaultValue = "docs/bench/scale.md", description = "Markdown result file (default: ${DEFAULT-VALUE}).")
    Path outFile;

    /** One layout: KRaft nodes, decider instances, prefill and decode engines, proxies, partitions of the per-request topics. */
    record Layout(String name, int brokers, int deciders, int prefill, int decode, int proxies, int partitions) {
        static Layout of(String name) {
            return switch (name) {
                case "single" -> new Layout(name, 1, 1, 1, 1, 1, 6);
                case "scaled" -> new Layout(name, 3, 2, 4, 4, 2, 6);
                case "scaled-1-decider" -> new Layout(name, 3, 1, 4, 4, 2, 6);
                case "scaled-12-partitions" -> new Layout(name, 3, 2, 4, 4, 2, 12);
                default -> throw new IllegalArgumentException("--layouts: no layout '" + name + "' (single, scaled, scaled-1-decider, "
                        + "scaled-12-partitions)");
            };
        }

        int processes() {
            return brokers + deciders + 2 * (prefill + decode) + proxies;
        }
    }

    record Row(Layout layout, int requests, int errors, double seconds, double[] ttft, double[] handoff, double startSeconds) {
        double rate() {
            return (requests - errors) / seconds;
        }
    }

    @Override
    public Integer call() throws Exception {
        ModelPreset p = ModelPreset.of(preset);
        String load0 = MachineInfo.loadAverage();
        List<Row> rows = new ArrayList<>();
        for (String name : layouts) {
            rows.add(run(Layout.of(name), p));
        }
        String table = table(rows);
        System.out.println();
        System.out.println(table);
        write(table, rows, load0);
        return 0;
    }

    private Row run(Layout l, ModelPreset p) throws Exception {
        System.out.printf("%s: %d KRaft node(s), %d decider(s), %d+%d engines with workers, %d prox%s, %d partitions (%d processes) ...%n",
                l.name(), l.brokers(), l.deciders(), l.prefill(), l.decode(), l.proxies(), l.proxies() == 1 ? "y" : "ies", l.partitions(), l.processes());
        Map<String, String> topics = Map.of("topics.partitions", Integer.toString(l.partitions()));
        PipelineSpec spec = PipelineSpec.defaults().withEngines(l.prefill(), l.decode()).withDeciders(l.deciders()).withBrokers(l.brokers())
                .withProxies(l.proxies()).withModel(p, 256, 0.05, 2.0).withExtra(topics, topics, topics, topics);
        Path work = Files.createTempDirectory("orbitkv-bench-scale-");
        long t0 = System.nanoTime();
        try (Pipeline pipeline = Pipeline.start(spec, work, s -> System.out.println("  " + s))) {
            double startSeconds = (System.nanoTime() - t0) / 1e9;
            List<LoadClient> clients = new ArrayList<>();
            for (String url : pipeline.proxyUrls()) {
                clients.add(new LoadClient(url, "orbitkv-sim-" + p.key()));
            }
            try {
                load(clients, LoadClient.workload(7, warmup, 40, 200, 8, true));
                List<LoadClient.Request> work1 = LoadClient.workload(11, requests, 40, 200, 8, true);
                long t = System.nanoTime();
                List<LoadClient.Result> results = load(clients, work1);
                double secs = (System.nanoTime() - t) / 1e9;
                int errors = (int) results.stream().filter(r -> !r.ok()).count();
                results.stream().filter(r -> !r.ok()).limit(3).forEach(r -> System.out.println("  error: status " + r.status() + " "
                        + (r.error() != null ? r.error() : r.text() == null ? "" : r.text().substring(0, Math.min(200, r.text().length())))));
                double[] ttft = io.orbitkv.pd.harness.Samples.ttftMs(results);
                double[] hand = results.stream().filter(r -> r.ok() && !Double.isNaN(r.handoffMs())).mapToDouble(LoadClient.Result::handoffMs)
                        .sorted().toArray();
                Row row = new Row(l, results.size(), errors, secs, ttft, hand, startSeconds);
                System.out.printf(Locale.ROOT, "  %.1f req/s, TTFT p50 %.1f ms, handoff p50 %.1f ms, %d errors%n", row.rate(), Samples.pct(ttft, 50),
                        Samples.pct(hand, 50), errors);
                return row;
            } finally {
                clients.forEach(LoadClient::close);
            }
        } finally {
            io.orbitkv.pd.broker.KraftCluster.deleteRecursively(work);
        }
    }

    /** The requests spread over the proxies as a load balancer would, {@code concurrency} in flight in all. */
    private List<LoadClient.Result> load(List<LoadClient> clients, List<LoadClient.Request> work) throws InterruptedException {
        int n = clients.size();
        List<List<LoadClient.Result>> parts = Collections.synchronizedList(new ArrayList<>());
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < n; i++) {
            List<LoadClient.Request> mine = new ArrayList<>();
            for (int k = i; k < work.size(); k += n) {
                mine.add(work.get(k));
            }
            LoadClient c = clients.get(i);
            int share = Math.max(1, concurrency / n);
            threads.add(Thread.ofPlatform().start(() -> {
                try {
                    parts.add(c.run(mine, share, () -> { }));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }));
        }
        for (Thread t : threads) {
            t.join();
        }
        return parts.stream().flatMap(List::stream).toList();
    }

    private String table(List<Row> rows) {
        StringBuilder b = new StringBuilder("| layout | KRaft nodes | deciders | engines (P+D) | proxies | partitions | processes | requests | errors "
                + "| req/s | vs first | TTFT p50 / p99 ms | handoff p50 / p99 ms | start s |\n|");
        b.append(" --- |".repeat(14)).append('\n');
        double base = rows.isEmpty() ? 1 : rows.get(0).rate();
        for (Row r : rows) {
            Layout l = r.layout();
            b.append(String.format(Locale.ROOT, "| %s | %d | %d | %d+%d | %d | %d | %d | %d | %d | %.1f | %.2f× | %.1f / %.1f | %.1f / %.1f | %.0f |%n",
                    l.name(), l.brokers(), l.deciders(), l.prefill(), l.decode(), l.proxies(), l.partitions(), l.processes(), r.requests(),
                    r.errors(), r.rate(), r.rate() / base, Samples.pct(r.ttft(), 50), Samples.pct(r.ttft(), 99), Samples.pct(r.handoff(), 50), Samples.pct(r.handoff(), 99),
                    r.startSeconds()));
        }
        return b.toString();
    }

    private void write(String table, List<Row> rows, String load0) throws Exception {
        Files.createDirectories(outFile.toAbsolutePath().getParent());
        String cmd = "./orbitkv-pd bench scale --requests " + requests + " --warmup " + warmup + " --concurrency " + concurrency + " --preset "
                + preset + " --layouts " + String.join(",", layouts);
        Files.writeString(outFile, "# Scale-out benchmark\n\nMeasured " + LocalDate.now() + " on " + Runtime.getRuntime().availableProcessors()
                + " cores (" + MachineInfo.cpuModel() + "; 1-minute load average " + load0 + " before, " + MachineInfo.loadAverage() + " after) with `"
                + cmd + "`. Each layout is started as processes on this one machine (every KRaft node, decider instance, engine, worker"
                + " and proxy its own JVM), warmed up, then given the same closed-loop load: " + requests + " streamed P/D requests, "
                + concurrency + " in flight over all its proxies (split between them as a load balancer would). TTFT at the client;"
                + " handoff = prefill answered → decode's first byte, at the proxy. Layouts run one after another in the same run;"
                + " the first is the baseline.\n\n" + table);
        Path json = BenchFiles.jsonFor(outFile);
        StringBuilder j = new StringBuilder("{\"date\":\"" + LocalDate.now() + "\",\"cores\":" + Runtime.getRuntime().availableProcessors()
                + ",\"requests\":" + requests + ",\"concurrency\":" + concurrency + ",\"layouts\":[");
        for (int i = 0; i < rows.size(); i++) {
            Row r = rows.get(i);
            Layout l = r.layout();
            j.append(i == 0 ? "" : ",").append(String.format(Locale.ROOT, "{\"name\":\"%s\",\"brokers\":%d,\"deciders\":%d,\"prefill\":%d,\"decode\":%d,"
                            + "\"proxies\":%d,\"partitions\":%d,\"errors\":%d,\"req_per_s\":%.2f,\"ttft_p50_ms\":%.2f,\"ttft_p99_ms\":%.2f,"
                            + "\"handoff_p50_ms\":%.2f,\"handoff_p99_ms\":%.2f,\"start_s\":%.1f}", l.name(), l.brokers(), l.deciders(), l.prefill(),
                    l.decode(), l.proxies(), l.partitions(), r.errors(), r.rate(), Samples.pct(r.ttft(), 50), Samples.pct(r.ttft(), 99), Samples.pct(r.handoff(), 50),
                    Samples.pct(r.handoff(), 99), r.startSeconds()));
        }
        Files.writeString(json, j.append("]}\n").toString());
        System.out.println("results written to " + outFile + " and " + json);
    }
}
