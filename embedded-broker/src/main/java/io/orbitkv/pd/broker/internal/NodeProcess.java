package io.orbitkv.pd.broker.internal;

import io.orbitkv.pd.broker.LogTail;
import io.orbitkv.pd.broker.Ports;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.time.Instant;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One broker+controller child JVM: its fixed identity (id, ports, directories) and its current process.
 *
 * <p>The identity never changes; the process is replaced on every (re)start. {@link #process} is volatile so
 * that the JVM shutdown hook can see and kill it without taking the cluster's lock.
 */
public final class NodeProcess {

    private static final Logger LOG = LoggerFactory.getLogger(NodeProcess.class);

    /** Child environment variables that would smuggle parent JVM options (agents, debug ports) into it. */
    private static final List<String> STRIPPED_ENV =
            List.of("CLASSPATH", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS");

    private final ClusterLayout.NodePorts ports;
    private final Path nodeDir;
    private final Path logFile;
    private final io.orbitkv.pd.broker.NodeHost host;
    private volatile Process process;

    /**
     * @param ports   the node's id and ports
     * @param nodeDir directory owned by this node: config files plus {@code kafka-logs/}
     * @param logFile file that receives the child's stdout and stderr, appended across restarts
     */
    public NodeProcess(ClusterLayout.NodePorts ports, Path nodeDir, Path logFile, io.orbitkv.pd.broker.NodeHost host) {
        this.ports = ports;
        this.host = host;
        this.nodeDir = nodeDir;
        this.logFile = logFile;
    }

    public int id() {
        return ports.nodeId();
    }

    /** Where this node lives (its addresses and launch prefix). */
    public io.orbitkv.pd.broker.NodeHost host() {
        return host;
    }

    public ClusterLayout.NodePorts ports() {
        return ports;
    }

    public Path nodeDir() {
        return nodeDir;
    }

    public Path logDir() {
        return nodeDir.resolve("kafka-logs");
    }

    public Path serverProperties() {
        return nodeDir.resolve("server.properties");
    }

    public Path logFile() {
        return logFile;
    }

    public String brokerAddress() {
        return host.advertised() + ":" + ports.brokerPort();
    }

    public boolean isAlive() {
        Process p = process;
        return p != null && p.isAlive();
    }

    /** The current process, if one was ever started (it may have exited). */
    public Optional<Process> process() {
        return Optional.ofNullable(process);
    }

    /** Completes with the exit code of the current process; an already-completed future if none runs. */
    public CompletableFuture<Integer> exitFuture() {
        Process p = process;
        return p == null ? CompletableFuture.completedFuture(-1) : p.onExit().thenApply(Process::exitValue);
    }

    /**
     * Launches the child. The caller has written {@code server.properties} and the logging configs.
     *
     * @param command full command line, {@code java} first
     */
    public synchronized void launch(List<String> command) throws IOException {
        if (isAlive()) {
            throw new IllegalStateException("node " + id() + ": already running as pid " + process.pid());
        }
        Files.createDirectories(logFile.getParent());
        // A header per start makes restarts visible when reading the appended log.
        Files.writeString(logFile, "%n===== %s node %d starting: %s%n".formatted(
                        Instant.now(), id(), String.join(" ", command)),
                StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
        ProcessBuilder pb = new ProcessBuilder(command)
                .directory(nodeDir.toFile())
                .redirectErrorStream(true)
                .redirectOutput(ProcessBuilder.Redirect.appendTo(logFile.toFile()))
                .redirectInput(ProcessBuilder.Redirect.PIPE);
        Map<String, String> env = pb.environment();
        STRIPPED_ENV.forEach(env::remove);
        process = pb.start();
        // Nothing is ever written to stdin; closing it now means the child never blocks on it.
        process.getOutputStream().close();
        LOG.info("Node {} started as pid {} (broker {}, controller port {}, log {})",
                id(), process.pid(), brokerAddress(), ports.controllerPort(), logFile);
    }

    /** SIGKILL and wait for the exit; no cleanup runs in the child. */
    public void kill() {
        Process p = process;
        if (p == null) {
            return;
        }
        p.destroyForcibly();
        awaitExit(p, Duration.ofSeconds(30));
    }

    /** Sends SIGTERM without waiting; pair with {@link #awaitStopped}. */
    public void requestStop() {
        Process p = process;
        if (p != null && p.isAlive()) {
            p.destroy();
        }
    }

    /**
     * Waits for the process to exit after {@link #requestStop}; SIGKILLs it if {@code grace} runs out.
     *
     * @return true if it exited on its own within {@code grace}
     */
    public boolean awaitStopped(Duration grace) {
        Process p = process;
        if (p == null) {
            return true;
        }
        if (awaitExit(p, grace)) {
            return true;
        }
        LOG.warn("Node {} (pid {}) did not stop within {}; killing it", id(), p.pid(), grace);
        p.destroyForcibly();
        awaitExit(p, Duration.ofSeconds(30));
        return false;
    }

    private static boolean awaitExit(Process p, Duration timeout) {
        try {
            return p.waitFor(Math.max(0, timeout.toMillis()), TimeUnit.MILLISECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return !p.isAlive();
        }
    }

    /** Writes all of the node's files other than logging configs; creates its directories. */
    public void writeServerProperties(Map<String, String> props) {
        try {
            Files.createDirectories(logDir());
            PropertiesFiles.write(serverProperties(),
                    "Generated by OrbitKV KraftCluster for node " + id() + "; rewritten on every start", props);
        } catch (IOException e) {
            throw new UncheckedIOException("node " + id() + ": cannot write " + serverProperties(), e);
        }
    }

    /** Last lines of the node's log, for error messages. */
    public String logTail() {
        return LogTail.of(logFile, 40);
    }
}
