package io.orbitkv.pd.harness;

import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.broker.ChildClasspath;
import io.orbitkv.pd.broker.LogTail;
import io.orbitkv.pd.engine.sim.ModelPreset;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.runtime.ParentWatch;
import java.io.IOException;
import java.io.Writer;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;

/**
 * The whole P/D pipeline on one machine, every component its own process started with the same
 * {@code orbitkv-pd <component> --config FILE} a multi-machine deployment uses: an embedded KRaft broker, the
 * decider, prefill and decode engines each with its transfer worker (tcp, sharing the engine's pool through a
 * {@code /dev/shm} file), and the proxy. Used by {@code orbitkv-pd demo}, {@code orbitkv-pd bench e2e} and the
 * end-to-end tests. Each child's config and log lie under {@link #dir()}; {@link #close()} (also run by a shutdown
 * hook, so Ctrl-C works) stops every child, and children exit by themselves if this JVM dies.
 */
public final class Pipeline implements AutoCloseable {

    /** The Python simulated engine (the default Python engine module). */
    public static final String SIM_MODULE = "orbitkv_pd.sim_engine";

    /** A started child process. */
    public record Child(String name, Process process, Path log, Path config) {
        public boolean alive() {
            return process.isAlive();
        }
    }

    /** Starts a child's process (the first time, and again on {@link #restart}). */
    private interface Starter {
        Process start() throws IOException;
    }

    /** An engine of the pipeline: its id, role, HTTP URL and pool file. */
    public record Engine(String id, String role, String url, Path poolFile) { }

    private final PipelineSpec spec;
    private final Path dir;
    private final Consumer<String> say;
    private final List<Child> children = new ArrayList<>();
    private final List<Engine> engines = new ArrayList<>();
    private final List<Path> poolFiles = new ArrayList<>();
    private final Map<String, Map<String, String>> nodeWorkers = new LinkedHashMap<>();
    /** How to start each child again from its config ({@link #restart}). */
    private final Map<String, Starter> starters = new LinkedHashMap<>();
    private final Map<String, String> readyUrls = new java.util.concurrent.ConcurrentHashMap<>();
    private final HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(Duration.ofSeconds(2)).build();
    private final Thread hook = new Thread(this::close, "pipeline-shutdown");
    private KraftCluster kafka;
    private String bootstrap;
    private final List<String> proxyUrls = new ArrayList<>();
    private final List<String> deciderUrls = new ArrayList<>();
    private FaultRelay relay;
    private String dashboardUrl;
    /** The hosts rig ({@link PipelineSpec#withNetns}), or null: everything on loopback. */
    private NetnsHosts rig;
    private volatile boolean closed;

    private final String externalBootstrap;

    private Pipeline(PipelineSpec spec, Path dir, Consumer<String> say, String externalBootstrap) {
        this.spec = spec;
        this.dir = dir;
        this.say = say;
        this.externalBootstrap = externalBootstrap;
    }

    /** Starts everything, an embedded broker included, and returns once the proxy routes to every engine. */
    public static Pipeline start(PipelineSpec spec, Path dir, Consumer<String> say) throws Exception {
        return start(spec, dir, say, null);
    }

    /** As {@link #start(PipelineSpec, Path, Consumer)}, on an existing Kafka cluster when {@code bootstrap} is not null. */
    public static Pipeline start(PipelineSpec spec, Path dir, Consumer<String> say, String bootstrap) throws Exception {
        Pipeline p = new Pipeline(spec, dir, say, bootstrap);
        Runtime.getRuntime().addShutdownHook(p.hook);
        try {
            p.open();
            return p;
        } catch (Exception | Error e) {
            p.close();
            throw e;
        }
    }

