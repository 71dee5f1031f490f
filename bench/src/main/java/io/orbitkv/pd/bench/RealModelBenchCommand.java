package io.orbitkv.pd.bench;

import com.fasterxml.jackson.databind.ObjectMapper;
import io.orbitkv.pd.harness.Samples;
import io.orbitkv.pd.harness.LoadClient;
import io.orbitkv.pd.harness.Pipeline;
import io.orbitkv.pd.harness.PipelineSpec;
import io.orbitkv.pd.harness.PipelineLog;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.bench.gpu.ContiguousCopy;
import io.orbitkv.pd.logtools.trace.HandoffAnatomy;
import io.orbitkv.pd.tracing.Hop;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code orbitkv-pd bench real-model}: a real transformer's KV through the whole pipeline on one GPU. The broker, the
 * decider, the prefill and the decode engine ({@code python -m orbitkv_pd.real_engine}: transformers, KV in GPU page
 * pools registered by CUDA IPC handle) with their workers in one node process ({@code cuda} transport), and the
 * proxy; prompts of each length go through the proxy P/D and colocated, one at a time, and every P/D answer's tokens
 * must equal the colocated answer of the same prompt; P/D goes layer by layer and whole by turns. Then pairs of prompts
 * sharing a prefix (the engines' prefix cache: the second computes and moves only what it does not share), cancels
 * mid-transfer, decode leases that expire and prefills that fail half-way; every page must come back, and the log must
 * audit clean. Runs where a CUDA GPU, PyTorch and transformers are (docs/gpu.md).
 */
@Command(name = "real-model", mixinStandardHelpOptions = true,
        header = "A real transformer's KV through the whole pipeline on one GPU: P/D against colocated (needs a GPU).",
        description = {"A real transformer's KV through the whole pipeline on one GPU (cuda transport): P/D against colocated per prompt",
                "length (answers must be equal), the handoff's anatomy, the cuda push against a contiguous device copy of the same",
                "bytes, cancels mid-transfer and expiring leases (pages returned, audit clean). Needs a CUDA GPU, PyTorch and",
                "transformers (docs/gpu.md, 'The real-model run'). Writes docs/bench/real-model.md and bench/results/real-model.json."})
public final class RealModelBenchCommand implements Callable<Integer> {

    private static final ObjectMapper JSON = new ObjectMapper();
    /** The anatomy's hops in the tables: those before the prefill (only P/D takes the proxy's admission), then the handoff's. */
    private static final List<Hop> HOPS = List.of(Hop.ADMIT, Hop.PREFILL_REQUEST, Hop.PREFILL_QUEUE, Hop.PREFILL_COMPUTE, Hop.PREFILL_REPORT,
            Hop.FACT_TO_DECIDER, Hop.DECIDER_ORDER, Hop.ORDER_TO_WORKER, Hop.PREFILL_TO_WORKER, Hop.WORKER_QUEUE, Hop.TRANSFER_SETUP,
            Hop.TRANSFER_ADMISSION, Hop.TRANSFER_WIRE, Hop.TRANSFER_APPLY, Hop.TRANSFER_REPORT, Hop.REPORT_TO_DECIDER, Hop.DECIDER_KV_READY,
            Hop.KV_READY_TO_ENGINE, Hop.LANDED_TO_ENGINE, Hop.ENGINE_FIRST_TOKEN, Hop.FIRST_TOKEN_TO_PROXY, Hop.PREFILL_ANSWER);

    @Option(names = "--shape", defaultValue = "8b", description = "Random-weight Llama shape: 8b, 1b, tiny (default: ${DEFAULT-VALUE}).")
    String shape;
    @Option(names = "--model-path", description = "A local checkpoint directory instead of random weights (never downloaded).")
    String modelPath;
    @Option(names = "--lengths", defaultValue = "128,1024,4096,8192,32768", split = ",", description = "Prompt lengths in tokens (default: ${DEFAULT-VALUE}).")
    List<Integer> lengths;
    @Option(names = "--prompts", defaultValue = "20", description = "Measured prompts per length, each P/D and colocated; P/D layer by layer and"
            + " whole by turns (default: ${DEFAULT-VALUE}).")
    int prompts;
    @Option(names = "--warmup", defaultValue = "2", description = "Discarded prompts per length first (default: ${DEFAULT-VALUE}).")
    int warmup;
    @Option(names = "--max-tokens", defaultValue = "16", description = "Tokens generated per answer (default: ${DEFAULT-VALUE}).")
    int maxTokens;
    @Option(names = "--pool-blocks", defaultValue = "4096", description = "16-token pages per layer and part in each engine's pool (default: ${DEFAULT-VALUE}).")
    int poolBlocks;
    @Option(names = "--cancels", defaultValue = "3", description = "Requests cancelled mid-transfer (default: ${DEFAULT-VALUE}).")
    int cancels;
    @Option(names = "--expiries", defaultValue = "2", description = "Requests whose decode lease expires (default: ${DEFAULT-VALUE}).")
    int expiries;
    @Option(names = "--prefix-prompts", defaultValue = "4", description = "Prompt pairs sharing a prefix, for the prefix cache (default: ${DEFAULT-VALUE}).")
    int prefixPrompts;
    @Option(names = "--prefix-tokens", defaultValue = "4096", description = "Tokens of each prompt of a pair; the second shares the first's"
            + " leading three quarters (default: ${DEFAULT-VALUE}).")
    int prefixTokens;
    @Option(names = "--midway-failures", defaultValue = "2", description = "Prefills that fail half-way through a push layer by layer"
            + " (default: ${DEFAULT-VALUE}).")
    int midwayFailures;
    @Option(names = "--via-vllm-connector", description = "Both engines through the vLLM connector (orbitkv_pd.vllm, vLLM's call order, KV"
            + " tensors in vLLM's layout registered by register_kv_caches; decode recomputes the prompt's last token as vLLM's does,"
            + " colocated too); every P/D push layer by layer from save_kv_layer, no prefix pairs.")
    boolean viaConnector;
    @Option(names = "--device", defaultValue = "0", description = "CUDA device (default: ${DEFAULT-VALUE}).")
    int device;
    @Option(names = "--out", defaultValue = "docs/bench/real-model.md", description = "Markdown result file (default: ${DEFAULT-VALUE}).")
    Path outFile;

    private LatencyStats rawHop;
    /** The prefix cache's pairs: per pair what each prompt computed and moved, and whether the answers were equal. */
    private final List<Map<String, Object>> prefixRows = new ArrayList<>();
    private LatencyStats rawHopSlow;

    /** One prompt, both ways; {@code layerwise}: its prefill reported its layers as they were computed (else whole). */
    record Pair(int length, boolean layerwise, LoadClient.Result pd, LoadClient.Result colocated, boolean equal, HandoffAnatomy anatomy) { }

    @Override
    public Integer call() throws Exception {
        if (prompts < 1 || warmup < 0 || maxTokens < 1 || lengths.stream().anyMatch(l -> l < 2) || cancels < 0 || expiries < 0 || midwayFailures < 0) {
            throw new IllegalArgumentException("--prompts >= 1, --warmup >= 0, --max-tokens >= 1, --lengths >= 2 each,"
                    + " --cancels/--expiries/--midway-failures >= 0");
        }
        int maxLen = lengths.stream().mapToInt(Integer::intValue).max().orElseThrow();
        System.out.println("contiguous device copies (the reference of the cuda push), device " + device + " ...");
        Map<Integer, ContiguousCopy.Result> contiguous = new LinkedHashMap<>();
        for (int len : lengths) {
            ContiguousCopy.Result c = ContiguousCopy.measure(device, kvBytes(len), 20);
            contiguous.put(len, c);
            System.out.printf(Locale.ROOT, "  %d tokens: %.1f MiB in %.3f ms on the GPU (%.0f GB/s), %.3f ms end to end (%.0f GB/s)%n", len,
                    c.bytes() / 1048576.0, c.gpuMs(), c.gpuGbps(), c.wallMs(), c.wallGbps());
        }
        Map<String, String> engine = new LinkedHashMap<>();
        // the name both engines serve and the requests ask for (the proxy answers 404 model_not_found to any other)
        String served = "orbitkv-real-" + (modelPath != null ? Path.of(modelPath).getFileName() : shape);
        engine.put("engine.model", served);
        engine.put("engine.model.shape", shape);
        if (modelPath != null) {
            engine.put("engine.model.path", modelPath);
        }
        engine.put("engine.model.device", Integer.toString(device));
        engine.put("engine.pool.blocks", Integer.toString(poolBlocks));
        engine.put("engine.max-prompt-tokens", Integer.toString(maxLen + 64));
        engine.put("engine.kv.timeout", "120s");
        // Short leases so that an expiry is seen within seconds; heartbeats keep every other request's lease.
        engine.put("engine.lease.duration", "6s");
        engine.put("engine.lease.heartbeat", "1s");
        engine.put("engine.fault.stall-prefill-prefix", "expire-");
        engine.put("engine.fault.no-heartbeat-prefix", "expire-");
        // layer by layer and whole in the same run: the prefill engine reports the layers of every request but these
        engine.put("engine.layerwise.skip-prefix", WHOLE);
        // both ways at every length, short prompts too (the engine's default reports those whole: the comparison is why)
        engine.put("engine.layerwise.min-tokens", "0");
        engine.put("engine.fault.fail-prefill-midway-prefix", MIDWAY);
        // the prefix cache for the pairs of prompts sharing a prefix only (docs/gpu.md, "The prefix cache"): the other prompts
        // are computed whole as before, and the colocated twin of a pair's second prompt looks up without adding, so both
        // engines answer it over the same cached prefix
        engine.put("engine.prefix-cache.enabled", Boolean.toString(!viaConnector));
        if (viaConnector) {
            engine.put("engine.vllm-connector", "true");
            prefixPrompts = 0;
        }
        engine.put("engine.prefix-cache.scope-prefix", PREFIX);
        engine.put("engine.prefix-cache.read-only-prefix", PREFIX_READ_ONLY);
        PipelineSpec spec = PipelineSpec.defaults().withEngines(1, 1).withPythonEngines(Set.of("prefill-0", "decode-0"))
                .withPythonModule("orbitkv_pd.real_engine").withNodeWorker(true)
                // the cancels' pushes are held once started (worker.fault.hold-push-prefix): a GPU push lasts ~1 ms, so a
                // cancel could never meet one otherwise (the committed run before this had all three end COMPLETED)
                // the GPU bundle leaves RocksDB's 73 MB jar out (gpu/prepare-real-model.sh): the decider keeps its state in memory
                .withExtra(Map.of("decider.store", "in-memory"), engine, Map.of("worker.transports", "cuda", "worker.fault.hold-push-prefix", HELD,
                        "worker.fault.hold-push", "20s"), Map.of());
        Path work = Files.createTempDirectory("orbitkv-bench-real-");
        List<Pair> pairs = new ArrayList<>();
        Map<String, Object> faults = new LinkedHashMap<>();
        Map<String, Object> audit;
        long[] pagesLeft;
        try (Pipeline pipeline = Pipeline.start(spec, work, s -> System.out.println("  " + s));
             LoadClient client = new LoadClient(pipeline.proxyUrl(), served, pipeline.deciderUrl())) {
            System.out.println("raw Kafka produce->consume hop on the pipeline's broker, idle pipeline (200/s, 2 s warm-up, 4 s measured) ...");
            rawHop = RawHop.measure(pipeline.bootstrapServers(), "bench.raw-hop-" + System.nanoTime() % 100_000, 200, Duration.ofSeconds(2),
                    Duration.ofSeconds(4), false);
            System.out.printf(Locale.ROOT, "  raw hop p50 %.3f ms  p99 %.3f ms%n", rawHop.p50ms(), rawHop.p99ms());
            // The handoff's hops come one request at a time, every few hundred ms, to threads that slept in between: the
            // same hop at that pace tells an idle machine's wake-ups from the pipeline's own cost.
            System.out.println("raw hop again at 5/s (the run's pace: 6 s measured) ...");
            rawHopSlow = RawHop.measure(pipeline.bootstrapServers(), "bench.raw-hop-slow-" + System.nanoTime() % 100_000, 5, Duration.ZERO,
                    Duration.ofSeconds(6), false);
            System.out.printf(Locale.ROOT, "  raw hop at 5/s p50 %.3f ms  p99 %.3f ms%n", rawHopSlow.p50ms(), rawHopSlow.p99ms());
            Random rnd = new Random(7);
            for (int len : lengths) {
                for (int i = 0; i < warmup; i++) {
                    run(client, len, prompt(rnd, len), -1 - i, viaConnector || i % 2 == 0);
                }
                System.out.printf("%d tokens: %d prompts, P/D (layer by layer and whole by turns) then colocated ...%n", len, prompts);
                for (int i = 0; i < prompts; i++) {
                    pairs.add(run(client, len, prompt(rnd, len), i, viaConnector || i % 2 == 0));
                }
            }
            List<LoadClient.Result[]> prefixRuns = prefixPairs(client, rnd);
            faults.putAll(faults(client, rnd, maxLen));
            pagesLeft = awaitPagesFree(pipeline);
            PipelineLog log = PipelineLog.read(pipeline.bootstrapServers());
            for (int i = 0; i < pairs.size(); i++) {
                Pair p = pairs.get(i);
                PipelineLog.Story s = log.stories.get(p.pd().requestId());
                pairs.set(i, new Pair(p.length(), p.layerwise(), p.pd(), p.colocated(), p.equal(), s == null ? null : s.anatomy()));
            }
            faults.put("outcomes", outcomesOf(log, faults));
            prefixRows(prefixRuns, log);
            audit = audit(pipeline);
        } finally {
            System.out.println("logs of this run: " + work.resolve("logs"));
        }
        long wrong = pairs.stream().filter(p -> !p.equal()).count()
                + prefixRows.stream().filter(r -> !Boolean.TRUE.equals(r.get("equal_a")) || !Boolean.TRUE.equals(r.get("equal_b"))).count();
        String text = tables(pairs, contiguous, faults, audit, pagesLeft) + prefixTable();
        System.out.println();
        System.out.println(text);
        write(text, pairs, contiguous, faults, audit, pagesLeft);
        boolean clean = Boolean.TRUE.equals(audit.get("clean")) && pagesLeft[0] == 0 && pagesLeft[1] == 0;
        return wrong == 0 && clean ? 0 : 1;
    }

    /** Bytes of a prompt's KV in the 8B shape's pages (whole 16-token blocks, every layer, K and V): for the reference copy. */
    private long kvBytes(int tokens) {
        int[] s = switch (shape) {
            case "1b" -> new int[] {16, 8, 64};
            case "tiny" -> new int[] {4, 2, 64};
            default -> new int[] {32, 8, 128};
        };
        long blocks = (tokens + 15) / 16;
        return blocks * 16L * s[1] * s[2] * 2 * 2 * s[0];
    }

    /** A prompt of exactly {@code len} tokens for the random-weight engine (one token per word). */
    private static String prompt(Random rnd, int len) {
        StringBuilder b = new StringBuilder(len * 6);
        for (int i = 0; i < len; i++) {
            b.append(i == 0 ? "" : " ").append('w').append(rnd.nextInt(50_000));
        }
        return b.toString();
    }

    private Pair run(LoadClient client, int len, String prompt, int index, boolean layerwise) {
        LoadClient.Request pd = new LoadClient.Request(index, false, prompt, maxTokens, true, false, LoadClient.Cancel.NONE, 0);
        LoadClient.Result a = client.sendAs((layerwise ? "lw-" : WHOLE) + len + "-" + index + "-" + System.nanoTime() % 1_000_000, pd);
        LoadClient.Result b = client.send(pd.colocatedTwin());
        boolean equal = a.ok() && b.ok() && a.text().equals(b.text());
        if (!equal && index >= 0) {
            System.out.printf("  MISMATCH at %d tokens (%s): P/D %d '%s' vs colocated %d '%s'%n", len, a.requestId(), a.status(), clip(a.text() + a.error()),
                    b.status(), clip(b.text() + b.error()));
        }
        return new Pair(len, layerwise, a, b, equal, null);
    }

    private static String clip(String s) {
        return s.length() > 160 ? s.substring(0, 160) + "…" : s;
    }

    /** Request ids whose pushes the worker holds once started: the cancels'. */
    private static final String HELD = "held-";
    /** Request ids that use the engines' prefix cache, and those that look up without adding (engine.prefix-cache.*). */
    private static final String PREFIX = "pfx";
    private static final String PREFIX_READ_ONLY = "pfxro-";

    /**
     * The prefix cache: per pair, prompt A P/D (cached by both engines once computed and received) and colocated (no
     * cache: whole, as every other prompt), then prompt B — A's leading three quarters (whole blocks) and new words —
     * colocated looking up without adding, then P/D. B's prefill computes only its last quarter over A's pages; its decode
     * engine holds A's blocks and announces them cached, so only the rest moves; both answers of B come from the same
     * cached prefix and must be equal.
     */
    private List<LoadClient.Result[]> prefixPairs(LoadClient client, Random rnd) {
        List<LoadClient.Result[]> out = new ArrayList<>();
        if (prefixPrompts > 0) {
            System.out.printf("prefix cache: %d pairs of %d-token prompts sharing their first three quarters ...%n", prefixPrompts, prefixTokens);
        }
        int shared = 3 * prefixTokens / 4 / 16 * 16;
        for (int i = 0; i < prefixPrompts; i++) {
            String a = prompt(rnd, prefixTokens);
            String b = String.join(" ", java.util.Arrays.copyOf(a.split(" "), shared)) + " " + prompt(rnd, prefixTokens - shared);
            String tag = i + "-" + System.nanoTime() % 1_000_000;
            LoadClient.Request ra = new LoadClient.Request(4000 + i, false, a, maxTokens, true, false, LoadClient.Cancel.NONE, 0);
            LoadClient.Request rb = new LoadClient.Request(5000 + i, false, b, maxTokens, true, false, LoadClient.Cancel.NONE, 0);
            LoadClient.Result pdA = client.sendAs(PREFIX + "-a-" + tag, ra);
            LoadClient.Result colA = client.send(ra.colocatedTwin());
            LoadClient.Result colB = client.sendAs(PREFIX_READ_ONLY + "b-" + tag, rb.colocatedTwin());
            LoadClient.Result pdB = client.sendAs(PREFIX + "-b-" + tag, rb);
            out.add(new LoadClient.Result[] {pdA, colA, pdB, colB});
        }
        return out;
    }

    private void prefixRows(List<LoadClient.Result[]> runs, PipelineLog log) {
        for (LoadClient.Result[] r : runs) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("request_a", r[0].requestId());
            m.put("request_b", r[2].requestId());
            m.put("equal_a", r[0].ok() && r[1].ok() && r[0].text().equals(r[1].text()));
            m.put("equal_b", r[2].ok() && r[3].ok() && r[2].text().equals(r[3].text()));
            for (int k : new int[] {0, 2}) {
                String side = k == 0 ? "a" : "b";
                PipelineLog.Story st = log.stories.get(r[k].requestId());
                HandoffAnatomy an = st == null ? null : st.anatomy();
                m.put("prefill_ms_" + side, an == null ? null : an.micros(Hop.PREFILL_COMPUTE).orElse(-1) / 1000.0);
                m.put("moved_bytes_" + side, an == null ? null : an.transferBytes());
                m.put("ttft_pd_ms_" + side, r[k].ttftNanos() / 1e6);
                m.put("ttft_colocated_ms_" + side, r[k + 1].ttftNanos() / 1e6);
            }
            if (!Boolean.TRUE.equals(m.get("equal_b"))) {
                System.out.printf("  MISMATCH over the cached prefix (%s): P/D %d '%s' vs colocated %d '%s'%n", r[2].requestId(), r[2].status(),
                        clip(r[2].text() + r[2].error()), r[3].status(), clip(r[3].text() + r[3].error()));
            }
            prefixRows.add(m);
        }
    }

    private String prefixTable() {
        if (prefixRows.isEmpty()) {
            return "";
        }
        StringBuilder b = new StringBuilder(String.format(Locale.ROOT, "%nPrefix cache (pairs of %d-token prompts, the second sharing the first's"
                + " leading %d tokens; A: computed whole, B: over A's cached pages; moved: the KV bytes its push carried):%n%n"
                + "| pair | A equal | B equal | prefill A ms | prefill B ms | moved A MiB | moved B MiB | TTFT P/D A / B ms | TTFT colocated A / B ms |%n"
                + "| ---: | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |%n", prefixTokens, 3 * prefixTokens / 4 / 16 * 16));
        int i = 0;
        for (Map<String, Object> r : prefixRows) {
            b.append(String.format(Locale.ROOT, "| %d | %s | %s | %s | %s | %s | %s | %.1f / %.1f | %.1f / %.1f |%n", i++, r.get("equal_a"), r.get("equal_b"),
                    num(r.get("prefill_ms_a")), num(r.get("prefill_ms_b")), mib(r.get("moved_bytes_a")), mib(r.get("moved_bytes_b")),
                    (double) r.get("ttft_pd_ms_a"), (double) r.get("ttft_pd_ms_b"), (double) r.get("ttft_colocated_ms_a"),
                    (double) r.get("ttft_colocated_ms_b")));
        }
        return b.toString();
    }

    private static String num(Object v) {
        return v instanceof Double d ? String.format(Locale.ROOT, "%.1f", d) : "–";
    }

    private static String mib(Object v) {
        return v instanceof Long l ? String.format(Locale.ROOT, "%.1f", l / 1048576.0) : "–";
    }

    /** Request ids whose prefill is reported whole (the prefill engine's engine.layerwise.skip-prefix). */
    private static final String WHOLE = "whole-";
    /** Request ids whose prefill fails half-way (engine.fault.fail-prefill-midway-prefix). */
    private static final String MIDWAY = "failmid-";

    /** Cancels mid-transfer (the longest prompts) and leases that expire (a prefill that never reports, a decode that stops renewing). */
    private Map<String, Object> faults(LoadClient client, Random rnd, int len) {
        Map<String, Object> out = new LinkedHashMap<>();
        List<String> cancelled = new ArrayList<>();
        for (int i = 0; i < cancels; i++) {
            LoadClient.Request r = new LoadClient.Request(1000 + i, false, prompt(rnd, len), maxTokens, true, false, LoadClient.Cancel.WHILE_TRANSFERRING, 0);
            LoadClient.Result res = client.sendAs(HELD + System.nanoTime() % 1_000_000 + "-" + i, r);
            cancelled.add(res.requestId());
            System.out.printf("  cancel while transferring: %s walked away=%s status=%d%n", res.requestId(), res.walkedAway(), res.status());
        }
        List<String> expired = new ArrayList<>();
        List<Integer> statuses = new ArrayList<>();
        for (int i = 0; i < expiries; i++) {
            String id = "expire-" + System.nanoTime() % 1_000_000 + "-" + i;
            LoadClient.Request r = new LoadClient.Request(2000 + i, false, prompt(rnd, 128), maxTokens, false, false, LoadClient.Cancel.NONE, 0);
            LoadClient.Result res = client.sendAs(id, r);
            expired.add(id);
            statuses.add(res.status());
            System.out.printf("  lease left to expire: %s -> %d %s%n", id, res.status(), clip(res.error() == null ? res.text() : res.error()));
        }
        // a prefill that fails after half its layers were reported: the push layer by layer stops, nothing lands, the pages
        // come back, and the request fails (the proxy's default failure policy)
        List<String> midway = new ArrayList<>();
        List<Integer> midwayStatuses = new ArrayList<>();
        for (int i = 0; i < midwayFailures; i++) {
            String id = MIDWAY + System.nanoTime() % 1_000_000 + "-" + i;
            LoadClient.Request r = new LoadClient.Request(3000 + i, false, prompt(rnd, Math.min(len, 8192)), maxTokens, false, false, LoadClient.Cancel.NONE, 0);
            LoadClient.Result res = client.sendAs(id, r);
            midway.add(id);
            midwayStatuses.add(res.status());
            System.out.printf("  prefill failing half-way: %s -> %d %s%n", id, res.status(), clip(res.error() == null ? res.text() : res.error()));
        }
        out.put("cancelled_ids", cancelled);
        out.put("expired_ids", expired);
        out.put("expired_statuses", statuses);
        out.put("failed_midway_ids", midway);
        out.put("failed_midway_statuses", midwayStatuses);
        return out;
    }

    @SuppressWarnings("unchecked")
    private static Map<String, Object> outcomesOf(PipelineLog log, Map<String, Object> faults) {
        Map<String, Object> out = new LinkedHashMap<>();
        for (String key : List.of("cancelled_ids", "expired_ids", "failed_midway_ids")) {
            Map<String, String> m = new LinkedHashMap<>();
            for (String id : (List<String>) faults.get(key)) {
                PipelineLog.Story s = log.stories.get(id);
                m.put(id, s == null || s.outcomes.isEmpty() ? "none" : s.outcomes.stream().map(RequestOutcome::getKind).map(OutcomeKind::name)
                        .reduce((x, y) -> x + "," + y).orElse("none"));
            }
            out.put(key.replace("_ids", ""), m);
        }
        // what happened to each failed prefill's push: its request's facts in log order, then the decider's decisions (a push
        // layer by layer reports TransferStarted at its first piece; the failure and the abort follow)
        Map<String, Object> steps = new LinkedHashMap<>();
        for (String id : (List<String>) faults.get("failed_midway_ids")) {
            PipelineLog.Story s = log.stories.get(id);
            steps.put(id, s == null ? List.of() : java.util.stream.Stream.concat(s.facts.stream(), s.decisions.stream())
                    .map(x -> x.getClass().getSimpleName()).toList());
        }
        out.put("failed_midway_records", steps);
        Map<String, Integer> all = new LinkedHashMap<>();
        log.outcomes.forEach((k, v) -> all.put(k.name(), v));
        out.put("all", all);
        return out;
    }

    /** Waits until both engines hold no page (every request ended and released), up to 60 s; the pages still held. */
    private static long[] awaitPagesFree(Pipeline pipeline) throws Exception {
        HttpClient http = HttpClient.newHttpClient();
        long[] used = new long[2];
        long deadline = System.nanoTime() + Duration.ofSeconds(60).toNanos();
        do {
            for (int i = 0; i < 2; i++) {
                Pipeline.Engine e = pipeline.engines().get(i);
                String body = http.send(HttpRequest.newBuilder(URI.create(e.url() + "/stats")).build(), HttpResponse.BodyHandlers.ofString()).body();
                used[i] = JSON.readTree(body).path("blocks_used").asLong(-1);
            }
            if (used[0] == 0 && used[1] == 0) {
                break;
            }
            Thread.sleep(500); // polling the engines' page counts; the releases come from the decider's timers
        } while (System.nanoTime() < deadline);
        System.out.printf("pages still held: prefill %d, decode %d%n", used[0], used[1]);
        return used;
    }

    /** {@code orbitkv-pd audit --json} over the run's log, as a user would run it. */
    private static Map<String, Object> audit(Pipeline pipeline) throws Exception {
        Path out = pipeline.dir().resolve("logs").resolve("audit.json");
        Path config = pipeline.dir().resolve("config").resolve("decider.properties");
        Process p = Pipeline.startComponent("audit", "audit", List.of(config), out, pipeline.dir().resolve("config").resolve("classpath.args"),
                "-Xmx512m", "--json");
        int rc = p.waitFor();
        String text = Files.readString(out, StandardCharsets.UTF_8);
        int brace = text.indexOf('{');
        Map<String, Object> r = new LinkedHashMap<>();
        r.put("exit_code", rc);
        r.put("clean", rc == 0);
        if (brace >= 0) {
            com.fasterxml.jackson.databind.JsonNode j = JSON.readTree(text.substring(brace));
            r.put("clean", j.path("clean").asBoolean(false) && rc == 0);
            r.put("violations_total", j.path("violations_total").asLong(-1));
            r.put("records", JSON.convertValue(j.path("records"), Map.class));
        }
        System.out.println("audit: exit " + rc + (rc == 0 ? " (clean)" : " (violations: see " + out + ")"));
        return r;
    }

    // ---- output -------------------------------------------------------------------------------------------------------

    private static double[] sorted(List<Double> v) {
        return v.stream().mapToDouble(Double::doubleValue).filter(x -> !Double.isNaN(x)).sorted().toArray();
    }

    private static double p(double[] s, double q) {
        return Samples.pct(s, q);
    }

    private String tables(List<Pair> pairs, Map<Integer, ContiguousCopy.Result> contiguous, Map<String, Object> faults, Map<String, Object> audit,
                          long[] pagesLeft) {
        StringBuilder b = new StringBuilder("| prompt tokens | push | prompts | equal answers | TTFT P/D p50 / p99 ms | colocated p50 / p99 ms |"
                + " exposed handoff (P/D − colocated) p50 / p99 ms | exposed / colocated TTFT p50 | prefill compute p50 ms | push p50 / p99 ms |"
                + " push GB/s p50 | contiguous copy end to end ms (GB/s) | push / contiguous | handoff path after the prefill p50 ms |\n"
                + "| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        for (int len : lengths) {
            for (boolean lw : new boolean[] {true, false}) {
                List<Pair> ps = pairs.stream().filter(x -> x.length() == len && x.layerwise() == lw).toList();
                if (ps.isEmpty()) {
                    continue;
                }
                double[] pd = sorted(ps.stream().filter(x -> x.pd().ok()).map(x -> x.pd().ttftNanos() / 1e6).toList());
                double[] col = sorted(ps.stream().filter(x -> x.colocated().ok()).map(x -> x.colocated().ttftNanos() / 1e6).toList());
                double[] exposed = sorted(ps.stream().filter(x -> x.pd().ok() && x.colocated().ok())
                        .map(x -> (x.pd().ttftNanos() - x.colocated().ttftNanos()) / 1e6).toList());
                double[] compute = hop(ps, Hop.PREFILL_COMPUTE);
                // whole: order taken → every byte in place; layer by layer the push spans the prefill, so its part after the
                // prefill's end (admission, run table, copy) is what is shown
                double[] push = sorted(ps.stream().filter(x -> x.anatomy() != null && x.anatomy().transferMicros() > 0)
                        .map(x -> (lw ? afterPrefill(x.anatomy()) : x.anatomy().transferMicros()) / 1000.0).toList());
                double[] gbps = lw ? new double[0] : sorted(ps.stream().filter(x -> x.anatomy() != null && x.anatomy().transferMicros() > 0)
                        .map(x -> x.anatomy().transferBytes() / (x.anatomy().transferMicros() * 1e3)).toList());
                double[] path = sorted(ps.stream().filter(x -> x.anatomy() != null).map(x -> pathAfterPrefill(x.anatomy()) / 1000.0).toList());
                ContiguousCopy.Result c = contiguous.get(len);
                long equal = ps.stream().filter(Pair::equal).count();
                b.append(String.format(Locale.ROOT, "| %d | %s | %d | %d | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.2f %% | %.1f | %.2f / %.2f | %s | %.3f (%.0f) | %s | %.2f |%n",
                        len, viaConnector ? "through the vLLM connector (after the prefill)" : lw ? "layer by layer (after the prefill)" : "whole", ps.size(), equal, p(pd, 50), p(pd, 99), p(col, 50), p(col, 99),
                        p(exposed, 50), p(exposed, 99), 100 * p(exposed, 50) / p(col, 50), p(compute, 50), p(push, 50), p(push, 99),
                        lw ? "–" : String.format(Locale.ROOT, "%.0f", p(gbps, 50)), c.wallMs(), c.wallGbps(),
                        lw ? "–" : String.format(Locale.ROOT, "%.0f %%", 100 * c.wallMs() / p(push, 50)), p(path, 50)));
            }
        }
        b.append("\nAnatomy of the P/D handoffs (p50 ms per hop, from the log's timing marks; lw: layer by layer, whole: pushed after the prefill;"
                + " layer by layer the transfer hops are the push's last part, after the prefill's end):\n\n| hop |");
        for (int len : lengths) {
            b.append(' ').append(len).append(" lw | ").append(len).append(" whole |");
        }
        b.append("\n| --- |").append(" ---: |".repeat(2 * lengths.size())).append('\n');
        for (Hop h : HOPS) {
            b.append("| ").append(h.key()).append(" (").append(h.label()).append(") |");
            for (int len : lengths) {
                for (boolean lw : new boolean[] {true, false}) {
                    double[] v = hop(pairs.stream().filter(x -> x.length() == len && x.layerwise() == lw).toList(), h);
                    b.append(v.length == 0 ? " – |" : String.format(Locale.ROOT, " %.2f |", p(v, 50)));
                }
            }
            b.append('\n');
        }
        b.append("\nPath each P/D handoff took (docs/architecture.md, \"Anatomy of a handoff\"): started by the prefill engine's own fact"
                + " (order issued ahead: prefill_to_worker) / KV handed to the decode engine on landing (landed_to_engine), of the handoffs:");
        for (int len : lengths) {
            List<HandoffAnatomy> as = pairs.stream().filter(x -> x.length() == len && x.anatomy() != null).map(Pair::anatomy).toList();
            b.append(String.format(Locale.ROOT, " %d tokens %d / %d of %d;", len, as.stream().filter(a -> a.path().contains(Hop.PREFILL_TO_WORKER)).count(),
                    as.stream().filter(a -> a.path().contains(Hop.LANDED_TO_ENGINE)).count(), as.size()));
        }
        b.append('\n');
        b.append(String.format(Locale.ROOT, "%nReference, same run: one raw Kafka produce → consume hop on the pipeline's broker (idle pipeline, 200/s):"
                + " p50 %.3f ms, p99 %.3f ms; at 5/s (the run's pace) p50 %.3f ms, p99 %.3f ms. Kafka hops on the classic path:"
                + " fact_to_decider, order_to_worker, report_to_decider, kv_ready_to_engine; the short path has none.%n", rawHop.p50ms(), rawHop.p99ms(),
                rawHopSlow.p50ms(), rawHopSlow.p99ms()));
        b.append(String.format(Locale.ROOT, "%nFaults: %s. Pages still held at the end: prefill engine %d, decode engine %d. Audit of the run's log: %s.%n",
                faults.get("outcomes"), pagesLeft[0], pagesLeft[1], audit));
        return b.toString();
    }

    private static double[] hop(List<Pair> ps, Hop h) {
        return sorted(ps.stream().filter(x -> x.anatomy() != null).map(x -> x.anatomy().micros(h)).filter(java.util.OptionalLong::isPresent)
                .map(o -> o.getAsLong() / 1000.0).toList());
    }

    /** A push layer by layer: its part after the prefill's end (admission, run table, copy of the last layers), µs. */
    private static double afterPrefill(HandoffAnatomy a) {
        return sum(a, List.of(Hop.TRANSFER_ADMISSION, Hop.TRANSFER_WIRE, Hop.TRANSFER_APPLY));
    }

    /**
     * The handoff's own path once the prefill computed (µs): the hops of the path this handoff took
     * ({@link HandoffAnatomy#path()}, prefill's end → first token at the proxy). They follow each other, so layer by layer
     * prefill_to_worker (from the prefill's end back to the first layer report the worker took) and transfer_setup (from
     * there to the prefill's completion seen) cancel out to the worker's wait after the prefill. The TTFT difference
     * carries the prefill's run-to-run jitter; this does not.
     */
    private static double pathAfterPrefill(HandoffAnatomy a) {
        return sum(a, a.path());
    }

    private static double sum(HandoffAnatomy a, List<Hop> hops) {
        double t = 0;
        for (Hop h : hops) {
            t += a.micros(h).orElse(0);
        }
        return t;
    }

    /** The GPU and its driver, as the CUDA driver names them (the results say which card gave them). */
    private String gpuName() {
        try {
            io.orbitkv.pd.gpu.cuda.CudaDriver d = io.orbitkv.pd.gpu.cuda.CudaDriver.load().orElseThrow();
            try (io.orbitkv.pd.gpu.cuda.CudaDevice dev = io.orbitkv.pd.gpu.cuda.CudaDevice.open(d, device)) {
                return dev.name() + ", driver " + kernelModuleVersion() + "CUDA " + d.driverVersion() / 1000 + "." + d.driverVersion() % 1000 / 10;
            }
        } catch (RuntimeException e) {
            return "GPU not named (" + e.getMessage() + ")";
        }
    }

    /**
     * The NVIDIA driver's release ("580.159.04 ") from its kernel module, which the CUDA driver API does not give (it says
     * only which CUDA version the driver supports); empty where the file is not there.
     */
    private static String kernelModuleVersion() {
        try {
            java.util.regex.Matcher m = java.util.regex.Pattern.compile("Kernel Module\\s+(?:for \\S+\\s+)?([0-9][0-9.]+)")
                    .matcher(Files.readString(Path.of("/proc/driver/nvidia/version")));
            return m.find() ? m.group(1) + ", " : "";
        } catch (java.io.IOException | RuntimeException e) {
            return "";
        }
    }

    private void write(String text, List<Pair> pairs, Map<Integer, ContiguousCopy.Result> contiguous, Map<String, Object> faults,
                       Map<String, Object> audit, long[] pagesLeft) throws Exception {
        Path md = outFile;
        if (md.getParent() != null) {
            Files.createDirectories(md.getParent());
        }
        String gpu = gpuName();
        Files.writeString(md, "# Real-model run (`./orbitkv-pd bench real-model" + (viaConnector ? " --via-vllm-connector" : "") + "`)\n\n"
                + (viaConnector ? "Both engines through the vLLM connector (`orbitkv_pd.vllm`, vLLM's call order; KV tensors in vLLM's layout"
                + " registered by `register_kv_caches`; the prompt's last token recomputed by decode, colocated too). " : "")
                + LocalDate.now() + ", " + gpu + ": " + (modelPath != null ? modelPath
                : "random-weight Llama-" + shape + " shape (bf16)") + ", prefill and decode engine as two processes on one GPU, their workers in one"
                + " node process (`cuda` transport), one request at a time, " + maxTokens + " greedy tokens per answer, P/D then colocated for each"
                + " prompt. TTFT at the client (through the proxy, streamed); exposed handoff = P/D TTFT − colocated TTFT of the same prompt; the"
                + " push as the worker timed it (order taken → every byte in place); the contiguous copy is one `cuMemcpyDtoDAsync` of the same"
                + " bytes on the same GPU, end to end from the host, in the same run. How to run: docs/gpu.md (\"The real-model run\").\n\n" + text);
        Path json = BenchFiles.jsonFor(md);
        Map<String, Object> root = new LinkedHashMap<>();
        root.put("date", LocalDate.now().toString());
        root.put("gpu", gpu);
        root.put("model", modelPath != null ? modelPath : "random-llama-" + shape);
        root.put("max_tokens", maxTokens);
        root.put("via_vllm_connector", viaConnector);
        List<Object> rows = new ArrayList<>();
        for (Pair p : pairs) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("tokens", p.length());
            m.put("layerwise", p.layerwise());
            m.put("request_id", p.pd().requestId());
            m.put("equal", p.equal());
            m.put("ttft_pd_ms", p.pd().ttftNanos() / 1e6);
            m.put("ttft_colocated_ms", p.colocated().ttftNanos() / 1e6);
            if (p.anatomy() != null) {
                m.put("push_ms", p.anatomy().transferMicros() / 1000.0);
                m.put("push_bytes", p.anatomy().transferBytes());
                Map<String, Object> hops = new LinkedHashMap<>();
                for (HandoffAnatomy.Span s : p.anatomy().spans()) {
                    hops.put(s.hop().key(), s.micros() / 1000.0);
                }
                m.put("hops_ms", hops);
            }
            rows.add(m);
        }
        root.put("prompts", rows);
        Map<String, Object> refs = new LinkedHashMap<>();
        contiguous.forEach((len, c) -> refs.put(Integer.toString(len), Map.of("bytes", c.bytes(), "gpu_ms", c.gpuMs(), "wall_ms", c.wallMs())));
        root.put("contiguous_copy", refs);
        root.put("raw_kafka_hop", rawHop.json());
        root.put("raw_kafka_hop_5_per_s", rawHopSlow.json());
        root.put("faults", faults);
        root.put("prefix_cache", prefixRows);
        root.put("pages_left", List.of(pagesLeft[0], pagesLeft[1]));
        root.put("audit", audit);
        Files.writeString(json, JSON.writerWithDefaultPrettyPrinter().writeValueAsString(root) + "\n");
        System.out.println("results written to " + md + " and " + json);
    }
}
