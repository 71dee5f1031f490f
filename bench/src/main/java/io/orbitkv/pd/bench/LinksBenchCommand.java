package io.orbitkv.pd.bench;

import static io.orbitkv.pd.harness.Samples.pct;

import io.orbitkv.pd.engine.sim.ModelPreset;
import io.orbitkv.pd.engine.sim.SimModel;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.RecomputeDecided;
import io.orbitkv.pd.events.TransferFailed;
import io.orbitkv.pd.harness.LoadClient;
import io.orbitkv.pd.harness.NetnsHosts;
import io.orbitkv.pd.harness.Pipeline;
import io.orbitkv.pd.harness.PipelineLog;
import io.orbitkv.pd.harness.PipelineSpec;
import io.orbitkv.pd.harness.RawStream;
import io.orbitkv.pd.harness.Samples;
import io.orbitkv.pd.logtools.trace.HandoffAnatomy;
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
 * {@code orbitkv-pd bench links}: P/D across separate hosts whose links are rate-limited, for several link rates and
 * prompt lengths in one pipeline (the rate of every host's link is changed between rounds). Per (link, prompt): TTFT P/D
 * against colocated, the handoff, the push's rate against one raw TCP stream of the same bytes between the same two hosts
 * over the same link measured right before, and whether the default timeouts held (transfer failures, recomputes,
 * outcomes other than completed).
 */
@Command(name = "links", mixinStandardHelpOptions = true,
        header = "P/D across network hosts with rate-limited links, the push against a raw stream (needs root).",
        description = {"P/D across network hosts with rate-limited links (needs root): TTFT against colocated and the push against a raw",
                "stream over the same link, per link rate and prompt length."})
public final class LinksBenchCommand implements Callable<Integer> {

    @Option(names = "--link", defaultValue = "1gbit,5gbit,10gbit,none", split = ",", description = {"Link rates (tc units; none: the veth",
            "unlimited) (default: ${DEFAULT-VALUE})."})
    List<String> links;

    @Option(names = "--prompt-tokens", defaultValue = "1000,4000,8000", split = ",", description = "Prompt lengths (default: ${DEFAULT-VALUE}).")
    List<Integer> tokens;

    @Option(names = "--requests", defaultValue = "6", description = "Requests per (link, prompt) and path, one at a time (default: ${DEFAULT-VALUE}).")
    int requests;

    @Option(names = "--preset", defaultValue = "8b", description = "KV layout shape (default: ${DEFAULT-VALUE}).")
    String preset;

    @Option(names = "--prefill-ms-per-token", defaultValue = "0.05", description = "Compute model (default: ${DEFAULT-VALUE}).")
    double prefillMs;

    @Option(names = "--decider", description = "Extra decider property key=value (repeatable).")
    Map<String, String> deciderProps = Map.of();

    @Option(names = "--out", defaultValue = "docs/bench/links.md", description = "Markdown result file (default: ${DEFAULT-VALUE}).")
    Path outFile;

    @Option(names = "--json", defaultValue = "bench/results/links.json", description = "Machine-readable results (default: ${DEFAULT-VALUE}).")
    Path jsonFile;

    /** One (link, prompt length)'s numbers; latencies in ms. */
    record Row(String link, int tokens, double rawGbps, double pushGbps, double transferMs, double pdTtft, double colocatedTtft, double handoff,
               long kvBytes, int transferFailures, int recomputes, int notCompleted, int wrong) { }

    @Override
    public Integer call() throws Exception {
        ModelPreset p = ModelPreset.of(preset);
        int maxTokens = tokens.stream().mapToInt(Integer::intValue).max().orElse(1000);
        // Prompts are made of words, some of several tokens: the words that give each length, from the engines' tokenizer.
        double tokensPerWord = tokensPerWord();
        // One request at a time, but a finished request's pages come back a moment after its answer: room for three.
        int blocks = Math.max(384, (maxTokens / p.geometry(1, 1).blockSizeTokens() + 8) * 3);
        PipelineSpec spec = PipelineSpec.defaults().withModel(p, blocks, prefillMs, 2.0).withEngineApi(true).withNetns(true)
                .withExtra(deciderProps, Map.of(), Map.of(), Map.of());
        SimModel model = new SimModel(42);
        Path work = Files.createTempDirectory("orbitkv-bench-links-");
        List<Row> rows = new ArrayList<>();
        try (Pipeline pipeline = Pipeline.start(spec, work, s -> System.out.println("  " + s));
             LoadClient client = new LoadClient(pipeline.proxyUrl(), "orbitkv-sim-" + p.key(), null, java.time.Duration.ofMinutes(5))) {
            NetnsHosts rig = pipeline.hosts().orElseThrow();
            System.out.println("warm-up: 60 short requests each way ...");
            List<LoadClient.Request> warm = LoadClient.workload(3, 60, 100, 400, 8, true);
            client.run(warm, 4, () -> { });
            client.run(warm.stream().map(LoadClient.Request::colocatedTwin).toList(), 4, () -> { });
            int seed = 50;
            for (String link : links) {
                for (NetnsHosts.Host h : rig.hosts()) {
                    rig.rate(h.name(), link.equals("none") ? null : link);
                }
                for (int t : tokens) {
                    int words = (int) Math.round(t / tokensPerWord);
                    List<LoadClient.Request> work1 = LoadClient.workload(seed++, requests, words, words, 8, true);
                    System.out.printf(Locale.ROOT, "link %s, %d-token prompts: %d P/D requests, then colocated ...%n", link, t, requests);
                    List<LoadClient.Result> pd = client.run(work1, 1, () -> { });
                    List<LoadClient.Result> col = client.run(work1.stream().map(LoadClient.Request::colocatedTwin).toList(), 1, () -> { });
                    // every new request's outcome (30 s at most; what is still missing counts as not completed)
                    PipelineLog log = PipelineLog.readUntilOutcomes(pipeline.bootstrapServers(),
                            pd.stream().map(LoadClient.Result::requestId).filter(java.util.Objects::nonNull).toList(), java.time.Duration.ofSeconds(30));
                    List<Double> transferMs = new ArrayList<>();
                    List<Double> gbps = new ArrayList<>();
                    int failures = 0;
                    int recomputes = 0;
                    int notCompleted = 0;
                    long kv = 0;
                    // the P/D requests' stories (a colocated answer has no handoff and no decision)
                    for (LoadClient.Result r : pd) {
                        PipelineLog.Story s = r.requestId() == null ? null : log.stories.get(r.requestId());
                        if (s == null) {
                            notCompleted++;
                            continue;
                        }
                        failures += (int) s.facts.stream().filter(f -> f instanceof TransferFailed).count();
                        recomputes += (int) s.decisions.stream().filter(d -> d instanceof RecomputeDecided).count();
                        if (s.outcomes.isEmpty() || s.outcomes.get(0).getKind() != OutcomeKind.COMPLETED) {
                            notCompleted++;
                        }
                        HandoffAnatomy a = s.anatomy();
                        if (a.transferMicros() > 0) {
                            transferMs.add(a.transferMicros() / 1e3);
                            gbps.add(a.transferBytes() / (a.transferMicros() * 1e3));
                            kv = Math.max(kv, a.transferBytes());
                        }
                    }
                    int wrong = 0;
                    for (List<LoadClient.Result> rs : List.of(pd, col)) {
                        for (LoadClient.Result r : rs) {
                            if (!r.ok() || !r.text().equals(r.request().expected(model))) {
                                wrong++;
                            }
                        }
                    }
                    double raw = kv == 0 ? Double.NaN : RawStream.measure(rig, "prefill-0", "decode-0", kv) / 1e9;
                    Row row = new Row(link, t, raw, pct(Samples.ascending(gbps), 50), pct(Samples.ascending(transferMs), 50),
                            pct(Samples.ttftMs(pd), 50), pct(Samples.ttftMs(col), 50), pct(Samples.handoffMs(pd), 50), kv, failures, recomputes,
                            notCompleted, wrong);
                    rows.add(row);
                    System.out.println("  " + line(row));
                }
            }
        }
        String table = table(rows);
        System.out.println();
        System.out.println(table);
        String cmd = "./orbitkv-pd bench links --link " + String.join(",", links) + " --prompt-tokens " + join(tokens) + " --requests " + requests
                + " --preset " + p.key() + " --prefill-ms-per-token " + prefillMs;
        Files.createDirectories(outFile.toAbsolutePath().getParent());
        Files.writeString(outFile, "# P/D across hosts with rate-limited links\n\nMeasured " + LocalDate.now() + " on "
                + Runtime.getRuntime().availableProcessors() + " cores with `" + cmd + "`: the pipeline on separate hosts (network namespaces on a"
                + " bridge: broker, decider, prefill node, decode node, proxy; docs/deploy.md, \"Several hosts on one machine\"), every host's link"
                + " limited to the rate of the row (tc tbf on both ends of its veth; `none`: the veth unlimited), the engines on their workers'"
                + " engine API, " + p.key() + "-shaped KV (" + p.geometry(1, 1).bytesPerBlock() / 1024 + " KiB per " + p.geometry(1, 1).blockSizeTokens()
                + "-token block), one request at a time. *raw stream*: one plain TCP stream of the same bytes from the prefill host to the decode"
                + " host over the same links, measured right after the row's requests; *push*: the transfer's rate from the log (push start →"
                + " every byte acknowledged), p50. TTFTs and the handoff are p50 ms at the client / proxy. *failures*, *recomputes*, *not"
                + " completed*: transfer attempts that failed, recompute decisions and outcomes other than completed with the default timeouts;"
                + " *wrong*: answers not equal to the model's reference.\n\n" + table + "\nTarget (issue 31): the push ≥ 90 % of the raw stream over"
                + " a rate-limited link; the default timeouts hold on the slowest link with no spurious recompute.\n");
        Files.createDirectories(jsonFile.toAbsolutePath().getParent());
        StringBuilder j = new StringBuilder("{\"date\":\"" + LocalDate.now() + "\",\"command\":\"" + cmd + "\",\"rows\":[");
        for (int i = 0; i < rows.size(); i++) {
            Row r = rows.get(i);
            j.append(i == 0 ? "" : ",").append(String.format(Locale.ROOT, "{\"link\":\"%s\",\"prompt_tokens\":%d,\"raw_stream_gbps\":%s,"
                    + "\"push_gbps_p50\":%s,\"push_share_of_raw\":%s,\"transfer_p50_ms\":%s,\"ttft_pd_p50_ms\":%s,\"ttft_colocated_p50_ms\":%s,"
                    + "\"handoff_p50_ms\":%s,\"kv_bytes\":%d,\"transfer_failures\":%d,\"recomputes\":%d,\"not_completed\":%d,\"wrong\":%d}",
                    r.link, r.tokens, num(r.rawGbps), num(r.pushGbps), num(r.pushGbps / r.rawGbps), num(r.transferMs), num(r.pdTtft),
                    num(r.colocatedTtft), num(r.handoff), r.kvBytes, r.transferFailures, r.recomputes, r.notCompleted, r.wrong));
        }
        Files.writeString(jsonFile, j.append("]}\n").toString());
        System.out.println("results written to " + outFile + " and " + jsonFile);
        return rows.stream().allMatch(r -> r.wrong == 0) ? 0 : 1;
    }

    /** Tokens per word of the load's prompts, as the simulated engines tokenize them (a 20,000-word sample). */
    private static double tokensPerWord() {
        LoadClient.Request sample = LoadClient.workload(1, 1, 20_000, 20_000, 1, true).get(0);
        return SimModel.tokenize(sample.prompt()).length / 20_000.0;
    }

    private static String table(List<Row> rows) {
        StringBuilder b = new StringBuilder("| link | prompt tokens | KV MiB | raw stream GB/s | push GB/s | push / raw | transfer ms | TTFT P/D ms |"
                + " TTFT colocated ms | P/D − colocated ms | handoff ms | failures | recomputes | not completed | wrong |\n");
        b.append("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        for (Row r : rows) {
            b.append(String.format(Locale.ROOT, "| %s | %d | %.0f | %.2f | %.2f | %.0f %% %s | %.1f | %.1f | %.1f | %.1f | %.1f | %d | %d | %d | %d |%n",
                    r.link, r.tokens, r.kvBytes / 1048576.0, r.rawGbps, r.pushGbps, 100 * r.pushGbps / r.rawGbps,
                    r.link.equals("none") ? "" : r.pushGbps >= 0.9 * r.rawGbps ? "met" : "**not met**", r.transferMs, r.pdTtft, r.colocatedTtft,
                    r.pdTtft - r.colocatedTtft, r.handoff, r.transferFailures, r.recomputes, r.notCompleted, r.wrong));
        }
        return b.toString();
    }

    private static String line(Row r) {
        return String.format(Locale.ROOT, "raw %.2f GB/s, push %.2f GB/s (%.0f %%), transfer %.1f ms, TTFT P/D %.1f vs colocated %.1f ms, handoff"
                + " %.1f ms, %d failures, %d recomputes, %d not completed, %d wrong", r.rawGbps, r.pushGbps, 100 * r.pushGbps / r.rawGbps,
                r.transferMs, r.pdTtft, r.colocatedTtft, r.handoff, r.transferFailures, r.recomputes, r.notCompleted, r.wrong);
    }

    private static String num(double v) {
        return Double.isNaN(v) || Double.isInfinite(v) ? "null" : String.format(Locale.ROOT, "%.4f", v);
    }

    private static String join(List<Integer> v) {
        return String.join(",", v.stream().map(String::valueOf).toList());
    }
}
