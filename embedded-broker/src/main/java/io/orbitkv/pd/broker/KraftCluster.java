package io.orbitkv.pd.broker;

import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryNotEmptyException;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.stream.Collectors;
import java.util.stream.IntStream;
import java.util.stream.Stream;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeClusterOptions;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.DescribeLogDirsOptions;
import org.apache.kafka.common.Node;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import io.orbitkv.pd.broker.ChildClasspath;
import io.orbitkv.pd.broker.internal.ChildLogging;
import io.orbitkv.pd.broker.internal.ClusterLayout;
import io.orbitkv.pd.broker.internal.KraftBrokerMain;
import io.orbitkv.pd.broker.internal.NodeProcess;
import io.orbitkv.pd.broker.Ports;

/**
 * A real Apache Kafka cluster in KRaft mode, each node a combined broker+controller running in its own child
 * JVM ({@link KraftBrokerMain}), all bound to {@code 127.0.0.1}.
 *
 * <h2>Ownership</h2>
 * The cluster owns its child processes and everything under {@link KraftClusterConfig#dataDir()} except
 * foreign files: {@code node-<id>/} directories (config, {@code kafka-logs/}) and a layout file recording the
 * cluster id and ports. It does not own {@link KraftClusterConfig#logsDir()} beyond appending one
 * {@code node-<id>.log} per node. Non-persistent clusters wipe their node directories on {@link #start()}
 * and delete them on {@link #close()}; persistent ones keep them and reuse their ports and storage.
 *
 * <h2>Invariants</h2>
 * <ul>
 *   <li>Children never outlive this JVM: a shutdown hook stops them, and each child also watches this
 *       process's pid and exits when it is gone (covers SIGKILL of the parent).</li>
 *   <li>Node ids are {@code 1..nodes}; each node's ports and data directory are fixed for the lifetime of the
 *       object, so {@link #restartNode(int)} brings back the same broker at the same address.</li>
 *   <li>{@link #start()} and {@link #restartNode(int)} return only when every running node is registered,
 *       unfenced and answering requests; they never sleep for a fixed time.</li>
 * </ul>
 *
 * <h2>Threading</h2>
 * Lifecycle methods are {@code synchronized}; read-only accessors and {@link #close()} may be called from any
 * thread. Instances are single-use: once closed, they cannot be started again (build a new one over the same
 * persistent {@code dataDir} instead).
 */
public final class KraftCluster implements AutoCloseable {

    /**
     * Fixed KRaft cluster id (base64 of {@code "orbitkv-pd-kraft"}). Stable ids make persistent directories and
     * test logs comparable across runs; isolation comes from separate ports and directories, not ids.
     */
    public static final String CLUSTER_ID = "b3JiaXRrdi1wZC1rcmFmdA";

    private static final Logger LOG = LoggerFactory.getLogger(KraftCluster.class);

    /** How often readiness is re-checked; a child exit interrupts the wait at once. */
    private static final long POLL_MILLIS = 200;

    private final KraftClusterConfig config;
    private final AtomicBoolean closed = new AtomicBoolean();
    private final Thread shutdownHook;
    private volatile List<NodeProcess> nodes = List.of();
    private volatile ClusterLayout layout;
    private volatile boolean started;
    private boolean hookRegistered;
    private List<String> childClasspath = List.of();
    private Optional<String> slf4jProvider = Optional.empty();

    private KraftCluster(KraftClusterConfig config) {
        this.config = config;
        this.shutdownHook = Thread.ofPlatform().name("kraft-cluster-shutdown").unstarted(this::onJvmShutdown);
    }

    /** A cluster for {@code config}; nothing runs until {@link #start()}. */
    public static KraftCluster create(KraftClusterConfig config) {
        return new KraftCluster(config);
    }

    public static Builder builder() {
        return new Builder();
    }

    public KraftClusterConfig config() {
        return config;
    }

    // ------------------------------------------------------------------------------------------ lifecycle

