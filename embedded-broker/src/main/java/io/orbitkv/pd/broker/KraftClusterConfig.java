package io.orbitkv.pd.broker;

import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * Immutable, validated description of a {@link KraftCluster}. Usually built through {@link KraftCluster#builder()}.
 *
 * @param nodes            number of combined broker+controller nodes, 1..9 (node ids are 1..nodes); 1 for
 *                         ordinary tests, 3 for fault tests
 * @param dataDir          directory owned by the cluster: one {@code node-<id>/} per node plus a layout file
 * @param logsDir          directory receiving one {@code node-<id>.log} per node (appended across restarts;
 *                         never deleted by the cluster)
 * @param persistent       keep data across {@link KraftCluster#close()} and reuse it (and its ports) on the
 *                         next start; when false, data is wiped at start and deleted at close
 * @param brokerPort       fixed client port for a single-node cluster, or 0 to pick a free port
 * @param brokerProperties extra {@code server.properties} entries, applied over the defaults; the keys in
 *                         {@link #MANAGED_PROPERTIES} are reserved because the harness depends on them
 * @param jvmOptions       options for each child JVM (heap, GC); see {@link #defaultJvmOptions(int)}
 * @param startupTimeout   how long {@code start()} and {@code restartNode} wait for readiness
 * @param shutdownTimeout  how long a graceful stop waits before the child is killed
 * @param cpus             the CPUs each node's JVM runs on, as {@code taskset -c} takes them ({@code 0}, {@code 0-1},
 *                         {@code 0,2}); null leaves scheduling to the kernel. The node is started under
 *                         {@code taskset}, so every thread it ever starts inherits the mask.
 * @param security         null for plaintext without authorization (the default); else SASL over TLS with ACLs
 */
public record KraftClusterConfig(
        int nodes,
        Path dataDir,
        Path logsDir,
        boolean persistent,
        int brokerPort,
        Map<String, String> brokerProperties,
        List<String> jvmOptions,
        Duration startupTimeout,
        Duration shutdownTimeout,
        String cpus,
        BrokerSecurity security,
        Map<Integer, NodeHost> hosts) {

    /** Every node on loopback. */
    public KraftClusterConfig(int nodes, Path dataDir, Path logsDir, boolean persistent, int brokerPort, Map<String, String> brokerProperties,
                              List<String> jvmOptions, Duration startupTimeout, Duration shutdownTimeout, String cpus, BrokerSecurity security) {
        this(nodes, dataDir, logsDir, persistent, brokerPort, brokerProperties, jvmOptions, startupTimeout, shutdownTimeout, cpus, security, Map.of());
    }

    /** Where node {@code id} lives ({@link NodeHost#LOOPBACK} unless set). */
    public NodeHost host(int id) {
        return hosts.getOrDefault(id, NodeHost.LOOPBACK);
    }

    /** @throws IllegalArgumentException when {@code cpus} is neither null nor a CPU list as {@code taskset -c} takes it */
    static void checkCpus(String cpus) {
        if (cpus != null && !CPU_LIST.matcher(cpus).matches()) {
            throw new IllegalArgumentException("cpus: '" + cpus + "' is not a CPU list as taskset -c takes it (e.g. 0, 0-1, 0,2)");
        }
    }

    /** Largest supported quorum; beyond this a static voter set on loopback stops making sense. */
    public static final int MAX_NODES = 9;

    /** {@code server.properties} keys that identify nodes, listeners and storage; owned by {@link KraftCluster}. */
    public static final Set<String> MANAGED_PROPERTIES = Set.of(
            "node.id", "broker.id", "process.roles", "listeners", "advertised.listeners",
            "listener.security.protocol.map", "inter.broker.listener.name", "controller.listener.names",
            "controller.quorum.voters", "controller.quorum.bootstrap.servers",
            "log.dirs", "log.dir", "metadata.log.dir");

    private static final java.util.regex.Pattern CPU_LIST = java.util.regex.Pattern.compile("\\d+(-\\d+)?(,\\d+(-\\d+)?)*");

    public KraftClusterConfig {
        checkCpus(cpus);
        if (nodes < 1 || nodes > MAX_NODES) {
            throw new IllegalArgumentException("nodes: must be in 1.." + MAX_NODES + ", got " + nodes);
        }
        if (dataDir == null) {
            throw new IllegalArgumentException("dataDir: must not be null");
        }
        if (logsDir == null) {
            throw new IllegalArgumentException("logsDir: must not be null");
        }
        dataDir = dataDir.toAbsolutePath().normalize();
        logsDir = logsDir.toAbsolutePath().normalize();
        if (brokerPort < 0 || brokerPort > 65_535) {
            throw new IllegalArgumentException("brokerPort: must be 0 (free) or in 1..65535, got " + brokerPort);
        }
        if (brokerPort != 0 && nodes != 1) {
            throw new IllegalArgumentException("brokerPort: a fixed port needs nodes=1, got nodes=" + nodes);
        }
        if (brokerProperties == null) {
            throw new IllegalArgumentException("brokerProperties: must not be null");
        }
        for (Map.Entry<String, String> e : brokerProperties.entrySet()) {
            if (e.getKey() == null || e.getKey().isBlank()) {
                throw new IllegalArgumentException("brokerProperties: keys must not be blank");
            }
            if (e.getValue() == null) {
                throw new IllegalArgumentException("brokerProperties: value of '" + e.getKey() + "' is null");
            }
            if (MANAGED_PROPERTIES.contains(e.getKey().strip())) {
                throw new IllegalArgumentException(
                        "brokerProperties: '" + e.getKey() + "' is managed by KraftCluster and cannot be set");
            }
        }
        brokerProperties = Map.copyOf(brokerProperties);
        if (jvmOptions == null) {
            throw new IllegalArgumentException("jvmOptions: must not be null");
        }
        jvmOptions = List.copyOf(jvmOptions);
        for (String o : jvmOptions) {
            if (o.isBlank()) {
                throw new IllegalArgumentException("jvmOptions: entries must not be blank");
            }
        }
        if (startupTimeout == null || startupTimeout.isNegative() || startupTimeout.isZero()) {
            throw new IllegalArgumentException("startupTimeout: must be positive, got " + startupTimeout);
        }
        if (shutdownTimeout == null || shutdownTimeout.isNegative()) {
            throw new IllegalArgumentException("shutdownTimeout: must be >= 0, got " + shutdownTimeout);
        }
        hosts = hosts == null ? Map.of() : Map.copyOf(hosts);
        for (Integer id : hosts.keySet()) {
            if (id < 1 || id > nodes) {
                throw new IllegalArgumentException("hosts: node " + id + " is not one of 1.." + nodes);
            }
        }
    }

    /**
     * Child JVM options sized for a 2-core machine: a small heap (512 MiB alone, 384 MiB each when several
     * share the machine), G1 with short pauses so replication and heartbeats are not starved, C1-only JIT
     * because brokers in tests live for seconds and C2 compilation would compete for the cores during
     * startup, and exit on OOM so a broken node fails visibly instead of limping.
     */
    public static List<String> defaultJvmOptions(int nodes) {
        return List.of(
                nodes == 1 ? "-Xmx512m" : "-Xmx384m",
                "-XX:+UseG1GC",
                "-XX:MaxGCPauseMillis=5",
                "-XX:TieredStopAtLevel=1",
                "-XX:+ExitOnOutOfMemoryError",
                "-Djava.awt.headless=true",
                // JNI compression codecs (zstd, snappy) would otherwise print restricted-method warnings.
                "--enable-native-access=ALL-UNNAMED");
    }
}
