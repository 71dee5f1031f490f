package io.orbitkv.pd.cli.bench;

import io.orbitkv.pd.cli.pipeline.LoadClient;
import io.orbitkv.pd.cli.pipeline.Pipeline;
import io.orbitkv.pd.engine.sim.ModelPreset;
import io.orbitkv.pd.engine.sim.SimModel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code orbitkv-pd bench e2e}: end-to-end time to first token through the proxy, P/D (prefill engine → decider →
 * transfer worker push → decode engine) against the same engines colocated (one engine prefills and decodes, no
 * handoff), in the same run, at several concurrency levels. The difference is what the handoff costs.
 */
@Command(name = "e2e", mixinStandardHelpOptions = true,
        description = {"End-to-end TTFT through the proxy, P/D against the same engines colocated (no handoff), in the same run, at",
                "several concurrency levels; the overhead at p50/p99 is what the handoff costs. Starts the whole pipeline as processes."})
public final class E2eBenchCommand implements Callable<Integer> {

    @Option(names = "--requests", defaultValue = "200", description = "Requests per level and path (default: ${DEFAULT-VALUE}).")
    int requests;

    @Option(names = "--concurrency", defaultValue = "1,4,16", split = ",", description = "Concurrency levels (default: ${DEFAULT-VALUE}).")
    List<Integer> levels;

    @Option(names = "--preset", defaultValue = "8b", description = "KV layout shape (default: ${DEFAULT-VALUE}).")
    String preset;

    @Option(names = "--prompt-words", defaultValue = "40,200", split = ",", description = "Prompt length range in words (default: ${DEFAULT-VALUE}).")
    List<Integer> words;

    @Option(names = "--prefill-ms-per-token", defaultValue = "0.05", description = "Compute model (default: ${DEFAULT-VALUE}).")
    double prefillMs;

    @Option(names = "--decode-ms-per-token", defaultValue = "2", description = "Compute model (default: ${DEFAULT-VALUE}).")
    double decodeMs;

    @Option(names = "--out", defaultValue = "docs/bench/e2e.md", description = "Markdown result file (default: ${DEFAULT-VALUE}).")
    Path outFile;

    @Option(names = "--json", defaultValue = "bench/results/e2e.json", description = "Machine-readable results (default: ${DEFAULT-VALUE}).")
    Path jsonFile;

    /** One level's numbers. */
    record Row(int concurrency, int requests, double[] pd, double[] colocated, double[] handoff, double pdRps, double colocatedRps, long kvBytes,
               int wrong) { }

    @Override
    public Integer call() throws Exception {
        Path work = Files.createTempDirectory("orbitkv-bench-e2e-");
        ModelPreset p = ModelPreset.of(preset);
        Pipeline.Spec spec = Pipeline.Spec.defaults().withModel(p, 384, prefillMs, decodeMs);
        SimModel model = new SimModel(42);
        double load0 = loadAverage();
        List<Row> rows = new ArrayList<>();
        try (Pipeline pipeline = Pipeline.start(spec, work, s -> System.out.println("  " + s));
             LoadClient client = new LoadClient(pipeline.proxyUrl(), "orbitkv-sim-" + p.key())) {
            System.out.println("warm-up (discarded): 150 requests each way ...");
            List<LoadClient.Request> warm = LoadClient.workload(5, 150, words.get(0), words.get(1), 16, true);
            client.run(warm, 8, () -> { });
            client.run(warm.stream().map(LoadClient.Request::colocatedTwin).toList(), 8, () -> { });
            int seed = 100;
            for (int c : levels) {
                List<LoadClient.Request> work1 = LoadClient.workload(seed++, requests, words.get(0), words.get(1), 16, true);
                System.out.printf("c=%d: %d P/D requests, then the same %d colocated ...%n", c, requests, requests);
                long t = System.nanoTime();
                List<LoadClient.Result> pd = client.run(work1, c, () -> { });
                double pdSecs = (System.nanoTime() - t) / 1e9;
                t = System.nanoTime();
                List<LoadClient.Result> col = client.run(work1.stream().map(LoadClient.Request::colocatedTwin).toList(), c, () -> { });
                double colSecs = (System.nanoTime() - t) / 1e9;
                int wrong = 0;
                for (LoadClient.Result r : concat(pd, col)) {
                    if (!r.ok() || !r.text().equals(r.request().expected(model))) {
                        wrong++;
                    }
                }
                Row row = new Row(c, requests, ttfts(pd), ttfts(col), pd.stream().filter(r -> r.ok() && !Double.isNaN(r.handoffMs()))
                        .mapToDouble(LoadClient.Result::handoffMs).sorted().toArray(), requests / pdSecs, requests / colSecs,
                        pd.stream().mapToLong(LoadClient.Result::kvBytes).sum(), wrong);
                rows.add(row);
                System.out.printf(Locale.ROOT, "  TTFT P/D p50 %.1f p99 %.1f ms | colocated p50 %.1f p99 %.1f ms | overhead p50 %.1f p99 %.1f ms | "
                                + "handoff p50 %.1f p99 %.1f ms | wrong %d%n", pct(row.pd, 50), pct(row.pd, 99), pct(row.colocated, 50),
                        pct(row.colocated, 99), pct(row.pd, 50) - pct(row.colocated, 50), pct(row.pd, 99) - pct(row.colocated, 99),
                        pct(row.handoff, 50), pct(row.handoff, 99), wrong);
            }
        }
        double load1 = loadAverage();
        String table = table(rows);
        System.out.println();
        System.out.println(table);
        write(table, rows, p, load0, load1);
        return rows.stream().allMatch(r -> r.wrong == 0) ? 0 : 1;
    }