    /**
     * Starts all nodes and waits until the cluster is ready (all nodes in {@code describeCluster}, a controller
     * known, every node answering).
     *
     * @return this, for {@code builder().build().start()} chains
     * @throws IllegalStateException if a node dies during startup or readiness times out; the message carries
     *                               the tail of the relevant node logs. All children are stopped by then.
     */
    public synchronized KraftCluster start() {
        if (closed.get()) {
            throw new IllegalStateException("cluster is closed; build a new one");
        }
        if (started) {
            throw new IllegalStateException("cluster already started");
        }
        try {
            Files.createDirectories(config.dataDir());
            Files.createDirectories(config.logsDir());
            if (!config.persistent()) {
                deleteNodeData(); // a previous run that crashed must not leak topics into this one
            }
            layout = resolveLayout();
            layout.store(config.dataDir());
            nodes = layout.nodes().stream()
                    .map(p -> new NodeProcess(p, config.dataDir().resolve("node-" + p.nodeId()),
                            config.logsDir().resolve("node-" + p.nodeId() + ".log"), config.host(p.nodeId())))
                    .toList();
        } catch (IOException e) {
            throw new UncheckedIOException("cannot prepare " + config.dataDir(), e);
        }
        List<Path> cp = ChildClasspath.current();
        childClasspath = cp.stream().map(Path::toString).toList();
        slf4jProvider = ChildLogging.chooseProvider(cp);
        if (slf4jProvider.isEmpty()) {
            LOG.warn("No SLF4J provider on the class path; broker logs will only hold stdout/stderr");
        }
        registerShutdownHook();
        long t0 = System.nanoTime();
        try {
            for (NodeProcess n : nodes) {
                launch(n);
            }
            awaitReady(nodes);
        } catch (RuntimeException | Error e) {
            nodes.forEach(NodeProcess::kill);
            throw e;
        }
        started = true;
        LOG.info("KRaft cluster of {} node(s) ready at {} in {} ms", nodes.size(), bootstrapServers(),
                TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0));
        return this;
    }

    /** Kills node {@code nodeId} like {@code kill -9}: no controlled shutdown, no log flush. Waits for the exit. */
    public synchronized void killNode(int nodeId) {
        NodeProcess n = node(nodeId);
        LOG.info("Killing node {}", nodeId);
        n.kill();
    }

    /**
     * Stops node {@code nodeId} gracefully (SIGTERM: controlled shutdown) and waits for it; kills it if it takes
     * longer than {@link KraftClusterConfig#shutdownTimeout()}.
     */
    public synchronized void stopNode(int nodeId) {
        NodeProcess n = node(nodeId);
        LOG.info("Stopping node {}", nodeId);
        n.requestStop();
        n.awaitStopped(config.shutdownTimeout());
    }

    /**
     * (Re)starts node {@code nodeId} on the same ports and data directory, stopping it gracefully first if it is
     * running, and waits until it and all other running nodes are ready again.
     */
    public synchronized void restartNode(int nodeId) {
        requireStarted();
        NodeProcess n = node(nodeId);
        if (n.isAlive()) {
            stopNode(nodeId);
        }
        LOG.info("Restarting node {}", nodeId);
        long t0 = System.nanoTime();
        launch(n);
        awaitReady(nodes.stream().filter(NodeProcess::isAlive).toList());
        LOG.info("Node {} ready again in {} ms", nodeId, TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0));
    }

    /**
     * Blocks until node {@code nodeId}'s current process exits, for foreground use such as {@link DevBroker}.
     *
     * @return the process exit code
     */
    public int awaitNodeExit(int nodeId) throws InterruptedException {
        Optional<Process> p = node(nodeId).process();
        return p.isEmpty() ? -1 : p.get().waitFor();
    }

    /**
     * Stops all nodes and waits for them. Persistent clusters are stopped gracefully (bounded by
     * {@link KraftClusterConfig#shutdownTimeout()}) so the next start needs no log recovery; non-persistent ones
     * are killed at once because their data is deleted right after, and a graceful stop of a whole multi-node
     * cluster is slow (each broker waits for the controllers to move its leaderships). Idempotent.
     */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        synchronized (this) {
            unregisterShutdownHook();
            terminateAll(config.shutdownTimeout());
            if (!config.persistent()) {
                deleteNodeData();
                deleteIfEmpty(config.dataDir());
            }
            LOG.info("KRaft cluster at {} closed", config.dataDir());
        }
    }

    public boolean isClosed() {
        return closed.get();
    }

    // ------------------------------------------------------------------------------------------ accessors

    /** {@code bootstrap.servers} naming every node, including stopped ones (clients skip those). */
    public String bootstrapServers() {
        requireNodes();
        return nodes.stream().map(NodeProcess::brokerAddress).collect(Collectors.joining(","));
    }

    /**
     * Minimal client config for this cluster: {@code bootstrap.servers}, and on a secured cluster the super user's
     * credentials and the CA. Mutable copy.
     */
    public Map<String, Object> adminConfig() {
        Map<String, Object> m = new HashMap<>();
        m.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers());
        if (config.security() != null) {
            m.putAll(config.security().adminClientConfig());
        }
        return m;
    }

    /** A new {@link Admin} for this cluster; the caller closes it. */
    public Admin createAdmin() {
        return Admin.create(adminConfig());
    }

    public int nodeCount() {
        return config.nodes();
    }

    /** Node ids, {@code 1..nodes}. */
    public List<Integer> nodeIds() {
        return IntStream.rangeClosed(1, config.nodes()).boxed().toList();
    }

    /** Whether node {@code nodeId}'s process is currently alive. */
    public boolean isRunning(int nodeId) {
        return node(nodeId).isAlive();
    }

    /** Node {@code nodeId}'s current process (for its pid and CPU time), if it was started. */
    public java.util.Optional<ProcessHandle> processHandle(int nodeId) {
        return node(nodeId).process().map(Process::toHandle);
    }

    /** {@code host:port} of node {@code nodeId}'s client listener. */
    public String brokerAddress(int nodeId) {
        return node(nodeId).brokerAddress();
    }

    /** The file receiving node {@code nodeId}'s stdout/stderr and Kafka logs. */
    public Path logFile(int nodeId) {
        return node(nodeId).logFile();
    }

    public Path dataDir() {
        return config.dataDir();
    }

    // ------------------------------------------------------------------------------------------ internals

    private NodeProcess node(int nodeId) {
        requireNodes();
        if (nodeId < 1 || nodeId > nodes.size()) {
            throw new IllegalArgumentException("nodeId: must be in 1.." + nodes.size() + ", got " + nodeId);
        }
        return nodes.get(nodeId - 1);
    }

    private void requireNodes() {
        if (nodes.isEmpty()) {
            throw new IllegalStateException("cluster not started");
        }
    }

    private void requireStarted() {
        if (!started || closed.get()) {
            throw new IllegalStateException(closed.get() ? "cluster is closed" : "cluster not started");
        }
    }

    /** The stored layout of a persistent directory, or fresh ports. */
    private ClusterLayout resolveLayout() throws IOException {
        ClusterLayout stored = config.persistent() ? ClusterLayout.load(config.dataDir()) : null;
        int fixed = config.brokerPort();
        if (stored != null) {
            if (stored.nodes().size() != config.nodes()) {
                throw new IllegalStateException("nodes: " + config.dataDir() + " holds a " + stored.nodes().size()
                        + "-node cluster, cannot start it with nodes=" + config.nodes());
            }
            if (fixed != 0 && stored.node(1).brokerPort() != fixed) {
                stored = stored.withBrokerPort(1, fixed);
            }
            checkFree(stored, config);
            return stored;
        }
        if (fixed != 0) {
            checkFree(fixed, "brokerPort");
        }
        // One spare so the fixed port can be dropped should the kernel hand it out as "free".
        List<Integer> free = new ArrayList<>(Ports.free(2 * config.nodes() + 1));
        free.remove(Integer.valueOf(fixed));
        List<ClusterLayout.NodePorts> ports = new ArrayList<>();
        for (int id = 1; id <= config.nodes(); id++) {
            int broker = (id == 1 && fixed != 0) ? fixed : free.removeFirst();
            ports.add(new ClusterLayout.NodePorts(id, broker, free.removeFirst()));
        }
        return new ClusterLayout(CLUSTER_ID, ports);
    }

    private static void checkFree(ClusterLayout layout, KraftClusterConfig config) {
        for (ClusterLayout.NodePorts p : layout.nodes()) {
            if (!config.host(p.nodeId()).local()) {
                continue; // a host of its own: its ports are its own
            }
            checkFree(p.brokerPort(), "node " + p.nodeId() + " brokerPort");
            checkFree(p.controllerPort(), "node " + p.nodeId() + " controllerPort");
        }
    }

    private static void checkFree(int port, String what) {
        if (!Ports.isFree(port)) {
            throw new IllegalStateException(what + ": " + Ports.HOST + ":" + port
                    + " is already in use (another broker running on this data directory or port?)");
        }
    }

    private Map<String, String> serverProperties(NodeProcess n, String voters) {
        int rf = Math.min(3, config.nodes());
        int minIsr = Math.min(2, config.nodes());
        String b = Integer.toString(n.ports().brokerPort());
        String c = Integer.toString(n.ports().controllerPort());
        Map<String, String> p = new LinkedHashMap<>();
        p.put("process.roles", "broker,controller");
        p.put("node.id", Integer.toString(n.id()));
        p.put("controller.quorum.voters", voters);
        NodeHost h = n.host();
        if (config.security() == null) {
            p.put("listeners", "PLAINTEXT://" + h.bind() + ":" + b + ",CONTROLLER://" + h.bind() + ":" + c);
            p.put("advertised.listeners", "PLAINTEXT://" + h.advertised() + ":" + b);
            p.put("listener.security.protocol.map", "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT");
            p.put("inter.broker.listener.name", "PLAINTEXT");
        } else {
            p.putAll(config.security().serverProperties(h.bind() + ":" + b, h.advertised() + ":" + b, h.bind() + ":" + c));
        }
        p.put("controller.listener.names", "CONTROLLER");
        p.put("log.dirs", n.logDir().toString());
        // Small machine: the defaults size thread pools and buffers for production hardware.
        p.put("num.network.threads", "2");
        p.put("num.io.threads", "2");
        p.put("background.threads", "2");
        p.put("num.recovery.threads.per.data.dir", "1");
        p.put("num.replica.fetchers", "1");
        p.put("log.cleaner.threads", "1");
        p.put("log.cleaner.dedupe.buffer.size", Integer.toString(16 * 1024 * 1024)); // default 128 MiB, eager
        p.put("log.segment.bytes", Integer.toString(16 * 1024 * 1024));
        // Internal topics: 50 partitions each by default, which costs seconds on the first group join.
        p.put("offsets.topic.num.partitions", "5");
        p.put("offsets.topic.replication.factor", Integer.toString(rf));
        p.put("transaction.state.log.num.partitions", "5");
        p.put("transaction.state.log.replication.factor", Integer.toString(rf));
        p.put("transaction.state.log.min.isr", Integer.toString(minIsr));
        p.put("share.coordinator.state.topic.num.partitions", "5");
        p.put("share.coordinator.state.topic.replication.factor", Integer.toString(rf));
        p.put("share.coordinator.state.topic.min.isr", Integer.toString(minIsr));
        p.put("default.replication.factor", Integer.toString(rf));
        p.put("group.initial.rebalance.delay.ms", "0");
        // Exactly-once: a produce that adds a partition to a new transaction while the previous transaction's markers
        // are still being written is verified again after this backoff (20 ms by default), which lands in the
        // decision latency tail (bench decider, EOS at 250 handoffs/s: hop-out p99 24 -> 9 ms). See docs/decider.md.
        p.put("add.partitions.to.txn.retry.backoff.ms", "2");
        p.put("auto.create.topics.enable", "false");
        // Fault tests: notice a killed broker in ~6 s instead of 9 s; heartbeats stay well inside the session.
        p.put("broker.heartbeat.interval.ms", "1000");
        p.put("broker.session.timeout.ms", "6000");
        p.putAll(config.brokerProperties());
        return p;
    }

    private void launch(NodeProcess n) {
        n.writeServerProperties(serverProperties(n, layout.quorumVoters(id -> config.host(id).advertised())));
        try {
            List<String> cmd = new ArrayList<>(n.host().launcher());
            if (config.cpus() != null) {
                cmd.addAll(List.of("taskset", "-c", config.cpus()));
            }
            cmd.add(javaBinary());
            cmd.addAll(config.jvmOptions());
            cmd.addAll(ChildLogging.writeConfigs(n.nodeDir(), slf4jProvider));
            cmd.add("-D" + KraftBrokerMain.PARENT_PID_PROPERTY + "=" + ProcessHandle.current().pid());
            cmd.add("-Dorbitkv.broker.nodeId=" + n.id()); // shows up in ps/jcmd, which node is which
            if (config.security() != null) {
                // The super user's SCRAM credential goes into the metadata at format time (a file: not on the command line).
                Path scram = n.nodeDir().resolve("scram-bootstrap");
                Files.writeString(scram, config.security().scramBootstrap());
                cmd.add("-D" + KraftBrokerMain.SCRAM_FILE_PROPERTY + "=" + scram);
            }
            cmd.add("@" + writeClasspathArgFile(n));
            cmd.add(KraftBrokerMain.class.getName());
            cmd.add(n.serverProperties().toString());
            cmd.add(CLUSTER_ID);
            n.launch(cmd);
        } catch (IOException e) {
            throw new UncheckedIOException("node " + n.id() + ": cannot launch", e);
        }
    }

    /**
     * The class path goes into a {@code java @argfile}: a Maven test class path easily exceeds what is
     * comfortable on a command line (Linux caps a single argument at 128 KiB), and it keeps {@code ps} readable.
     */
    private Path writeClasspathArgFile(NodeProcess n) throws IOException {
        String cp = String.join(File.pathSeparator, childClasspath);
        // Inside double quotes an argfile treats backslash as an escape character.
        String quoted = "\"" + cp.replace("\\", "\\\\").replace("\"", "\\\"") + "\"";
        Path f = n.nodeDir().resolve("classpath.args");
        Files.writeString(f, "-cp\n" + quoted + "\n", StandardCharsets.UTF_8);
        return f;
    }

    private static String javaBinary() {
        return ProcessHandle.current().info().command()
                .orElseGet(() -> Path.of(System.getProperty("java.home"), "bin", "java").toString());
    }

    /**
     * Polls until every node in {@code expected} is (1) accepting TCP connections, (2) listed by
     * {@code describeCluster} together with a controller, and (3) answering a request addressed to it
     * (DescribeLogDirs). (3) matters after a restart: until the controller fences the dead incarnation,
     * {@code describeCluster} still lists it. A child exiting ends the wait immediately.
     */
    private void awaitReady(List<NodeProcess> expected) {
        long deadline = System.nanoTime() + config.startupTimeout().toNanos();
        Set<Integer> ids = expected.stream().map(NodeProcess::id).collect(Collectors.toCollection(TreeSet::new));
        String problem = "not checked yet";
        Admin admin = null;
        try {
            while (true) {
                for (NodeProcess n : expected) {
                    if (!n.isAlive()) {
                        int code = n.process().map(Process::exitValue).orElse(-1);
                        throw new IllegalStateException("node " + n.id() + " exited with code " + code
                                + " during startup" + tails(List.of(n)));
                    }
                }
                long remainingMs = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
                if (remainingMs <= 0) {
                    throw new IllegalStateException("KRaft cluster not ready within " + config.startupTimeout()
                            + " (nodes " + ids + "): " + problem + tails(expected));
                }
                List<NodeProcess> notListening = expected.stream()
                        .filter(n -> !Ports.isListening(n.host().advertised(), n.ports().brokerPort(), 200)).toList();
                if (!notListening.isEmpty()) {
                    problem = "no listener yet on " + notListening.stream()
                            .map(NodeProcess::brokerAddress).toList();
                } else {
                    if (admin == null) {
                        admin = Admin.create(readinessAdminConfig());
                    }
                    Optional<String> p = readinessProblem(admin, ids, (int) Math.min(remainingMs, 3_000));
                    if (p.isEmpty()) {
                        return;
                    }
                    problem = p.get();
                }
                waitForExitOrPoll(expected);
            }
        } finally {
            if (admin != null) {
                admin.close(Duration.ZERO);
            }
        }
    }

    private Map<String, Object> readinessAdminConfig() {
        Map<String, Object> m = adminConfig();
        m.put(AdminClientConfig.CLIENT_ID_CONFIG, "orbitkv-kraft-readiness");
        m.put(AdminClientConfig.REQUEST_TIMEOUT_MS_CONFIG, 3_000);
        m.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, 3_000);
        m.put(AdminClientConfig.RECONNECT_BACKOFF_MS_CONFIG, 100);
        m.put(AdminClientConfig.RECONNECT_BACKOFF_MAX_MS_CONFIG, 500);
        return m;
    }

    private static Optional<String> readinessProblem(Admin admin, Set<Integer> ids, int timeoutMs) {
        try {
            DescribeClusterResult dc = admin.describeCluster(new DescribeClusterOptions().timeoutMs(timeoutMs));
            Collection<Node> seen = dc.nodes().get();
            Node controller = dc.controller().get();
            Set<Integer> seenIds = seen.stream().map(Node::id).collect(Collectors.toCollection(TreeSet::new));
            if (!seenIds.containsAll(ids)) {
                return Optional.of("describeCluster lists brokers " + seenIds + ", waiting for " + ids);
            }
            if (controller == null || controller.isEmpty()) {
                return Optional.of("describeCluster reports no controller");
            }
            admin.describeLogDirs(ids, new DescribeLogDirsOptions().timeoutMs(timeoutMs)).allDescriptions().get();
            return Optional.empty();
        } catch (ExecutionException e) {
            return Optional.of("admin request failed: " + e.getCause());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while waiting for the cluster", e);
        }
    }

    private static void waitForExitOrPoll(List<NodeProcess> watched) {
        CompletableFuture<?>[] exits = watched.stream().map(NodeProcess::exitFuture).toArray(CompletableFuture[]::new);
        try {
            CompletableFuture.anyOf(exits).get(POLL_MILLIS, TimeUnit.MILLISECONDS);
        } catch (TimeoutException expected) {
            // poll interval elapsed, nobody died
        } catch (ExecutionException ignored) {
            // cannot happen for onExit futures; the liveness check in the loop decides
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while waiting for the cluster", e);
        }
    }

    private static String tails(List<NodeProcess> of) {
        StringBuilder sb = new StringBuilder();
        for (NodeProcess n : of) {
            sb.append(System.lineSeparator()).append("----- last lines of ").append(n.logFile()).append(" -----")
                    .append(System.lineSeparator()).append(n.logTail());
        }
        return sb.toString();
    }

    /** Stops every node: SIGTERM with a shared deadline for persistent clusters, SIGKILL otherwise. */
    private void terminateAll(Duration grace) {
        List<NodeProcess> all = nodes;
        if (config.persistent()) {
            all.forEach(NodeProcess::requestStop);
            long deadline = System.nanoTime() + grace.toNanos();
            for (NodeProcess n : all) {
                n.awaitStopped(Duration.ofNanos(Math.max(0, deadline - System.nanoTime())));
            }
        } else {
            all.forEach(n -> n.process().ifPresent(Process::destroyForcibly));
            all.forEach(NodeProcess::kill); // waits for each exit
        }
    }

    private void onJvmShutdown() {
        // No lock: the main thread may hold it (e.g. waiting for readiness) while the JVM exits.
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        terminateAll(config.shutdownTimeout());
        if (!config.persistent()) {
            deleteNodeData();
        }
    }

    /**
     * The caller closes this cluster from its own shutdown hook, after the processes that use it: the cluster's own hook
     * would otherwise stop the brokers at once, concurrently with the caller's, and every client still closing would
     * then wait out its timeouts (the demo took 10.7 s to stop, its workers halted at their bound, for this).
     */
    public void closedByOwner() {
        unregisterShutdownHook();
    }

    private synchronized void registerShutdownHook() {
        if (!hookRegistered) {
            Runtime.getRuntime().addShutdownHook(shutdownHook);
            hookRegistered = true;
        }
    }

    private void unregisterShutdownHook() {
        if (hookRegistered) {
            try {
                Runtime.getRuntime().removeShutdownHook(shutdownHook);
            } catch (IllegalStateException shuttingDown) {
                // the JVM is exiting and our hook is already running or done
            }
            hookRegistered = false;
        }
    }

    /** Deletes {@code node-*} directories and the layout file; leaves foreign files and the logs alone. */
    private void deleteNodeData() {
        Path dir = config.dataDir();
        if (!Files.isDirectory(dir)) {
            return;
        }
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir, "node-*")) {
            for (Path p : ds) {
                deleteRecursively(p);
            }
            Files.deleteIfExists(dir.resolve(ClusterLayout.FILE_NAME));
        } catch (IOException e) {
            LOG.warn("Could not delete cluster data in {}: {}", dir, e.toString());
        }
    }

    /** Deletes a directory tree (a cluster's data directory, or a work directory holding one); absent is fine. */
    public static void deleteRecursively(Path root) throws IOException {
        if (!Files.exists(root)) {
            return;
        }
        try (Stream<Path> s = Files.walk(root)) {
            for (Path p : s.sorted(Comparator.reverseOrder()).toList()) {
                Files.deleteIfExists(p);
            }
        }
    }

    private static void deleteIfEmpty(Path dir) {
        try {
            Files.deleteIfExists(dir);
        } catch (DirectoryNotEmptyException keep) {
            // holds logs or foreign files: not ours to remove
        } catch (IOException e) {
            LOG.debug("Could not remove {}: {}", dir, e.toString());
        }
    }

    // ------------------------------------------------------------------------------------------ builder

    /**
     * Collects settings for a {@link KraftClusterConfig}. Defaults: 1 node, a fresh temporary data directory,
     * logs in {@code <dataDir>/logs}, not persistent, free ports, {@link KraftClusterConfig#defaultJvmOptions},
     * 60 s startup timeout, 30 s graceful-stop timeout.
     */
    public static final class Builder {
        private int nodes = 1;
        private Path dataDir;
        private Path logsDir;
        private boolean persistent;
        private int brokerPort;
        private final Map<String, String> brokerProperties = new LinkedHashMap<>();
        private List<String> jvmOptions;
        private String cpus;
        private BrokerSecurity security;
        private final Map<Integer, NodeHost> hosts = new java.util.HashMap<>();
        private Duration startupTimeout = Duration.ofSeconds(60);
        private Duration shutdownTimeout = Duration.ofSeconds(30);

        private Builder() {
        }

        public Builder nodes(int nodes) {
            this.nodes = nodes;
            return this;
        }

        public Builder dataDir(Path dataDir) {
            this.dataDir = dataDir;
            return this;
        }

        public Builder logsDir(Path logsDir) {
            this.logsDir = logsDir;
            return this;
        }

        public Builder persistent(boolean persistent) {
            this.persistent = persistent;
            return this;
        }

        /** Fixed client port (single node only); 0, the default, picks a free one. */
        public Builder brokerPort(int brokerPort) {
            this.brokerPort = brokerPort;
            return this;
        }

        public Builder brokerProperty(String key, String value) {
            this.brokerProperties.put(key, value);
            return this;
        }

        public Builder brokerProperties(Map<String, String> properties) {
            this.brokerProperties.putAll(properties);
            return this;
        }

        /** Replaces the default child JVM options. */
        public Builder jvmOptions(List<String> options) {
            this.jvmOptions = List.copyOf(options);
            return this;
        }

        /**
         * Pins each node's JVM to these CPUs (a list as {@code taskset -c} takes it: {@code 0}, {@code 0-1});
         * null, the default, leaves scheduling to the kernel. The node runs under {@code taskset}, so every thread
         * Kafka starts inherits the mask (see {@link KraftClusterConfig}).
         */
        public Builder cpus(String cpus) {
            KraftClusterConfig.checkCpus(cpus);
            this.cpus = cpus;
            return this;
        }

        /**
         * Node {@code id} binds and advertises {@code host}'s addresses and starts under its launcher (a host of its own:
         * {@code ip netns exec}); nodes not named stay on loopback.
         */
        public Builder host(int id, NodeHost host) {
            this.hosts.put(id, host);
            return this;
        }

        /** Secures the client listener: SASL SCRAM-SHA-512 over TLS, ACLs enforced (see {@link BrokerSecurity}). */
        public Builder secured(BrokerSecurity security) {
            this.security = security;
            return this;
        }

        public Builder startupTimeout(Duration timeout) {
            this.startupTimeout = timeout;
            return this;
        }

        public Builder shutdownTimeout(Duration timeout) {
            this.shutdownTimeout = timeout;
            return this;
        }

        /** Validates the settings (see {@link KraftClusterConfig}) and returns an unstarted cluster. */
        public KraftCluster build() {
            Path data = dataDir;
            if (data == null) {
                try {
                    data = Files.createTempDirectory("orbitkv-kraft-");
                } catch (IOException e) {
                    throw new UncheckedIOException("dataDir: cannot create a temporary directory", e);
                }
            }
            Path logs = logsDir != null ? logsDir : data.resolve("logs");
            List<String> jvm = jvmOptions != null ? jvmOptions : KraftClusterConfig.defaultJvmOptions(nodes);
            return new KraftCluster(new KraftClusterConfig(nodes, data, logs, persistent, brokerPort,
                    brokerProperties, jvm, startupTimeout, shutdownTimeout, cpus, security, hosts));
        }
    }
}
