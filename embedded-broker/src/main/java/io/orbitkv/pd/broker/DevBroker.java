package io.orbitkv.pd.broker;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A single-node KRaft broker for local development ({@code ./orbitkv-pd broker}): persistent data, fixed
 * client port, runs in the foreground until interrupted.
 *
 * <h2>Ports</h2>
 * The client listener is {@code 127.0.0.1:<port>} (default {@value #DEFAULT_PORT}), or any address given as a
 * {@link NodeHost} (bind and advertised apart: {@code --host 0.0.0.0 --advertised-host 10.0.0.5}). The KRaft controller
 * listener gets a free port on first start, which is recorded in the data directory
 * ({@code orbitkv-kraft-cluster.properties}) and reused on every later start, because the static voter set
 * stored with the metadata names it. Choosing {@code port+1} instead was rejected: 9093 is the controller port
 * of a stock Kafka install and often taken. Restarting with a different {@code port} is allowed; only the
 * client address changes.
 *
 * <h2>Ownership</h2>
 * {@code dataDir} belongs to the broker and is never deleted; the node log goes to
 * {@code logsDir/node-1.log}. Only one broker may use a data directory at a time: a second start fails fast
 * because the recorded controller port is in use.
 */
public final class DevBroker {

    public static final int DEFAULT_PORT = 9092;

    /** Default data directory, relative to the working directory (git-ignored in this repository). */
    public static final Path DEFAULT_DATA_DIR = Path.of(".orbitkv", "broker");

    /** JVM exit codes after SIGINT/SIGTERM (128 + signal number). */
    private static final int EXIT_SIGINT = 130;
    private static final int EXIT_SIGTERM = 143;

    private static final Logger LOG = LoggerFactory.getLogger(DevBroker.class);

    private DevBroker() {
    }

    /** {@link #run(Path, int, Path, Map)} with logs in {@code dataDir/logs} and no extra broker properties. */
    public static void run(Path dataDir, int port) throws InterruptedException {
        run(dataDir, port, dataDir.resolve("logs"), Map.of());
    }

    /**
     * Starts the broker and blocks until the calling thread is interrupted (the broker is then stopped
     * gracefully and {@link InterruptedException} is rethrown) or the JVM shuts down (Ctrl-C: the cluster's
     * shutdown hook stops the broker). If the broker process dies on its own, this throws.
     *
     * @param dataDir          persistent data directory, created if missing
     * @param port             client port on 127.0.0.1
     * @param logsDir          directory for {@code node-1.log}
     * @param brokerProperties extra {@code server.properties} entries (e.g. retention), may be empty
     * @throws IllegalStateException if the broker cannot start or exits unexpectedly; the message holds the
     *                               tail of its log
     */
    public static void run(Path dataDir, int port, Path logsDir, Map<String, String> brokerProperties)
            throws InterruptedException {
        run(dataDir, port, logsDir, brokerProperties, null);
    }

    /** As {@link #run(Path, int, Path, Map)}, secured by {@code security} when it is not null. */
    public static void run(Path dataDir, int port, Path logsDir, Map<String, String> brokerProperties, BrokerSecurity security)
            throws InterruptedException {
        run(dataDir, port, logsDir, brokerProperties, security, NodeHost.LOOPBACK);
    }

    /**
     * As {@link #run(Path, int, Path, Map, BrokerSecurity)}, the listeners bound to {@code host.bind()} and clients told
     * {@code host.advertised()}: a broker other machines reach (docs/deploy.md, "Addresses").
     */
    public static void run(Path dataDir, int port, Path logsDir, Map<String, String> brokerProperties, BrokerSecurity security, NodeHost host)
            throws InterruptedException {
        try (KraftCluster cluster = KraftCluster.builder()
                .host(1, host)
                .nodes(1)
                .dataDir(dataDir)
                .logsDir(logsDir)
                .persistent(true)
                .brokerPort(port)
                .brokerProperties(brokerProperties)
                // A person may be watching: give a clean shutdown more room than tests do.
                .shutdownTimeout(Duration.ofSeconds(60))
                .secured(security)
                .build()
                .start()) {
            LOG.info("OrbitKV dev broker ready: bootstrap.servers={} (data {}, log {})",
                    cluster.bootstrapServers(), cluster.dataDir(), cluster.logFile(1));
            int code = cluster.awaitNodeExit(1);
            if (cluster.isClosed() || code == EXIT_SIGINT || code == EXIT_SIGTERM) {
                // Ctrl-C reaches the broker (same process group) and our shutdown hook; both are deliberate.
                LOG.info("Dev broker stopped (exit code {})", code);
                return;
            }
            throw new IllegalStateException("dev broker exited with code " + code + "; see " + cluster.logFile(1));
        }
    }

    /**
     * The secured development broker's material in {@code dataDir}, made on the first secured start and kept (the super
     * user's credential is written once, when the storage is formatted): a CA and the broker's certificate under
     * {@code tls/}, and {@code admin.properties} (owner-only) holding {@code bootstrap.servers} and the admin's connection
     * as {@code kafka.*} keys, ready for {@code ./orbitkv-pd acls --config} and {@code topics --config}.
     */
    public static BrokerSecurity securedMaterial(Path dataDir, int port) {
        return securedMaterial(dataDir, port, NodeHost.LOOPBACK);
    }

    /** As {@link #securedMaterial(Path, int)}, the certificate also valid for {@code host}'s advertised address. */
    public static BrokerSecurity securedMaterial(Path dataDir, int port, NodeHost host) {
        try {
            Files.createDirectories(dataDir);
            Path props = dataDir.resolve("admin.properties");
            String storePassword;
            String adminPassword;
            if (Files.exists(props)) {
                java.util.Properties p = new java.util.Properties();
                try (var in = Files.newInputStream(props)) {
                    p.load(in);
                }
                storePassword = p.getProperty("kafka.ssl.truststore.password");
                String jaas = p.getProperty("kafka.sasl.jaas.config", "");
                adminPassword = jaas.replaceAll(".*password=\"([^\"]*)\".*", "$1");
                return new BrokerSecurity(new TlsMaterial(dataDir.resolve("tls"), storePassword, dataDir.resolve("tls/truststore.p12"),
                        dataDir.resolve("tls/broker.p12")), "admin", adminPassword);
            }
            java.security.SecureRandom r = new java.security.SecureRandom();
            storePassword = java.util.HexFormat.of().formatHex(r.generateSeed(12));
            adminPassword = java.util.HexFormat.of().formatHex(r.generateSeed(12));
            BrokerSecurity security = new BrokerSecurity(TlsMaterial.generate(dataDir.resolve("tls"), storePassword, List.of(host.advertised())), "admin", adminPassword);
            StringBuilder b = new StringBuilder("# The development broker's super user: for ./orbitkv-pd acls --config and topics --config\n");
            b.append("bootstrap.servers=").append(host.advertised()).append(':').append(port).append('\n');
            security.adminClientConfig().forEach((k, v) -> b.append("kafka.").append(k).append('=').append(v).append('\n'));
            Files.writeString(props, b.toString());
            Files.setPosixFilePermissions(props, java.nio.file.attribute.PosixFilePermissions.fromString("rw-------"));
            return security;
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException("cannot write the secured broker's material to " + dataDir + ": " + e.getMessage(), e);
        }
    }

    /**
     * Command line: {@code DevBroker [dataDir] [port]}.
     */
    public static void main(String[] args) throws InterruptedException {
        Path dataDir = args.length > 0 ? Path.of(args[0]) : DEFAULT_DATA_DIR;
        int port = args.length > 1 ? Integer.parseInt(args[1]) : DEFAULT_PORT;
        run(dataDir, port);
    }
}