    private static List<LoadClient.Result> concat(List<LoadClient.Result> a, List<LoadClient.Result> b) {
        List<LoadClient.Result> out = new ArrayList<>(a);
        out.addAll(b);
        return out;
    }

    private static double[] ttfts(List<LoadClient.Result> rs) {
        return rs.stream().filter(LoadClient.Result::ok).mapToDouble(r -> r.ttftNanos() / 1e6).sorted().toArray();
    }

    static double pct(double[] sorted, double p) {
        if (sorted.length == 0) {
            return Double.NaN;
        }
        int i = (int) Math.ceil(p / 100.0 * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, i))];
    }

    private static String table(List<Row> rows) {
        StringBuilder b = new StringBuilder();
        b.append("| concurrency | requests | TTFT P/D p50 ms | p99 ms | TTFT colocated p50 ms | p99 ms | overhead p50 ms | overhead p99 ms |"
                + " handoff at proxy p50 ms | p99 ms | P/D req/s | colocated req/s | KV MiB moved | answers wrong |\n");
        b.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
        for (Row r : rows) {
            b.append(String.format(Locale.ROOT, "| %d | %d | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f | %d |%n",
                    r.concurrency, r.requests, pct(r.pd, 50), pct(r.pd, 99), pct(r.colocated, 50), pct(r.colocated, 99),
                    pct(r.pd, 50) - pct(r.colocated, 50), pct(r.pd, 99) - pct(r.colocated, 99), pct(r.handoff, 50), pct(r.handoff, 99), r.pdRps,
                    r.colocatedRps, r.kvBytes / 1048576.0, r.wrong));
        }
        return b.toString();
    }

    private void write(String table, List<Row> rows, ModelPreset p, double load0, double load1) throws Exception {
        String cmd = "./orbitkv-pd bench e2e --requests " + requests + " --concurrency " + join(levels) + " --preset " + p.key() + " --prompt-words "
                + join(words) + " --prefill-ms-per-token " + prefillMs + " --decode-ms-per-token " + decodeMs;
        Files.createDirectories(outFile.toAbsolutePath().getParent());
        Files.writeString(outFile, "# End-to-end benchmark: P/D TTFT against colocated\n\nMeasured " + LocalDate.now() + " on "
                + Runtime.getRuntime().availableProcessors() + " cores with `" + cmd + "` (load average " + String.format(Locale.ROOT, "%.2f", load0)
                + " before, " + String.format(Locale.ROOT, "%.2f", load1) + " after). Every component is its own process on this machine: broker,"
                + " decider, one prefill and one decode engine (" + p.key() + "-shaped KV: " + p.geometry(1, 1).bytesPerBlock() / 1024
                + " KiB per 16-token block over all layers) with their tcp transfer workers, the proxy, and this load generator. TTFT = client-side"
                + " time to the first streamed token through the proxy. P/D: the prefill engine computes the KV and reports it, the decider orders"
                + " the push, the prefill worker pushes the pages to the decode worker, the decider says KV ready, the decode engine verifies every"
                + " page and streams. Colocated: the same requests, through the same proxy, to the decode engine alone (x-orbitkv-route: colocated),"
                + " which prefills itself — no handoff. Overhead = P/D − colocated at the same percentile; handoff at proxy = prefill answered →"
                + " decode's first byte. Every answer of both paths was checked against the model's reference.\n\n" + table);
        Files.createDirectories(jsonFile.toAbsolutePath().getParent());
        StringBuilder j = new StringBuilder("{\"date\":\"" + LocalDate.now() + "\",\"command\":\"" + cmd + "\",\"load_before\":"
                + String.format(Locale.ROOT, "%.2f", load0) + ",\"load_after\":" + String.format(Locale.ROOT, "%.2f", load1) + ",\"levels\":[");
        for (int i = 0; i < rows.size(); i++) {
            Row r = rows.get(i);
            j.append(i == 0 ? "" : ",").append(String.format(Locale.ROOT, "{\"concurrency\":%d,\"requests\":%d,\"ttft_pd_ms\":{\"p50\":%.2f,\"p99\":%.2f},"
                            + "\"ttft_colocated_ms\":{\"p50\":%.2f,\"p99\":%.2f},\"overhead_ms\":{\"p50\":%.2f,\"p99\":%.2f},\"handoff_ms\":{\"p50\":%.2f,"
                            + "\"p99\":%.2f},\"pd_rps\":%.1f,\"colocated_rps\":%.1f,\"kv_bytes\":%d,\"wrong_answers\":%d}", r.concurrency, r.requests,
                    pct(r.pd, 50), pct(r.pd, 99), pct(r.colocated, 50), pct(r.colocated, 99), pct(r.pd, 50) - pct(r.colocated, 50),
                    pct(r.pd, 99) - pct(r.colocated, 99), pct(r.handoff, 50), pct(r.handoff, 99), r.pdRps, r.colocatedRps, r.kvBytes, r.wrong));
        }
        Files.writeString(jsonFile, j.append("]}\n").toString());
        System.out.println("results written to " + outFile + " and " + jsonFile);
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

    static String arr(double[] a) {
        return Arrays.toString(a);
    }
}
