package io.orbitkv.pd.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.harness.Samples;
import io.orbitkv.pd.harness.LoadClient;
import io.orbitkv.pd.harness.Pipeline;
import io.orbitkv.pd.harness.PipelineSpec;
import io.orbitkv.pd.harness.PipelineLog;
import io.orbitkv.pd.engine.client.DecisionListener;
import io.orbitkv.pd.engine.client.EngineClient;
import io.orbitkv.pd.engine.client.EngineClientConfig;
import io.orbitkv.pd.engine.client.EngineControl;
import io.orbitkv.pd.engine.client.KvSignal;
import io.orbitkv.pd.engine.client.api.ApiProtocol;
import io.orbitkv.pd.engine.client.api.EngineApiClient;
import io.orbitkv.pd.engine.sim.ModelPreset;
import io.orbitkv.pd.engine.sim.SimModel;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.logtools.trace.HandoffAnatomy;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.TopicAdmin;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.schemas.config.ConfigProps;
import io.orbitkv.pd.tracing.Hop;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.worker.WorkerApp;
import io.orbitkv.pd.worker.WorkerConfig;
import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import org.HdrHistogram.Histogram;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code orbitkv-pd bench engine-api}: what the worker's local engine API costs on the handoff's critical path.
 *
 * <p>Part A, one broker, one client at a time, each measured as an engine sees it: <b>fact</b> = the call until the
 * client learns the broker has the fact (acks=all), <b>decision</b> = the decider's {@code out} mark on a {@code KvReady}
 * until the engine read it. Three clients: the Java {@code EngineClient} talking Kafka itself (the baseline), the Java
 * {@code EngineApiClient} and the Python library, both through a worker's engine API (Unix socket). Beside them, the
 * raw Kafka produce→consume hop and the API's own round trip (ping → pong) measured in the same run.
 *
 * <p>Part B, two pipelines one after the other on the same workload: Java engines, then Python engines on both roles
 * (each on its worker's API), with TTFT, handoff and the two hops the API lies on.
 */
@Command(name = "engine-api", mixinStandardHelpOptions = true,
        header = "The engine API's cost on the handoff's critical path, against the Java engine client on Kafka.",
        description = {"The engine API's cost on the handoff's critical path: fact and decision latency of the Java EngineClient (Kafka),",
                "the Java EngineApiClient and the Python library (worker's engine API) on one broker, then TTFT and handoff of a pipeline",
                "with Java engines and one with Python engines, same workload. Writes docs/bench/engine-api.md and bench/results/engine-api.json."})
public final class EngineApiBenchCommand implements Callable<Integer> {

    private static final ObjectMapper JSON = new ObjectMapper();
    /** The bench pool: 4 layers × 64 pages of 4 KiB (the Python client registers the same layout). */
    private static final KvGeometry G = new KvGeometry(4, KvSplit.SEPARATE, 16, 2, 64, Dtype.BF16, 16 * 2 * 64 * 2, 64);

    @Option(names = "--count", defaultValue = "500", description = "Facts and decisions measured per client (default: ${DEFAULT-VALUE}).")
    int count;
    @Option(names = "--warmup", defaultValue = "300", description = "Facts and decisions per client before the measured ones (default: ${DEFAULT-VALUE}).")
    int warmup;
    @Option(names = "--interval-ms", defaultValue = "5", description = "Decisions this many ms apart, start to start, so each is measured alone (default: ${DEFAULT-VALUE}).")
    int intervalMs;
    @Option(names = "--requests", defaultValue = "80", description = "Part B: requests per level and pipeline (default: ${DEFAULT-VALUE}).")
    int requests;
    @Option(names = "--warmup-requests", defaultValue = "400", description = "Part B: requests each way (P/D, colocated) before the measured "
            + "ones, so both pipelines are measured warm (default: ${DEFAULT-VALUE}).")
    int warmupRequests;
    @Option(names = "--levels", defaultValue = "1,4", split = ",", description = "Part B: requests in flight (default: ${DEFAULT-VALUE}).")
    List<Integer> levels;
    @Option(names = "--preset", defaultValue = "tiny", description = "Part B: model preset (default: ${DEFAULT-VALUE}: little KV, so the control path shows).")
    String preset;
    @Option(names = "--skip-pipelines", description = "Part A only.")
    boolean skipPipelines;
    @Option(names = "--out", defaultValue = "docs/bench/engine-api.md", description = "Markdown result file (default: ${DEFAULT-VALUE}).")
    Path outFile;

    /** One client's numbers (µs histograms). */
    record ClientResult(String client, String path, LatencyStats fact, LatencyStats decision, LatencyStats ping) { }

    /** One pipeline level: latencies in ms, sorted. */
    record PipelineLevel(String engines, int concurrency, double[] ttft, double[] colocated, double[] handoff, Map<Hop, double[]> hops, int wrong) { }

    @Override
    public Integer call() throws Exception {
        if (count < 10 || warmup < 0 || intervalMs < 0 || requests < 1 || warmupRequests < 0 || levels.stream().anyMatch(c -> c < 1)) {
            throw new IllegalArgumentException("--count >= 10, --warmup >= 0, --interval-ms >= 0, --requests >= 1, --warmup-requests >= 0 and"
                    + " --levels >= 1 each");
        }
        Path work = Files.createTempDirectory("orbitkv-bench-api-");
        boolean ok = false;
        try {
            List<ClientResult> clients = new ArrayList<>();
            LatencyStats raw;
            System.out.println("starting an embedded KRaft broker (child JVM) ...");
            try (KraftCluster cluster = KraftCluster.builder().nodes(1).dataDir(work.resolve("kafka")).logsDir(work.resolve("logs"))
                    .jvmOptions(List.of("-Xmx768m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=5")).build().start()) {
                String bs = cluster.bootstrapServers();
                Topics topics = new Topics(new TopicsConfig("bench-api.", 3, (short) 1, Duration.ofHours(1)), EventSerdes.embedded());
                try (Admin admin = Admin.create(Map.of("bootstrap.servers", bs))) {
                    TopicAdmin.ensureTopics(admin, topics);
                }
                System.out.println("raw produce->consume hop at 200/s (3 s warm-up, 5 s measured) ...");
                raw = RawHop.measure(bs, "bench-api.raw-hop", 200, Duration.ofSeconds(3), Duration.ofSeconds(5), true);
                System.out.printf(Locale.ROOT, "  raw hop p50 %.3f ms  p99 %.3f ms%n", raw.p50ms(), raw.p99ms());
                try (KafkaProducer<String, byte[]> decider = new KafkaProducer<>(Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bs,
                        ProducerConfig.LINGER_MS_CONFIG, 0, ProducerConfig.ACKS_CONFIG, "all"), new StringSerializer(), new ByteArraySerializer())) {
                    clients.add(javaKafka(bs, topics, decider));
                    clients.add(javaApi(bs, topics, decider, work));
                    clients.add(python(bs, topics, decider, work));
                }
            }
            List<PipelineLevel> levelsOut = new ArrayList<>();
            if (!skipPipelines) {
                for (boolean py : new boolean[] {false, true}) {
                    levelsOut.addAll(pipeline(py, work.resolve(py ? "pipeline-python" : "pipeline-java")));
                }
            }
            String text = clientsTable(raw, clients) + (levelsOut.isEmpty() ? "" : "\n" + pipelineTable(levelsOut));
            System.out.println();
            System.out.println(text);
            write(text, raw, clients, levelsOut);
            ok = levelsOut.stream().allMatch(l -> l.wrong() == 0);
            return ok ? 0 : 1;
        } finally {
            if (ok) {
                KraftCluster.deleteRecursively(work);
            } else {
                System.err.println("bench engine-api: its files and logs are kept in " + work);
            }
        }
    }

    // ---- Part A -------------------------------------------------------------------------------------------------------

    private ClientResult javaKafka(String bs, Topics topics, KafkaProducer<String, byte[]> decider) throws Exception {
        System.out.println("Java EngineClient (Kafka clients in the engine) ...");
        ConfigProps p = ConfigProps.empty().with("bootstrap.servers", bs).with("engine.id", "kafka-0").with("engine.worker.enabled", "false")
                .with("topics.prefix", "bench-api.").with("topics.partitions", "3").with("topics.retention", "1h");
        EngineClient.Identity id = new EngineClient.Identity(EngineRole.BOTH, "bench", "http://127.0.0.1:1", G, 0, 1, List.of());
        try (EngineClient c = EngineClient.start(EngineClientConfig.from(p), id, new DecisionListener() { })) {
            return measureJava("java EngineClient", "engine → Kafka", c, topics, decider);
        }
    }

    private ClientResult javaApi(String bs, Topics topics, KafkaProducer<String, byte[]> decider, Path work) throws Exception {
        System.out.println("Java EngineApiClient (worker's engine API) ...");
        Path socket = work.resolve("java-api.sock");
        Path pool = poolFile("java");
        HostKvPool.ensureFile(G, pool);
        try (WorkerApp worker = worker(bs, "api-0", socket).start();
             EngineApiClient c = EngineApiClient.connect(socket, new EngineApiClient.Registration("api-0", 1, EngineRole.BOTH, "bench",
                     "http://127.0.0.1:1", G.toLayout(0, 1), new ApiProtocol.PoolSpec(ApiProtocol.PoolSpec.SHM, pool.toString(), 0, List.of())),
                     new DecisionListener() { }, Duration.ofSeconds(30))) {
            ClientResult r = measureJava("java EngineApiClient", "engine → worker API → Kafka", c, topics, decider);
            Histogram ping = LatencyStats.histogram();
            for (int i = 0; i < warmup + count; i++) {
                long t = System.nanoTime();
                c.ping().get(30, TimeUnit.SECONDS);
                if (i >= warmup) {
                    ping.recordValue((System.nanoTime() - t) / 1000);
                }
            }
            return new ClientResult(r.client(), r.path(), r.fact(), r.decision(), LatencyStats.of(ping));
        } finally {
            Files.deleteIfExists(pool);
        }
    }

    private ClientResult measureJava(String name, String path, EngineControl c, Topics topics, KafkaProducer<String, byte[]> decider)
            throws Exception {
        Histogram fact = LatencyStats.histogram();
        int[] blocks = java.util.stream.IntStream.range(0, 16).toArray();
        for (int i = 0; i < warmup + count; i++) {
            long t = System.nanoTime();
            c.prefillCompleted("fact-" + i, blocks, 250, 7, null, Marks.receivedAt(Marks.nowMicros())).get(30, TimeUnit.SECONDS);
            if (i >= warmup) {
                fact.recordValue((System.nanoTime() - t) / 1000);
            }
        }
        Histogram decision = LatencyStats.histogram();
        Runnable paced = pacer();
        for (int i = 0; i < warmup + count; i++) {
            paced.run();
            String rid = "dec-" + i;
            CompletableFuture<KvSignal> f = c.awaitKv(rid);
            decide(decider, topics, c.engineId(), rid);
            KvSignal.Ready r = (KvSignal.Ready) f.get(30, TimeUnit.SECONDS);
            if (i >= warmup) {
                decision.recordValue(Math.max(0, r.receivedMicros() - r.decidedMicros()));
            }
            c.forget(rid);
        }
        ClientResult r = new ClientResult(name, path, LatencyStats.of(fact), LatencyStats.of(decision), null);
        report(r);
        return r;
    }

    private ClientResult python(String bs, Topics topics, KafkaProducer<String, byte[]> decider, Path work) throws Exception {
        System.out.println("Python library (orbitkv_pd.client, worker's engine API) ...");
        Path socket = work.resolve("py-api.sock");
        Path pool = poolFile("py");
        HostKvPool.ensureFile(G, pool);
        Process py = null;
        try (WorkerApp worker = worker(bs, "py-0", socket).start()) {
            py = new ProcessBuilder("python3", "-m", "orbitkv_pd.bench_client", "--socket", socket.toString(), "--engine", "py-0", "--epoch", "1",
                    "--pool", pool.toString(), "--layers", "4", "--blocks", "64").directory(Pipeline.pythonDir().toFile())
                    .redirectError(ProcessBuilder.Redirect.INHERIT).start();
            BufferedReader in = new BufferedReader(new InputStreamReader(py.getInputStream(), StandardCharsets.UTF_8));
            BufferedWriter out = new BufferedWriter(new OutputStreamWriter(py.getOutputStream(), StandardCharsets.UTF_8));
            expect(in, "READY");
            command(out, "facts " + (warmup + count));
            expect(in, "FACTS_DONE");
            Runnable paced = pacer();
            for (int i = 0; i < warmup + count; i++) {
                paced.run();
                decide(decider, topics, "py-0", "pydec-" + i);
            }
            command(out, "decisions " + (warmup + count));
            expect(in, "DECISIONS_DONE");
            command(out, "result");
            JsonNode res = JSON.readTree(expect(in, "{"));
            ClientResult r = new ClientResult("python orbitkv_pd", "engine → worker API → Kafka", stats(res.get("fact_us")),
                    stats(res.get("decision_us")), stats(res.get("ping_us")));
            report(r);
            if (!py.waitFor(30, TimeUnit.SECONDS)) {
                throw new IllegalStateException("the Python bench client did not exit");
            }
            return r;
        } finally {
            if (py != null) {
                py.destroyForcibly();
            }
            Files.deleteIfExists(pool);
        }
    }

    private LatencyStats stats(JsonNode micros) {
        Histogram h = LatencyStats.histogram();
        for (int i = warmup; i < micros.size(); i++) {
            h.recordValue(Math.max(0, micros.get(i).asLong()));
        }
        return LatencyStats.of(h);
    }

    private static String expect(BufferedReader in, String prefix) throws Exception {
        for (String line; (line = in.readLine()) != null; ) {
            if (line.startsWith(prefix)) {
                return line;
            }
            System.out.println("  python: " + line);
        }
        throw new IllegalStateException("the Python bench client ended before it said " + prefix);
    }

    private static void command(BufferedWriter out, String line) throws Exception {
        out.write(line);
        out.newLine();
        out.flush();
    }

    private static WorkerApp worker(String bs, String engine, Path socket) {
        return new WorkerApp(WorkerConfig.from(ConfigProps.empty().with("bootstrap.servers", bs).with("worker.engine.id", engine)
                .with("worker.engine-api.path", socket.toString()).with("topics.prefix", "bench-api.").with("topics.partitions", "3")
                .with("topics.retention", "1h").with("auth.key", "bench-engine-api-key-0123456789")));
    }

    private static Path poolFile(String who) {
        return Path.of("/dev/shm", "orbitkv-bench-api-" + ProcessHandle.current().pid() + "-" + who + ".kv");
    }

    /** A {@code KvReady} for {@code engine}, written as the decider writes it: keyed by the engine, its {@code out} mark now. */
    private static void decide(KafkaProducer<String, byte[]> producer, Topics topics, String engine, String rid) {
        Decision d = Decision.newBuilder().setRequestId(rid).setDecisionId(rid + "/kv").setSeq(1).setStreamTimeMs(System.currentTimeMillis())
                .setPayload(KvReady.newBuilder().setDecodeEngineId(engine).setOrderId(rid + "/a1").setBytes(4096).build()).build();
        ProducerRecord<String, byte[]> r = new ProducerRecord<>(topics.engineCommands().name(), engine,
                topics.engineCommands().valueSerde().serializer().serialize(topics.engineCommands().name(), d));
        Marks.receivedAt(Marks.nowMicros()).writeOut(r.headers());
        producer.send(r);
    }

    /** Decisions {@code --interval-ms} apart, start to start, so each is measured alone (0: back to back). */
    private Runnable pacer() {
        if (intervalMs == 0) {
            return () -> { };
        }
        Pacer p = new Pacer(1000.0 / intervalMs);
        return p::awaitNext;
    }

    private static void report(ClientResult r) {
        System.out.printf(Locale.ROOT, "  fact p50 %.3f p99 %.3f ms | decision p50 %.3f p99 %.3f ms%s%n", r.fact().p50ms(), r.fact().p99ms(),
                r.decision().p50ms(), r.decision().p99ms(), r.ping() == null ? "" : String.format(Locale.ROOT, " | API ping p50 %.3f p99 %.3f ms",
                        r.ping().p50ms(), r.ping().p99ms()));
    }

    // ---- Part B -------------------------------------------------------------------------------------------------------

    private static final List<Hop> API_HOPS = List.of(Hop.PREFILL_REPORT, Hop.FACT_TO_DECIDER, Hop.KV_READY_TO_ENGINE, Hop.ENGINE_FIRST_TOKEN);

    private List<PipelineLevel> pipeline(boolean python, Path dir) throws Exception {
        String engines = python ? "python" : "java";
        System.out.println("pipeline with " + engines + " engines (" + preset + " preset) ...");
        ModelPreset p = ModelPreset.of(preset);
        PipelineSpec spec = PipelineSpec.defaults().withModel(p, 384, 0.05, 2.0);
        if (python) {
            spec = spec.withPythonEngines(Set.of("prefill-0", "decode-0"));
        }
        SimModel model = new SimModel(42);
        List<PipelineLevel> out = new ArrayList<>();
        Consumer<String> say = s -> System.out.println("  " + s);
        try (Pipeline pipeline = Pipeline.start(spec, dir, say); LoadClient client = new LoadClient(pipeline.proxyUrl(), "orbitkv-sim-" + p.key())) {
            // Cold JVMs (and a cold CPython) on two cores measure the JIT, not the path: warm both pipelines alike first.
            List<LoadClient.Request> warm = LoadClient.workload(7, warmupRequests, 20, 200, 16, true);
            client.run(warm, 4, () -> { });
            client.run(warm.stream().map(LoadClient.Request::colocatedTwin).toList(), 4, () -> { });
            int seed = 100;
            for (int c : levels) {
                List<LoadClient.Request> w = LoadClient.workload(seed++, requests, 20, 200, 16, true);
                List<LoadClient.Result> pd = client.run(w, c, () -> { });
                List<LoadClient.Result> col = client.run(w.stream().map(LoadClient.Request::colocatedTwin).toList(), c, () -> { });
                int wrong = 0;
                for (LoadClient.Result r : pd) {
                    wrong += r.ok() && r.text().equals(r.request().expected(model)) ? 0 : 1;
                }
                for (LoadClient.Result r : col) {
                    wrong += r.ok() && r.text().equals(r.request().expected(model)) ? 0 : 1;
                }
                PipelineLog log = PipelineLog.read(pipeline.bootstrapServers());
                Map<Hop, List<Double>> hops = new EnumMap<>(Hop.class);
                for (LoadClient.Result r : pd) {
                    PipelineLog.Story s = log.stories.get(r.requestId());
                    if (s == null) {
                        continue;
                    }
                    HandoffAnatomy a = s.anatomy();
                    for (Hop h : API_HOPS) {
                        a.micros(h).ifPresent(us -> hops.computeIfAbsent(h, k -> new ArrayList<>()).add(us / 1000.0));
                    }
                }
                Map<Hop, double[]> sortedHops = new EnumMap<>(Hop.class);
                hops.forEach((h, v) -> sortedHops.put(h, v.stream().mapToDouble(Double::doubleValue).sorted().toArray()));
                PipelineLevel l = new PipelineLevel(engines, c, ms(pd, true), ms(col, true), pd.stream().filter(LoadClient.Result::ok)
                        .mapToDouble(LoadClient.Result::handoffMs).filter(h -> !Double.isNaN(h)).sorted().toArray(), sortedHops, wrong);
                out.add(l);
                System.out.printf(Locale.ROOT, "  c=%d: TTFT P/D p50 %.1f p99 %.1f ms | colocated p50 %.1f ms | handoff p50 %.1f p99 %.1f ms | wrong %d%n",
                        c, Samples.pct(l.ttft(), 50), Samples.pct(l.ttft(), 99), Samples.pct(l.colocated(), 50),
                        Samples.pct(l.handoff(), 50), Samples.pct(l.handoff(), 99), wrong);
            }
        }
        return out;
    }

    private static double[] ms(List<LoadClient.Result> rs, boolean ttft) {
        return rs.stream().filter(LoadClient.Result::ok).mapToDouble(r -> (ttft ? r.ttftNanos() : r.totalNanos()) / 1e6).sorted().toArray();
    }

    // ---- output -------------------------------------------------------------------------------------------------------

    private String clientsTable(LatencyStats raw, List<ClientResult> clients) {
        StringBuilder b = new StringBuilder("| client | path | fact p50 ms | fact p99 ms | decision p50 ms | decision p99 ms | API ping p50 / p99 ms |\n"
                + "| --- | --- | ---: | ---: | ---: | ---: | ---: |\n");
        for (ClientResult r : clients) {
            b.append(String.format(Locale.ROOT, "| %s | %s | %.3f | %.3f | %.3f | %.3f | %s |%n", r.client(), r.path(), r.fact().p50ms(), r.fact().p99ms(),
                    r.decision().p50ms(), r.decision().p99ms(), r.ping() == null ? "–"
                            : String.format(Locale.ROOT, "%.3f / %.3f", r.ping().p50ms(), r.ping().p99ms())));
        }
        ClientResult base = clients.get(0);
        for (ClientResult r : clients.subList(1, clients.size())) {
            b.append(String.format(Locale.ROOT, "| %s − java EngineClient | | %+.3f | %+.3f | %+.3f | %+.3f | |%n", r.client(),
                    r.fact().p50ms() - base.fact().p50ms(), r.fact().p99ms() - base.fact().p99ms(), r.decision().p50ms() - base.decision().p50ms(),
                    r.decision().p99ms() - base.decision().p99ms()));
        }
        b.append(String.format(Locale.ROOT, "| raw Kafka produce → consume hop (same broker, same run) | | | | %.3f | %.3f | |%n", raw.p50ms(), raw.p99ms()));
        return b.toString();
    }

    private static String pipelineTable(List<PipelineLevel> levels) {
        StringBuilder b = new StringBuilder("| engines | in flight | TTFT P/D p50 / p99 ms | colocated p50 ms | handoff p50 / p99 ms |");
        for (Hop h : API_HOPS) {
            b.append(' ').append(h.label()).append(" p50 ms |");
        }
        b.append(" wrong answers |\n| --- | ---: | ---: | ---: | ---: |").append(" ---: |".repeat(API_HOPS.size())).append(" ---: |\n");
        for (PipelineLevel l : levels) {
            b.append(String.format(Locale.ROOT, "| %s | %d | %.1f / %.1f | %.1f | %.1f / %.1f |", l.engines(), l.concurrency(), Samples.pct(l.ttft(), 50),
                    Samples.pct(l.ttft(), 99), Samples.pct(l.colocated(), 50), Samples.pct(l.handoff(), 50),
                    Samples.pct(l.handoff(), 99)));
            for (Hop h : API_HOPS) {
                double[] v = l.hops().get(h);
                b.append(v == null ? " – |" : String.format(Locale.ROOT, " %.2f |", Samples.pct(v, 50)));
            }
            b.append(' ').append(l.wrong()).append(" |\n");
        }
        return b.toString();
    }

    private void write(String tables, LatencyStats raw, List<ClientResult> clients, List<PipelineLevel> levelsOut) throws Exception {
        Path md = outFile;
        if (md.getParent() != null) {
            Files.createDirectories(md.getParent());
        }
        Files.writeString(md, "# Engine API benchmark (`./orbitkv-pd bench engine-api`)\n\n" + LocalDate.now() + ", " + count + " facts and "
                + count + " decisions measured per client after " + warmup + " of each discarded, decisions " + intervalMs + " ms apart; one"
                + " embedded broker on this machine (" + Runtime.getRuntime().availableProcessors() + " cores). Fact: the engine's call until"
                + " it learns the broker has the fact (acks=all). Decision: the decider's `out` mark on a `KvReady` written to"
                + " `engine-commands` until the engine read it (wall clock, one host). The raw hop is a plain producer → consumer on the same"
                + " broker; the API ping is one frame to the worker and back.\n\n" + tables + "\nPart B runs the demo's workload (" + preset
                + " preset, " + requests + " requests per level, streamed, 16 tokens) through a whole pipeline twice: Java engines, then"
                + " the Python simulated engine (`python -m orbitkv_pd.sim_engine`) for both prefill and decode, each on its worker's"
                + " engine API. Hops from the log's timing marks (docs/topics.md).\n");
        Path json = BenchFiles.jsonFor(md);
        Map<String, Object> root = new LinkedHashMap<>();
        root.put("date", LocalDate.now().toString());
        root.put("count", count);
        root.put("warmup", warmup);
        root.put("interval_ms", intervalMs);
        root.put("raw_hop", raw.json());
        List<Object> cs = new ArrayList<>();
        for (ClientResult r : clients) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("client", r.client());
            m.put("path", r.path());
            m.put("fact", r.fact().json());
            m.put("decision", r.decision().json());
            if (r.ping() != null) {
                m.put("ping", r.ping().json());
            }
            cs.add(m);
        }
        root.put("clients", cs);
        List<Object> ps = new ArrayList<>();
        for (PipelineLevel l : levelsOut) {
            Map<String, Object> m = new LinkedHashMap<>();
            m.put("engines", l.engines());
            m.put("concurrency", l.concurrency());
            m.put("ttft_p50_ms", Samples.pct(l.ttft(), 50));
            m.put("ttft_p99_ms", Samples.pct(l.ttft(), 99));
            m.put("colocated_p50_ms", Samples.pct(l.colocated(), 50));
            m.put("handoff_p50_ms", Samples.pct(l.handoff(), 50));
            m.put("handoff_p99_ms", Samples.pct(l.handoff(), 99));
            Map<String, Object> hops = new LinkedHashMap<>();
            l.hops().forEach((h, v) -> hops.put(h.key(), Samples.pct(v, 50)));
            m.put("hops_p50_ms", hops);
            m.put("wrong", l.wrong());
            ps.add(m);
        }
        root.put("pipelines", ps);
        Files.writeString(json, JSON.writerWithDefaultPrettyPrinter().writeValueAsString(root) + "\n");
        System.out.println("results written to " + md + " and " + json);
    }
}