    private void open() throws Exception {
        Files.createDirectories(dir.resolve("logs"));
        Files.createDirectories(dir.resolve("config"));
        long t0 = System.nanoTime();
        String bs = externalBootstrap;
        if (spec.netns()) {
            openHosts();
        }
        if (bs == null) {
            say.accept("starting the embedded KRaft broker (child JVM) ...");
            // Failover in seconds (docs/decider.md, "Failover"): group.min.session.timeout.ms lets deciders set a 2 s session;
            // the transaction coordinator looks for timed-out transactions every 500 ms instead of 10 s (a dead decider's
            // open transaction blocks its partitions' next owner until it is aborted).
            KraftCluster.Builder cluster = KraftCluster.builder();
            if (rig != null) {
                for (int n = 1; n <= spec.brokers(); n++) {
                    NetnsHosts.Host h = rig.host("broker-" + n);
                    cluster.host(n, new io.orbitkv.pd.broker.NodeHost(h.address(), h.address(), h.launcher()));
                }
            }
            kafka = cluster.nodes(spec.brokers()).dataDir(dir.resolve("kafka")).logsDir(dir.resolve("logs"))
                    .brokerProperty("group.min.session.timeout.ms", "1000")
                    .brokerProperty("transaction.abort.timed.out.transaction.cleanup.interval.ms", "500")
                    // Several nodes: the controller fences a dead broker (and moves its partitions' leadership) after 3 s
                    // without a heartbeat instead of 9 s.
                    .brokerProperty("broker.session.timeout.ms", "3000").brokerProperty("broker.heartbeat.interval.ms", "500")
                    .jvmOptions(List.of("-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=5")).build().start();
            kafka.closedByOwner(); // this pipeline's hook closes it, last
            bs = kafka.bootstrapServers();
            say.accept(String.format("broker ready at %s (%.1f s)", bs, (System.nanoTime() - t0) / 1e9));
        }
        bootstrap = bs;
        brokerReadyNanos = System.nanoTime();
        // One HMAC key for the decider and the workers of this run (no development-key warnings, no shared default).
        byte[] key = new byte[32];
        new java.security.SecureRandom().nextBytes(key);
        String authKey = "hex:" + java.util.HexFormat.of().formatHex(key);
        // Every child's port at once, distinct and outside the range that bind(0) and outgoing connections draw from.
        java.util.Iterator<Integer> ports = io.orbitkv.pd.broker.Ports.free(
                1 + spec.deciders() + spec.proxies() + 2 * (spec.prefillEngines() + spec.decodeEngines())).iterator();
        for (int i = 0; i < spec.deciders(); i++) {
            int deciderPort = ports.next();
            String name = i == 0 ? "decider" : "decider-" + (i + 1);
            String url = "http://" + address(name) + ":" + deciderPort;
            deciderUrls.add(url);
            Map<String, String> decider = new LinkedHashMap<>();
            decider.put("bootstrap.servers", bs);
            decider.put("decider.application.id", "orbitkv-decider-" + ProcessHandle.current().pid());
            decider.put("decider.state.dir", dir.resolve(i == 0 ? "decider-state" : "decider-state-" + (i + 1)).toString());
            decider.put("decider.http.host", address(name));
            decider.put("decider.http.port", Integer.toString(deciderPort));
            // The product's defaults for a restart in seconds: RocksDB keeps Streams' process id (so its transactional id) in
            // the state directory, and a restarted decider fences its dead self's open transaction at once instead of
            // waiting out transaction.timeout.ms (in_memory: a new id each start, 10 s); static membership takes the
            // partitions back with no rebalance (docs/chaos.md).
            decider.put("decider.instance.id", "decider-" + i);
            if (spec.deciders() > 1) {
                // Failover in seconds (docs/decider.md, "Failover"): a dead instance's partitions move after a 2 s session
                // (the embedded broker allows it: group.min.session.timeout.ms), to an instance that kept a standby of
                // their state, and its open transaction is aborted 3 s after it began instead of 10 s.
                decider.put("kafka.session.timeout.ms", "2000");
                decider.put("kafka.heartbeat.interval.ms", "500");
                decider.put("kafka.num.standby.replicas", "1");
                decider.put("kafka.producer.transaction.timeout.ms", "3000");
            }
            decider.put("auth.key", authKey);
            replicated(decider);
            decider.putAll(spec.decider());
            launch(name, "decider", decider, "-Xmx512m");
            readyUrls.put(name, url + "/health");
        }
        long epoch = System.currentTimeMillis();
        int n = 0;
        for (int i = 0; i < spec.prefillEngines() + spec.decodeEngines(); i++) {
            boolean prefill = i < spec.prefillEngines();
            String role = prefill ? "prefill" : "decode";
            String id = role + "-" + (prefill ? i : i - spec.prefillEngines());
            boolean python = spec.pythonEngines().contains(id);
            // An engine that brings its own pool (device memory) names it in its hello: no shared file.
            boolean ownPool = python && spec.enginesOwnPools();
            Path pool = ownPool ? null : Path.of("/dev/shm", "orbitkv-" + ProcessHandle.current().pid() + "-" + dir.getFileName() + "-" + id + ".kv");
            KvGeometry g = spec.preset().geometry(spec.poolBlocks(), 1);
            if (pool != null) {
                Files.deleteIfExists(pool);
                poolFiles.add(pool);
                HostKvPool.ensureFile(g, pool);
            }
            long e = epoch + (n++);
            Map<String, String> engine = new LinkedHashMap<>();
            engine.put("bootstrap.servers", bs);
            engine.put("engine.id", id);
            engine.put("engine.role", role);
            engine.put("engine.preset", spec.preset().key());
            engine.put("engine.pool.blocks", Integer.toString(spec.poolBlocks()));
            if (pool != null) {
                engine.put("engine.pool.path", pool.toString());
            }
            engine.put("engine.instance-epoch", Long.toString(e));
            engine.put("engine.http.host", address(id));
            engine.put("engine.http.port", Integer.toString(ports.next()));
            engine.put("engine.compute.prefill-ms-per-token", Double.toString(spec.prefillMsPerToken()));
            engine.put("engine.compute.decode-ms-per-token", Double.toString(spec.decodeMsPerToken()));
            engine.put("engine.worker.wait", "180s");
            replicated(engine);
            engine.putAll(spec.engine());
            Map<String, String> worker = new LinkedHashMap<>();
            worker.put("bootstrap.servers", bs);
            worker.put("worker.engine.id", id);
            worker.put("worker.engine.role", role);
            worker.put("worker.engine.instance-epoch", Long.toString(e));
            if (pool != null) {
                worker.put("worker.pool.path", pool.toString());
            }
            worker.put("worker.layout.num-layers", Integer.toString(g.numLayers()));
            worker.put("worker.layout.block-size-tokens", Integer.toString(g.blockSizeTokens()));
            worker.put("worker.layout.num-kv-heads", Integer.toString(g.numKvHeads()));
            worker.put("worker.layout.head-dim", Integer.toString(g.headDim()));
            worker.put("worker.layout.dtype", g.dtype().name().toLowerCase());
            worker.put("worker.layout.num-blocks", Integer.toString(g.numBlocks()));
            worker.put("auth.key", authKey);
            worker.put("worker.http.host", address(id));
            worker.put("worker.http.port", Integer.toString(ports.next()));
            worker.put("transfer.tcp.host", address(id));
            readyUrls.put("worker-" + id, "http://" + address(id) + ":" + worker.get("worker.http.port") + "/health");
            if (id.equals(spec.relayed())) {
                if (rig != null) {
                    throw new IllegalArgumentException("a fault relay in front of a worker is for loopback layouts; on hosts, cut links instead");
                }
                List<Integer> two = io.orbitkv.pd.broker.Ports.free(2);
                worker.put("transfer.tcp.port", Integer.toString(two.get(0)));
                worker.put("transfer.tcp.advertised-port", Integer.toString(two.get(1)));
                relay = new FaultRelay(two.get(1), new java.net.InetSocketAddress("127.0.0.1", two.get(0)));
            }
            replicated(worker);
            worker.putAll(spec.worker());
            if (python) {
                // The Python engine joins through its worker's engine API: the worker maps the pool the engine names.
                Path socket = dir.resolve("api-" + id + ".sock");
                worker.put("worker.engine-api.path", socket.toString());
                if (spec.nodeWorker()) {
                    nodeWorkers.put(id, worker);
                } else {
                    launch("worker-" + id, "worker", worker, "-Xmx256m");
                }
                launchPython("engine-" + id, pythonEngineConfig(engine, socket, spec));
            } else {
                if (spec.engineApi()) {
                    // The Java engine on its worker's engine API: no Kafka client of its own.
                    Path socket = dir.resolve("api-" + id + ".sock");
                    worker.put("worker.engine-api.path", socket.toString());
                    engine.remove("bootstrap.servers");
                    engine.put("engine.api.path", socket.toString());
                }
                launch("engine-" + id, "engine", engine, "-Xmx256m");
                if (spec.nodeWorker()) {
                    nodeWorkers.put(id, worker);
                } else {
                    launch("worker-" + id, "worker", worker, "-Xmx256m");
                }
            }
            engines.add(new Engine(id, role, "http://" + address(id) + ":" + engine.get("engine.http.port"), pool));
            readyUrls.put("engine-" + id, "http://" + address(id) + ":" + engine.get("engine.http.port") + "/health");
        }
        if (!nodeWorkers.isEmpty()) {
            launchNodeWorker(nodeWorkers);
        }
        for (int i = 1; i <= spec.proxies(); i++) {
            int proxyPort = ports.next();
            String name = i == 1 ? "proxy" : "proxy-" + i;
            String url = "http://" + address(name) + ":" + proxyPort;
            proxyUrls.add(url);
            Map<String, String> proxy = new LinkedHashMap<>();
            proxy.put("bootstrap.servers", bs);
            proxy.put("proxy.id", i == 1 ? "proxy-1" : name);
            proxy.put("proxy.http.host", address(name));
            proxy.put("proxy.http.port", Integer.toString(proxyPort));
            proxy.put("proxy.decider.url", String.join(",", deciderUrls));
            proxy.put("proxy.routing", spec.routing());
            proxy.put("proxy.engines.refresh", "500ms");
            replicated(proxy);
            proxy.putAll(spec.proxy());
            launch(name, "proxy", proxy, "-Xmx256m");
            readyUrls.put(name, url + "/health");
        }
        Map<String, String> dashboard = null;
        if (spec.dashboard()) {
            int dashboardPort = ports.next();
            dashboardUrl = "http://" + address("dashboard") + ":" + dashboardPort + "/";
            dashboard = new LinkedHashMap<>();
            dashboard.put("bootstrap.servers", bs);
            replicated(dashboard);
            dashboard.put("dashboard.application.id", "orbitkv-dashboard-" + ProcessHandle.current().pid());
            dashboard.put("dashboard.state.dir", dir.resolve("dashboard-state").toString());
            dashboard.put("dashboard.http.host", address("dashboard"));
            dashboard.put("dashboard.http.port", Integer.toString(dashboardPort));
            dashboard.put("dashboard.trace.command", "./orbitkv-pd trace {id} --config " + dir.resolve("config").resolve("decider.properties"));
        }

        say.accept("started decider, " + spec.prefillEngines() + " prefill + " + spec.decodeEngines() + " decode engines with their workers, and the"
                + " proxy; waiting for them ...");
        List<Await> awaits = new ArrayList<>();
        for (int i = 0; i < deciderUrls.size(); i++) {
            awaits.add(new Await(i == 0 ? "decider" : "decider-" + (i + 1), deciderUrls.get(i) + "/health", body -> body.contains("RUNNING")));
        }
        for (Engine e : engines) {
            awaits.add(new Await("engine-" + e.id(), e.url() + "/health", body -> body.contains("\"ok\"")));
        }
        for (int i = 0; i < proxyUrls.size(); i++) {
            awaits.add(new Await(i == 0 ? "proxy" : "proxy-" + (i + 1), proxyUrls.get(i) + "/stats",
                    body -> engines.stream().allMatch(e -> body.contains("\"" + e.id() + "\""))));
        }
        awaitAll(awaits, Duration.ofMinutes(3));
        if (dashboard != null) {
            // Once the rest is ready, not awaited: it reads the log from the start, so it misses nothing by starting late, and
            // a sixth JVM starting beside the others on two cores cost them seconds of their own start.
            launch("dashboard", "dashboard", dashboard, "-Xmx256m");
        }
        long brokerReady = brokerReadyNanos;
        say.accept(String.format("pipeline ready in %.1f s, %.1f s after the broker (logs under %s); each component from its launch to ready: %s",
                (System.nanoTime() - t0) / 1e9, (System.nanoTime() - brokerReady) / 1e9, dir.resolve("logs"), String.join(", ",
                        startTimes.entrySet().stream().map(e -> String.format(java.util.Locale.ROOT, "%s %.1f s", e.getKey(), e.getValue())).toList())));
    }

