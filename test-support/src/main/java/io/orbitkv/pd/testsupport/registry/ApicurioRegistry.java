package io.orbitkv.pd.testsupport.registry;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.ConnectException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.LocalDateTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A real Apicurio Registry (3.x, Quarkus) in a child JVM, started from the unpacked Maven Central artifact
 * {@code io.apicurio:apicurio-registry-app:<version>:tar.gz:all} with {@code java -jar quarkus-run.jar}.
 *
 * <p>Storage is the distribution's default in-memory H2 database, so every instance starts empty. The HTTP API and
 * the Quarkus management interface are both bound to {@code 127.0.0.1} on free ports (the distribution's defaults
 * are {@code 0.0.0.0:8080} and {@code 0.0.0.0:9000}). Its console output goes to a log file (by default under
 * {@code target/apicurio-logs/}). {@link #start()} returns once {@code GET /apis/ccompat/v7/subjects} answers 200;
 * if the process dies first, or the timeout passes, it fails with the tail of that log.
 *
 * <p>{@link #close()} is idempotent and kills the whole process tree; a JVM shutdown hook does the same if a test
 * run ends without closing it.
 */
public final class ApicurioRegistry implements AutoCloseable {

    /** System property naming the directory the {@code tar.gz} was unpacked into (it holds {@code quarkus-run.jar}). */
    public static final String HOME_PROPERTY = "orbitkv.apicurio.home";

    private static final Logger LOG = LoggerFactory.getLogger(ApicurioRegistry.class);
    private static final String LOOPBACK = "127.0.0.1";
    private static final String READY_PATH = "/apis/ccompat/v7/subjects";
    private static final int LOG_TAIL_LINES = 40;
    private static final int MAX_PORT_ATTEMPTS = 3;

    private final Process process;
    private final int port;
    private final int managementPort;
    private final Path logFile;
    private final Duration startupTime;
    private final Thread shutdownHook;
    private final AtomicBoolean closed = new AtomicBoolean();

    private ApicurioRegistry(Process process, int port, int managementPort, Path logFile, Duration startupTime) {
        this.process = process;
        this.port = port;
        this.managementPort = managementPort;
        this.logFile = logFile;
        this.startupTime = startupTime;
        this.shutdownHook = new Thread(this::killTree, "apicurio-shutdown-" + process.pid());
        Runtime.getRuntime().addShutdownHook(shutdownHook);
    }

    /** A builder with the defaults: home from {@value #HOME_PROPERTY}, 60 s start timeout, logs under target/. */
    public static Builder builder() {
        return new Builder();
    }

    /** Starts a registry from the directory named by {@value #HOME_PROPERTY}, with the builder's defaults. */
    public static ApicurioRegistry start() {
        return builder().start();
    }

    /**
     * The unpacked distribution named by {@value #HOME_PROPERTY}.
     *
     * @throws IllegalStateException naming the property when it is missing or does not hold {@code quarkus-run.jar}
     */
    public static Path homeFromSystemProperty() {
        String value = System.getProperty(HOME_PROPERTY);
        if (value == null || value.isBlank()) {
            throw new IllegalStateException("system property " + HOME_PROPERTY + " is not set: it must name the directory"
                    + " where io.apicurio:apicurio-registry-app:tar.gz:all was unpacked (the one holding quarkus-run.jar);"
                    + " the schemas module's pom unpacks it into target/apicurio in pre-integration-test and passes it"
                    + " to failsafe");
        }
        return checkedHome(Path.of(value), HOME_PROPERTY + "=" + value);
    }

    private static Path checkedHome(Path home, String origin) {
        Path abs = home.toAbsolutePath().normalize();
        if (!Files.isRegularFile(abs.resolve("quarkus-run.jar"))) {
            throw new IllegalStateException(origin + ": no quarkus-run.jar in " + abs
                    + " (unpack io.apicurio:apicurio-registry-app:tar.gz:all there)");
        }
        return abs;
    }

    /** Root URL of the registry's HTTP API, {@code http://127.0.0.1:<port>}. */
    public URI baseUrl() {
        return URI.create("http://" + LOOPBACK + ":" + port);
    }

    /** The Confluent-compatible API, {@code http://127.0.0.1:<port>/apis/ccompat/v7}. */
    public URI ccompatUrl() {
        return URI.create(baseUrl() + "/apis/ccompat/v7");
    }

    /** Apicurio's own REST API (v3), {@code http://127.0.0.1:<port>/apis/registry/v3}. */
    public URI registryV3Url() {
        return URI.create(baseUrl() + "/apis/registry/v3");
    }

    /** The HTTP port (on 127.0.0.1). */
    public int port() {
        return port;
    }

    /** The Quarkus management (health, metrics) port (on 127.0.0.1). */
    public int managementPort() {
        return managementPort;
    }

    /** The file that receives the registry's console output. */
    public Path logFile() {
        return logFile;
    }

    /** From process start until the ccompat API first answered 200. */
    public Duration startupTime() {
        return startupTime;
    }

    /** Process id of the registry JVM. */
    public long pid() {
        return process.pid();
    }

    /** Whether the registry JVM is still alive (false after {@link #close()}). */
    public boolean isRunning() {
        return process.isAlive();
    }

    /** The last {@code lines} lines of the registry log (empty when there is none yet). */
    public String logTail(int lines) {
        return tail(logFile, lines);
    }

    /** Stops the registry and every process it started; idempotent. */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        try {
            Runtime.getRuntime().removeShutdownHook(shutdownHook);
        } catch (IllegalStateException shuttingDown) {
            // The hook is running or about to: it kills the tree itself.
        }
        killTree();
        LOG.info("Apicurio Registry on port {} stopped (log: {})", port, logFile);
    }

    private void killTree() {
        killTree(process, Duration.ofSeconds(10));
    }

    private static void killTree(Process process, Duration grace) {
        List<ProcessHandle> children = new ArrayList<>(process.descendants().toList());
        process.destroy();
        children.forEach(ProcessHandle::destroy);
        try {
            process.onExit().get(grace.toMillis(), TimeUnit.MILLISECONDS);
        } catch (TimeoutException | ExecutionException e) {
            LOG.warn("Apicurio Registry (pid {}) did not stop within {}; killing it", process.pid(), grace);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        children.forEach(ProcessHandle::destroyForcibly);
        if (process.isAlive()) {
            process.destroyForcibly();
            try {
                process.onExit().get(grace.toMillis(), TimeUnit.MILLISECONDS);
            } catch (TimeoutException | ExecutionException e) {
                LOG.error("Apicurio Registry (pid {}) survived SIGKILL for {}", process.pid(), grace);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }

    private static String tail(Path file, int lines) {
        if (file == null || !Files.isRegularFile(file)) {
            return "";
        }
        try {
            List<String> all = Files.readAllLines(file, StandardCharsets.UTF_8);
            return String.join(System.lineSeparator(), all.subList(Math.max(0, all.size() - lines), all.size()));
        } catch (IOException | UncheckedIOException e) {
            return "(cannot read " + file + ": " + e + ")";
        }
    }

    /** Start options. Every setter returns {@code this}. */
    public static final class Builder {
        private Path home;
        private Path logDir = Path.of("target", "apicurio-logs");
        private String name = "apicurio";
        private Duration startTimeout = Duration.ofSeconds(60);
        private String maxHeap = "512m";
        private final List<String> extraProperties = new ArrayList<>();

        private Builder() { }

        /** The unpacked distribution (holding {@code quarkus-run.jar}); default: {@value #HOME_PROPERTY}. */
        public Builder home(Path home) {
            this.home = Objects.requireNonNull(home, "home");
            return this;
        }

        /** Directory for the log file; default {@code target/apicurio-logs}. */
        public Builder logDir(Path logDir) {
            this.logDir = Objects.requireNonNull(logDir, "logDir");
            return this;
        }

        /** Prefix of the log file name, for example the test class. */
        public Builder name(String name) {
            this.name = Objects.requireNonNull(name, "name").replaceAll("[^A-Za-z0-9._-]", "_");
            return this;
        }

        /** How long to wait for the ccompat API to answer; default 60 s. */
        public Builder startTimeout(Duration startTimeout) {
            if (startTimeout.isNegative() || startTimeout.isZero()) {
                throw new IllegalArgumentException("startTimeout must be positive, got " + startTimeout);
            }
            this.startTimeout = startTimeout;
            return this;
        }

        /** {@code -Xmx} of the registry JVM; default {@code 512m}. */
        public Builder maxHeap(String maxHeap) {
            this.maxHeap = Objects.requireNonNull(maxHeap, "maxHeap");
            return this;
        }

        /** An extra {@code -Dkey=value} for the registry (for example an {@code apicurio.*} setting). */
        public Builder property(String key, String value) {
            extraProperties.add("-D" + key + "=" + value);
            return this;
        }

        /**
         * Starts the registry and waits until its ccompat API answers.
         *
         * @throws IllegalStateException when it dies or does not answer in time (the message holds the log tail)
         */
        public ApicurioRegistry start() {
            Path dist = home == null ? homeFromSystemProperty() : checkedHome(home, "Apicurio home");
            Path logs = logDir.toAbsolutePath().normalize();
            try {
                Files.createDirectories(logs);
            } catch (IOException e) {
                throw new UncheckedIOException("creating " + logs, e);
            }
            IllegalStateException portClash = null;
            for (int attempt = 1; attempt <= MAX_PORT_ATTEMPTS; attempt++) {
                try {
                    return startOnce(dist, logs);
                } catch (PortClashException e) {
                    // A free port was taken between probing and binding: try other ports.
                    LOG.warn("Apicurio Registry could not bind its ports (attempt {} of {}): {}", attempt, MAX_PORT_ATTEMPTS, e.getMessage());
                    portClash = e;
                }
            }
            throw portClash;
        }

        private ApicurioRegistry startOnce(Path dist, Path logs) {
            int[] ports = freePorts(2);
            String stamp = LocalDateTime.now().format(DateTimeFormatter.ofPattern("yyyyMMdd-HHmmss-SSS"));
            Path logFile = logs.resolve(name + "-" + stamp + "-" + ports[0] + ".log");
            List<String> cmd = new ArrayList<>();
            cmd.add(javaBinary());
            cmd.add("-Xmx" + maxHeap);
            // Start-up speed over peak throughput: C1 only, one GC thread set, on a small machine.
            cmd.add("-XX:TieredStopAtLevel=1");
            cmd.add("-XX:+UseSerialGC");
            cmd.add("-Dquarkus.http.host=" + LOOPBACK);
            cmd.add("-Dquarkus.http.port=" + ports[0]);
            // quarkus.management.enabled is a build-time property (true in this build): it cannot be switched off
            // at run time, so bind it to loopback on a free port too.
            cmd.add("-Dquarkus.management.host=" + LOOPBACK);
            cmd.add("-Dquarkus.management.port=" + ports[1]);
            // The default storage is SQL on an in-memory H2 database (jdbc:h2:mem:db_<uuid>); make it explicit and
            // shrink the connection pool (20 by default) for a faster start.
            cmd.add("-Dapicurio.storage.kind=sql");
            cmd.add("-Dapicurio.storage.sql.kind=h2");
            cmd.add("-Dapicurio.datasource.jdbc.initial-size=2");
            cmd.add("-Dapicurio.datasource.jdbc.min-size=2");
            cmd.add("-Dquarkus.log.console.color=false");
            cmd.addAll(extraProperties);
            cmd.add("-jar");
            cmd.add(dist.resolve("quarkus-run.jar").toString());

            ProcessBuilder pb = new ProcessBuilder(cmd)
                    .directory(logs.toFile())
                    .redirectErrorStream(true)
                    .redirectOutput(ProcessBuilder.Redirect.to(logFile.toFile()));
            long t0 = System.nanoTime();
            Process process;
            try {
                process = pb.start();
            } catch (IOException e) {
                throw new UncheckedIOException("starting Apicurio Registry: " + String.join(" ", cmd), e);
            }
            LOG.info("Apicurio Registry starting (pid {}) on {}:{} (management {}), log {}", process.pid(), LOOPBACK, ports[0], ports[1], logFile);
            try {
                awaitReady(process, ports[0], logFile, t0);
            } catch (RuntimeException e) {
                killTree(process, Duration.ofSeconds(5));
                throw e;
            }
            Duration took = Duration.ofNanos(System.nanoTime() - t0);
            LOG.info("Apicurio Registry ready in {} ms at http://{}:{}/apis/ccompat/v7", took.toMillis(), LOOPBACK, ports[0]);
            return new ApicurioRegistry(process, ports[0], ports[1], logFile, took);
        }

        private void awaitReady(Process process, int port, Path logFile, long t0) {
            URI probe = URI.create("http://" + LOOPBACK + ":" + port + READY_PATH);
            long deadline = t0 + startTimeout.toNanos();
            Duration poll = Duration.ofMillis(200);
            int lastStatus = -1;
            String lastError = "no answer yet";
            try (HttpClient http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(Duration.ofSeconds(2)).build()) {
                while (true) {
                    if (!process.isAlive()) {
                        String tail = tail(logFile, LOG_TAIL_LINES);
                        String msg = "Apicurio Registry exited with status " + process.exitValue() + " before its ccompat API answered"
                                + " (log " + logFile + "):" + System.lineSeparator() + tail;
                        if (tail.contains("Port already bound") || tail.contains("Address already in use")) {
                            throw new PortClashException(msg);
                        }
                        throw new IllegalStateException(msg);
                    }
                    try {
                        HttpResponse<Void> resp = http.send(HttpRequest.newBuilder(probe).timeout(Duration.ofSeconds(2)).GET().build(),
                                HttpResponse.BodyHandlers.discarding());
                        lastStatus = resp.statusCode();
                        if (lastStatus == 200) {
                            return;
                        }
                        lastError = "HTTP " + lastStatus;
                    } catch (ConnectException e) {
                        lastError = "connection refused";
                    } catch (IOException e) {
                        lastError = e.toString();
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        throw new IllegalStateException("interrupted while waiting for Apicurio Registry to start", e);
                    }
                    long left = deadline - System.nanoTime();
                    if (left <= 0) {
                        throw new IllegalStateException("Apicurio Registry did not answer 200 on " + probe + " within "
                                + startTimeout.toMillis() + " ms (last: " + lastError + "; log " + logFile + "):"
                                + System.lineSeparator() + tail(logFile, LOG_TAIL_LINES));
                    }
                    // Wait for the process to exit or for the next poll, whichever comes first.
                    try {
                        process.onExit().get(Math.min(poll.toNanos(), left), TimeUnit.NANOSECONDS);
                    } catch (TimeoutException stillRunning) {
                        // Expected: poll again.
                    } catch (ExecutionException e) {
                        throw new IllegalStateException("waiting for Apicurio Registry", e);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                        throw new IllegalStateException("interrupted while waiting for Apicurio Registry to start", e);
                    }
                }
            }
        }

        private static String javaBinary() {
            return ProcessHandle.current().info().command()
                    .orElseGet(() -> Path.of(System.getProperty("java.home"), "bin", "java").toString());
        }

        private static int[] freePorts(int n) {
            return io.orbitkv.pd.broker.Ports.free(n).stream().mapToInt(Integer::intValue).toArray();
        }
    }

    /** The registry died because one of its ports was taken after we probed it. */
    private static final class PortClashException extends IllegalStateException {
        PortClashException(String message) {
            super(message);
        }
    }
}