    /**
     * The hosts of {@link PipelineSpec#withNetns}: one per broker node ({@code broker-1}, ...), decider, engine node (named
     * after its engine: {@code prefill-0}), proxy and the dashboard; every host's link at {@link PipelineSpec#link}.
     */
    private void openHosts() {
        if (spec.nodeWorker()) {
            throw new IllegalArgumentException("--hosts netns: a node worker serves engines of one host; give each engine its own worker");
        }
        List<String> names = new ArrayList<>();
        if (externalBootstrap == null) {
            for (int n = 1; n <= spec.brokers(); n++) {
                names.add("broker-" + n);
            }
        }
        for (int i = 0; i < spec.deciders(); i++) {
            names.add(i == 0 ? "decider" : "decider-" + (i + 1));
        }
        for (int i = 0; i < spec.prefillEngines(); i++) {
            names.add("prefill-" + i);
        }
        for (int i = 0; i < spec.decodeEngines(); i++) {
            names.add("decode-" + i);
        }
        for (int i = 1; i <= spec.proxies(); i++) {
            names.add(i == 1 ? "proxy" : "proxy-" + i);
        }
        if (spec.dashboard()) {
            names.add("dashboard");
        }
        rig = NetnsHosts.create(names);
        if (spec.link() != null) {
            for (NetnsHosts.Host h : rig.hosts()) {
                rig.rate(h.name(), spec.link());
            }
        }
        say.accept("hosts: " + rig.hosts().size() + " network namespaces on a bridge (" + rig.harnessAddress() + " is this machine), "
                + String.join(", ", rig.hosts().stream().map(h -> h.name() + " " + h.address()).toList())
                + (spec.link() == null ? "" : "; every link at " + spec.link()));
    }

    /**
     * The command prefix child {@code name} starts under: its host's {@code ip netns exec} (an engine node's engine and
     * worker, {@code engine-prefill-0} and {@code worker-prefill-0}, share host {@code prefill-0}: their engine API is a
     * local socket, their pool a file), or none on loopback.
     */
    private List<String> launcher(String name) {
        if (rig == null) {
            return List.of();
        }
        String host = name.startsWith("engine-") || name.startsWith("worker-") ? name.substring(7) : name;
        return rig.host(movedTo.getOrDefault(host, host)).launcher();
    }

    /** The address the component or engine node {@code host} binds and advertises: its host's, or loopback. */
    private String address(String host) {
        return rig == null ? "127.0.0.1" : rig.address(movedTo.getOrDefault(host, host));
    }

    /**
     * An engine node ({@code decode-0}: its engine and worker) killed with -9 and started again as a new instance — a
     * new instance epoch in both configs, as a restart that recreates the engine's memory needs — either at the same
     * address (a machine rebooted) or on a new host at a new address (a machine replaced; the old host is removed).
     * {@code down} passes between the kill and the start. Returns once both processes are started; the caller waits for health.
     */
    public synchronized void restartNode(String node, boolean newAddress, Duration down) throws IOException, InterruptedException {
        if (spec.nodeWorker()) {
            throw new IllegalStateException("restartNode: engines share a node worker in this pipeline");
        }
        Engine engine = engines.stream().filter(e -> e.id().equals(node)).findFirst()
                .orElseThrow(() -> new IllegalArgumentException("no engine node called " + node + "; have " + engines.stream().map(Engine::id).toList()));
        String engineChild = "engine-" + node;
        String workerChild = "worker-" + node;
        kill(engineChild);
        kill(workerChild);
        Thread.sleep(down.toMillis());
        Properties ec = readConfig(child(engineChild).config());
        Properties wc = readConfig(child(workerChild).config());
        long epoch = Math.max(System.currentTimeMillis(), Long.parseLong(ec.getProperty("engine.instance-epoch", "0")) + 1);
        ec.setProperty("engine.instance-epoch", Long.toString(epoch));
        wc.setProperty("worker.engine.instance-epoch", Long.toString(epoch));
        if (newAddress) {
            if (rig == null) {
                throw new IllegalStateException("restartNode at a new address: the pipeline is not on separate hosts (--hosts netns)");
            }
            String old = movedTo.getOrDefault(node, node);
            String host = node + "-r" + replacements.merge(node, 1, Integer::sum);
            String addr = rig.addHost(host).address();
            if (spec.link() != null) {
                rig.rate(host, spec.link());
            }
            movedTo.put(node, host);
            rig.removeHost(old);
            ec.setProperty("engine.http.host", addr);
            wc.setProperty("worker.http.host", addr);
            wc.setProperty("transfer.tcp.host", addr);
            String url = "http://" + addr + ":" + ec.getProperty("engine.http.port");
            engines.set(engines.indexOf(engine), new Engine(engine.id(), engine.role(), url, engine.poolFile()));
            readyUrls.put(engineChild, url + "/health");
            readyUrls.put(workerChild, "http://" + addr + ":" + wc.getProperty("worker.http.port") + "/health");
        }
        store(child(engineChild).config(), ec, "rewritten by the pipeline launcher for a node restart");
        store(child(workerChild).config(), wc, "rewritten by the pipeline launcher for a node restart");
        restart(workerChild);
        restart(engineChild);
    }

    /** Where each engine node moved to ({@link #restartNode} at a new address): node → host. */
    private final Map<String, String> movedTo = new java.util.concurrent.ConcurrentHashMap<>();
    /** How many times each engine node was replaced (its hosts are {@code <node>-r1}, {@code -r2}, ...). */
    private final Map<String, Integer> replacements = new java.util.concurrent.ConcurrentHashMap<>();

    private static Properties readConfig(Path file) throws IOException {
        Properties p = new Properties();
        try (java.io.Reader r = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
            p.load(r);
        }
        return p;
    }

    private static void store(Path file, Properties p, String comment) throws IOException {
        try (Writer w = Files.newBufferedWriter(file, StandardCharsets.UTF_8)) {
            p.store(w, comment);
        }
    }

    /** The host engine node {@code node} runs on now (its own name, or the one it was moved to). */
    public String hostOf(String node) {
        return movedTo.getOrDefault(node, node);
    }

    /** The hosts rig, when the pipeline runs on separate network hosts. */
    public java.util.Optional<NetnsHosts> hosts() {
        return java.util.Optional.ofNullable(rig);
    }

    /**
     * The Python engine's keys: the Java engine's that its module reads (the simulated engine: most of them; another
     * module: the common ones), every key the spec gives engines, and its worker's socket.
     */
    private static Map<String, String> pythonEngineConfig(Map<String, String> javaEngine, Path socket, PipelineSpec spec) {
        java.util.Set<String> known = spec.enginesOwnPools() ? COMMON_ENGINE_KEYS : PYTHON_ENGINE_KEYS;
        Map<String, String> p = new LinkedHashMap<>();
        javaEngine.forEach((k, v) -> {
            if (known.contains(k) || spec.engine().containsKey(k)) {
                p.put(k, v);
            }
        });
        p.put("engine.api.path", socket.toString());
        return p;
    }

    private static final java.util.Set<String> COMMON_ENGINE_KEYS = java.util.Set.of("engine.id", "engine.role", "engine.pool.blocks",
            "engine.instance-epoch", "engine.http.host", "engine.http.port", "engine.max-prompt-tokens", "engine.lease.duration",
            "engine.lease.heartbeat", "engine.lease.margin", "engine.kv.timeout");

    /** The workers of every engine in one process ({@link PipelineSpec#withNodeWorker}): one config file each. */
    private void launchNodeWorker(Map<String, Map<String, String>> workers) throws IOException {
        List<Path> configs = new ArrayList<>();
        for (Map.Entry<String, Map<String, String>> w : workers.entrySet()) {
            configs.add(writeConfig("worker-" + w.getKey(), "worker", w.getValue()));
        }
        Path log = dir.resolve("logs").resolve("worker-node.log");
        add("worker-node", log, configs.get(0), () -> startComponent("worker-node", "worker", configs, log, dir.resolve("config")
                .resolve("classpath.args"), "-Xmx768m"));
    }

    private static final java.util.Set<String> PYTHON_ENGINE_KEYS = java.util.Set.of("engine.id", "engine.role", "engine.preset", "engine.pool.blocks",
            "engine.pool.path", "engine.instance-epoch", "engine.model", "engine.model.seed", "engine.http.host", "engine.http.port",
            "engine.compute.prefill-ms-per-token", "engine.compute.decode-ms-per-token", "engine.max-prompt-tokens", "engine.lease.duration",
            "engine.lease.heartbeat", "engine.lease.margin", "engine.kv.timeout", "engine.kv.verify", "engine.fault.corrupt-kv-prefix", "engine.cost",
            "engine.max-batched-tokens", "engine.max-num-seqs", "engine.prefix-cache.enabled", "engine.prefix-cache.seed", "engine.kv-wait", "engine.prefix-cache.skip-transfer");

    /**
     * The niceness of the processes on the token path — engines and proxies — when the launcher may set it (root; otherwise
     * {@code nice} says it cannot and they run as the rest). On one small host every component shares the cores: the
     * broker's, decider's and workers' bursts delayed the engines' steps and the proxy's writes by up to 10 ms at the 99th
     * percentile (client ITL p99 20.9 ms at 6 requests/s where the engine's own steps took 8 ms; 12.7 ms with the token path
     * at -5: docs/engine-model.md, "Where the inter-token time goes"). Engines stand for GPU processes, whose steps no host
     * load delays; in production they and the proxies do not share cores with the control plane.
     */
    public static final int TOKEN_PATH_NICE = -5;

    static List<String> tokenPathPriority(String name) {
        return name.startsWith("engine-") || name.startsWith("proxy")
                ? List.of("nice", "-n", Integer.toString(TOKEN_PATH_NICE)) : List.of();
    }

    /** Starts {@code python3 -m orbitkv_pd.sim_engine} with {@code props}; it exits by itself when this JVM dies. */
    private void launchPython(String name, Map<String, String> props) throws IOException {
        Path config = dir.resolve("config").resolve(name + ".properties");
        Properties p = new Properties();
        p.putAll(props);
        store(config, p, "python3 -m orbitkv_pd.sim_engine (written by the pipeline launcher)");
        Path log = dir.resolve("logs").resolve(name + ".log");
        Path python = pythonDir();
        add(name, log, config, () -> {
            List<String> cmd = new ArrayList<>(launcher(name)); // at each start: a node replaced is on another host
            cmd.addAll(tokenPathPriority(name));
            cmd.addAll(List.of("python3", "-m", spec.pythonModule(), "--config", config.toString(), "--parent-pid",
                    Long.toString(ProcessHandle.current().pid())));
            ProcessBuilder pb = new ProcessBuilder(cmd).directory(python.toFile()).redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()));
            pb.environment().put("PYTHONDONTWRITEBYTECODE", "1");
            Process proc = pb.start();
            proc.getOutputStream().close();
            return proc;
        });
    }

    private void add(String name, Path log, Path config, Starter starter) throws IOException {
        starters.put(name, starter);
        launchedNanos.put(name, System.nanoTime());
        children.add(new Child(name, starter.start(), log, config));
    }

    /**
     * Where the Python library is: {@code orbitkv.home}/python (the launcher sets it), else the first {@code python}
     * directory holding {@code orbitkv_pd} from the working directory up.
     */
    public static Path pythonDir() {
        String home = System.getProperty("orbitkv.home");
        if (home != null && Files.isDirectory(Path.of(home, "python", "orbitkv_pd"))) {
            return Path.of(home, "python").toAbsolutePath();
        }
        for (Path d = Path.of("").toAbsolutePath(); d != null; d = d.getParent()) {
            if (Files.isDirectory(d.resolve("python").resolve("orbitkv_pd"))) {
                return d.resolve("python");
            }
        }
        throw new IllegalStateException("python engines: cannot find python/orbitkv_pd (set -Dorbitkv.home to the OrbitKV P/D checkout)");
    }

    /** On a cluster of several nodes every component creates the topics replicated on up to three of them. */
    private void replicated(Map<String, String> props) {
        if (spec.brokers() > 1) {
            props.put("topics.replication.factor", Integer.toString(Math.min(3, spec.brokers())));
        }
    }

    private void launch(String name, String command, Map<String, String> props, String heap) throws IOException {
        Path config = writeConfig(name, command, props);
        Path log = dir.resolve("logs").resolve(name + ".log");
        add(name, log, config, () -> startComponent(launcher(name), name, command, List.of(config), log, dir.resolve("config").resolve("classpath.args"),
                heap));
    }

    private Path writeConfig(String name, String command, Map<String, String> props) throws IOException {
        Path config = dir.resolve("config").resolve(name + ".properties");
        Properties p = new Properties();
        p.putAll(props);
        store(config, p, "orbitkv-pd " + command + " (written by the pipeline launcher)");
        return config;
    }

    /**
     * Starts {@code orbitkv-pd <command> --config <config>} in a child JVM from this JVM's class path (written once to
     * {@code argfile}), its output appended to {@code log}; the child exits by itself when this JVM dies.
     */
    public static Process startComponent(String name, String command, Path config, Path log, Path argfile, String heap) throws IOException {
        return startComponent(name, command, List.of(config), log, argfile, heap);
    }

    /** As {@link #startComponent(String, String, Path, Path, Path, String)} with one {@code --config} per file. */
    public static Process startComponent(String name, String command, List<Path> configs, Path log, Path argfile, String heap, String... extra)
            throws IOException {
        return startComponent(List.of(), name, command, configs, log, argfile, heap, extra);
    }

    /** As {@link #startComponent(String, String, List, Path, Path, String, String...)} under {@code launcher} (a host's prefix). */
    public static Process startComponent(List<String> launcher, String name, String command, List<Path> configs, Path log, Path argfile, String heap,
                                         String... extra) throws IOException {
        if (!Files.exists(argfile)) {
            String cp = ChildClasspath.join(ChildClasspath.current());
            Files.writeString(argfile, "-cp\n\"" + cp.replace("\\", "\\\\").replace("\"", "\\\"") + "\"\n", StandardCharsets.UTF_8);
        }
        List<String> cmd = new ArrayList<>(launcher);
        cmd.addAll(tokenPathPriority(name));
        cmd.addAll(List.of(ProcessHandle.current().info().command().orElse(
                        Path.of(System.getProperty("java.home"), "bin", "java").toString()), heap, "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=5",
                "--enable-native-access=ALL-UNNAMED", "-D" + ParentWatch.PROPERTY + "=" + ProcessHandle.current().pid(),
                "-Dorbitkv.component=" + name));
        cmd.addAll(aotOptions(command));
        cmd.addAll(List.of("@" + argfile, "io.orbitkv.pd.cli.Main", command));
        for (Path config : configs) {
            cmd.add("--config");
            cmd.add(config.toString());
        }
        cmd.addAll(List.of(extra));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()));
        for (String v : List.of("CLASSPATH", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")) {
            pb.environment().remove(v);
        }
        Process proc = pb.start();
        proc.getOutputStream().close();
        return proc;
    }

    /** Commands whose AOT cache this JVM's pipelines are recording (one recording per command). */
    private static final java.util.Set<String> AOT_RECORDING = java.util.concurrent.ConcurrentHashMap.newKeySet();

    /**
     * The JDK's ahead-of-time cache (JEP 483/514) for a component's JVM, kept at {@code <orbitkv.home>/cli/target/aot/<command>.aot}
     * with the build it belongs to. A cache that exists and is newer than every jar of the class path is used: classes
     * come loaded and linked from it instead of being read, parsed and verified at every start (measured: the demo's
     * pipeline ready 17.9 s after the broker instead of 26.9 s; docs/deploy.md, "Start time"). Otherwise the first JVM of
     * each command records one as it runs (written as it exits; the run after uses it). {@code -Dorbitkv.aot=off}:
     * neither; {@code record}: record again. Only for the launcher's runs ({@code orbitkv.home} set), never in tests.
     */
    static List<String> aotOptions(String command) {
        String mode = System.getProperty("orbitkv.aot", "auto");
        String home = System.getProperty("orbitkv.home");
        if (home == null || mode.equals("off")) {
            return List.of();
        }
        Path cache = Path.of(home, "cli", "target", "aot", command + ".aot");
        if (mode.equals("record") || !fresh(cache)) {
            if (!AOT_RECORDING.add(command)) {
                return List.of();
            }
            try {
                Files.createDirectories(cache.getParent());
                Files.deleteIfExists(cache);
            } catch (IOException e) {
                return List.of();
            }
            return List.of("-XX:AOTCacheOutput=" + cache);
        }
        return List.of("-XX:AOTCache=" + cache);
    }

    /** Whether {@code cache} exists and is newer than every jar on this JVM's class path (the children's class path). */
    private static boolean fresh(Path cache) {
        try {
            if (!Files.isRegularFile(cache)) {
                return false;
            }
            long made = Files.getLastModifiedTime(cache).toMillis();
            for (String entry : System.getProperty("java.class.path", "").split(java.io.File.pathSeparator)) {
                Path jar = Path.of(entry.endsWith("*") ? entry.substring(0, entry.length() - 1) : entry);
                if (Files.isDirectory(jar)) {
                    try (var jars = Files.list(jar)) {
                        if (jars.anyMatch(j -> j.toFile().lastModified() > made)) {
                            return false;
                        }
                    }
                } else if (Files.exists(jar) && Files.getLastModifiedTime(jar).toMillis() > made) {
                    return false;
                }
            }
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    /** A component's readiness check: its URL answers 200 with a body {@code ok} accepts. */
    private record Await(String name, String url, java.util.function.Predicate<String> ok) { }

    /** Per component, seconds from its launch until it answered ready ({@link #open}'s concurrent wait). */
    private final Map<String, Double> startTimes = new LinkedHashMap<>();
    private final Map<String, Long> launchedNanos = new java.util.concurrent.ConcurrentHashMap<>();
    private long brokerReadyNanos = System.nanoTime();

    /**
     * Waits for every component at once, noting when each one was ready (from its own launch): what each costs to start,
     * not what it cost to be asked after the one before it.
     */
    private void awaitAll(List<Await> awaits, Duration timeout) throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        List<Await> pending = new ArrayList<>(awaits);
        while (!pending.isEmpty()) {
            for (Child c : children) {
                if (!c.alive()) {
                    throw new IllegalStateException(c.name() + " exited with " + c.process().exitValue() + " while starting; its log ("
                            + c.log() + "):\n" + LogTail.of(c.log(), 40));
                }
            }
            for (java.util.Iterator<Await> it = pending.iterator(); it.hasNext(); ) {
                Await a = it.next();
                if (ready(a)) {
                    long launched = launchedNanos.getOrDefault(a.name(), brokerReadyNanos);
                    startTimes.put(a.name(), (System.nanoTime() - launched) / 1e9);
                    it.remove();
                }
            }
            if (pending.isEmpty()) {
                return;
            }
            if (System.nanoTime() > deadline) {
                Await a = pending.getFirst();
                Child c = children.stream().filter(x -> x.name().equals(a.name())).findFirst().orElse(null);
                throw new IllegalStateException(a.name() + " not ready at " + a.url() + " within " + timeout
                        + (c == null ? "" : "; its log (" + c.log() + "):\n" + LogTail.of(c.log(), 40)));
            }
            Thread.sleep(100);
        }
    }

    private boolean ready(Await a) {
        try {
            HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create(a.url())).timeout(Duration.ofSeconds(2)).build(),
                    HttpResponse.BodyHandlers.ofString());
            return r.statusCode() == 200 && a.ok().test(r.body());
        } catch (IOException e) {
            return false; // not listening yet
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    public Path dir() {
        return dir;
    }

    public String bootstrapServers() {
        return bootstrap;
    }

    public String proxyUrl() {
        return proxyUrls.get(0);
    }

    /** The engine API socket of engine {@code id}'s worker, when that engine is on it. */
    public java.util.Optional<Path> engineApiSocket(String id) {
        return spec.pythonEngines().contains(id) || spec.engineApi() ? java.util.Optional.of(dir.resolve("api-" + id + ".sock")) : java.util.Optional.empty();
    }

    /** The data-plane relay in front of {@link PipelineSpec#relayed()}'s worker, or null. */
    public FaultRelay relay() {
        return relay;
    }

    /** Every proxy's URL (the first is {@link #proxyUrl()}). */
    public List<String> proxyUrls() {
        return List.copyOf(proxyUrls);
    }

    /** The first decider instance's query URL. */
    public String deciderUrl() {
        return deciderUrls.get(0);
    }

    /** The dashboard's page ({@code …/}, API under {@code api/}, Prometheus at {@code metrics}), or null if not started. */
    public String dashboardUrl() {
        return dashboardUrl;
    }

    public List<Engine> engines() {
        return List.copyOf(engines);
    }

    /** The embedded broker's process (its CPU time for the benchmark), if this pipeline started one. */
    public java.util.Optional<ProcessHandle> brokerProcess() {
        return kafka == null ? java.util.Optional.empty() : kafka.processHandle(kafka.nodeIds().get(0));
    }

    public synchronized List<Child> children() {
        return List.copyOf(children);
    }

    /** The child called {@code name} ({@code decider}, {@code proxy}, {@code engine-decode-0}, {@code worker-prefill-1}, ...). */
    public synchronized Child child(String name) {
        return children.stream().filter(c -> c.name().equals(name)).findFirst()
                .orElseThrow(() -> new IllegalArgumentException("no child called " + name + "; have " + children.stream().map(Child::name).toList()));
    }

    /** The embedded cluster's node of {@code broker-N}, or -1 for another name. */
    private int brokerNode(String name) {
        if (kafka == null || !name.matches("broker-\\d+")) {
            return -1;
        }
        int n = Integer.parseInt(name.substring(7));
        if (!kafka.nodeIds().contains(n)) {
            throw new IllegalArgumentException("no broker node " + n + "; the embedded cluster has " + kafka.nodeIds());
        }
        return n;
    }

    /** {@code kill -9}: the child gets no chance to flush, commit or say goodbye. Returns once it is gone. */
    public void kill(String name) throws InterruptedException {
        int node = brokerNode(name);
        if (node >= 0) {
            kafka.killNode(node);
            return;
        }
        Process p = child(name).process();
        p.destroyForcibly();
        if (!p.waitFor(30, TimeUnit.SECONDS)) {
            throw new IllegalStateException(name + " still alive 30 s after SIGKILL");
        }
    }

    /**
     * Sends the POSIX signal {@code sig} ({@code STOP}, {@code CONT}, {@code TERM}) to the child: {@code STOP} hangs it
     * whole (every thread, its sockets open: a gray failure), {@code CONT} lets it go on.
     */
    public void signal(String name, String sig) throws IOException, InterruptedException {
        int node = brokerNode(name);
        long pid = node >= 0 ? kafka.processHandle(node).orElseThrow(() -> new IllegalStateException(name + " is not running")).pid()
                : child(name).process().pid();
        Process k = new ProcessBuilder("kill", "-" + sig, Long.toString(pid)).redirectErrorStream(true).start();
        String out = new String(k.getInputStream().readAllBytes(), StandardCharsets.UTF_8).strip();
        if (k.waitFor() != 0) {
            throw new IOException("kill -" + sig + " " + pid + " (" + name + "): " + out);
        }
    }

    /**
     * Starts a stopped (killed or exited) child again with its config, as an operator would; its log goes on in the same
     * file. For {@code broker-N}: the node again on its data directory, once ready (returns null).
     */
    public synchronized Child restart(String name) throws IOException {
        int node = brokerNode(name);
        if (node >= 0) {
            kafka.restartNode(node); // returns once every running node is ready
            return null;
        }
        Child old = child(name);
        if (old.alive()) {
            throw new IllegalStateException(name + " is still running (pid " + old.process().pid() + ")");
        }
        Child c = new Child(name, starters.get(name).start(), old.log(), old.config());
        children.set(children.indexOf(old), c);
        return c;
    }

    /**
     * The URL whose answer says the child is ready again (its {@code /health}; the decider's once RUNNING), or null for a
     * child without one.
     */
    public String readyUrl(String name) {
        return readyUrls.get(name);
    }

    public Path logsDir() {
        return dir.resolve("logs");
    }

    /** Stops the children (proxy first, broker last), then deletes the pool files. Idempotent; also the shutdown hook. */
    @Override
    public synchronized void close() {
        if (closed) {
            return;
        }
        closed = true;
        try {
            Runtime.getRuntime().removeShutdownHook(hook);
        } catch (IllegalStateException e) {
            // already shutting down: this is the hook
        }
        List<Child> order = new ArrayList<>(children);
        java.util.Collections.reverse(order);
        for (Child c : order) {
            c.process().destroy();
        }
        for (Child c : order) {
            try {
                if (!c.process().waitFor(10, TimeUnit.SECONDS)) {
                    c.process().destroyForcibly();
                    c.process().waitFor(10, TimeUnit.SECONDS);
                }
            } catch (InterruptedException e) {
                c.process().destroyForcibly();
                Thread.currentThread().interrupt();
            }
        }
        try {
            if (kafka != null) {
                kafka.close();
            }
            if (relay != null) {
                relay.close();
            }
            if (rig != null) {
                rig.close();
            }
        } finally {
            // the pool files are GiBs of /dev/shm (memory): gone whatever else failed to close (a killed benchmark left two)
            for (Path p : poolFiles) {
                try {
                    Files.deleteIfExists(p);
                } catch (IOException e) {
                    say.accept("could not delete the pool file " + p + ": " + e);
                }
            }
        }
    }
}
