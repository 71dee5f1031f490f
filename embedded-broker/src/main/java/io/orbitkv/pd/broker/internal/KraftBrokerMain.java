package io.orbitkv.pd.broker.internal;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Optional;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Entry point of one broker child JVM started by {@code KraftCluster}: formats the node's storage on first
 * start, then hands over to {@code kafka.Kafka.main}, which runs until SIGTERM (graceful) or SIGKILL.
 *
 * <p>Arguments: {@code <server.properties> <cluster-id>}. System property {@value #PARENT_PID_PROPERTY}, when
 * set, names the parent JVM; if that process disappears (even by SIGKILL, when its shutdown hook cannot run)
 * this JVM shuts itself down, so brokers never outlive the test or CLI that started them.
 *
 * <p>Not public API: the command line contract is owned by {@code KraftCluster}.
 */
public final class KraftBrokerMain {

    public static final String PARENT_PID_PROPERTY = "orbitkv.broker.parentPid";

    /** When set, a file holding a {@code kafka-storage format --add-scram} argument (a secured cluster's super user). */
    public static final String SCRAM_FILE_PROPERTY = "orbitkv.broker.scramFile";

    /** Exit code when formatting fails, distinct from Kafka's own 1. */
    public static final int EXIT_FORMAT_FAILED = 3;

    /** Time Kafka's shutdown hook gets after an orphaning before we halt; a lone quorum member can hang. */
    private static final long ORPHAN_HALT_SECONDS = 20;

    private static final Logger LOG = LoggerFactory.getLogger(KraftBrokerMain.class);

    private KraftBrokerMain() {
    }

    public static void main(String[] args) {
        if (args.length != 2) {
            LOG.error("usage: KraftBrokerMain <server.properties> <cluster-id>, got {}", Arrays.toString(args));
            System.exit(2);
        }
        Path serverProperties = Path.of(args[0]).toAbsolutePath();
        String clusterId = args[1];
        watchParent();
        try {
            formatIfNeeded(serverProperties, clusterId);
        } catch (Exception | LinkageError e) {
            LOG.error("Formatting storage for {} failed", serverProperties, e);
            System.exit(EXIT_FORMAT_FAILED);
        }
        LOG.info("Starting Kafka with {}", serverProperties);
        // Blocks until shutdown and calls System.exit itself.
        kafka.Kafka.main(new String[] {serverProperties.toString()});
    }

    /**
     * Formats every {@code log.dirs} entry unless all of them already hold a {@code meta.properties}: a
     * persistent data directory must be formatted exactly once, re-formatting would be refused anyway but
     * the check keeps restarts free of the storage tool's noise.
     */
    static void formatIfNeeded(Path serverProperties, String clusterId) throws IOException {
        Properties props = PropertiesFiles.read(serverProperties);
        String dirs = Optional.ofNullable(props.getProperty("log.dirs")).orElse(props.getProperty("log.dir"));
        if (dirs == null || dirs.isBlank()) {
            throw new IllegalArgumentException("log.dirs: missing in " + serverProperties);
        }
        List<Path> logDirs = Arrays.stream(dirs.split(",")).map(String::strip).map(Path::of).toList();
        if (logDirs.stream().allMatch(d -> Files.isRegularFile(d.resolve("meta.properties")))) {
            LOG.info("Storage in {} already formatted", logDirs);
            return;
        }
        LOG.info("Formatting storage {} with cluster id {}", logDirs, clusterId);
        // StorageTool.execute, unlike main, returns a status instead of calling exit. --ignore-formatted makes
        // a half-formatted multi-dir layout (crash during a previous format) recoverable. Its report goes to this
        // child's stdout, which KraftCluster redirects into the node's log file.
        PrintStream out = System.out;
        List<String> args = new ArrayList<>(List.of("format", "--cluster-id", clusterId, "--config", serverProperties.toString(),
                "--ignore-formatted"));
        String scram = System.getProperty(SCRAM_FILE_PROPERTY);
        if (scram != null) {
            args.addAll(List.of("--add-scram", Files.readString(Path.of(scram)).strip()));
        }
        int rc = kafka.tools.StorageTool.execute(args.toArray(String[]::new), out);
        out.flush();
        if (rc != 0) {
            throw new IllegalStateException("kafka-storage format exited with " + rc);
        }
    }

    private static void watchParent() {
        String pid = System.getProperty(PARENT_PID_PROPERTY);
        if (pid == null || pid.isBlank()) {
            return;
        }
        Optional<ProcessHandle> parent = ProcessHandle.of(Long.parseLong(pid.strip()));
        if (parent.isEmpty()) {
            LOG.error("Parent process {} is already gone; not starting", pid);
            System.exit(2);
        }
        parent.get().onExit().thenRun(() -> {
            LOG.warn("Parent process {} exited; shutting this broker down", pid);
            Thread halter = Thread.ofPlatform().daemon().name("orphan-halt").unstarted(() -> {
                try {
                    TimeUnit.SECONDS.sleep(ORPHAN_HALT_SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                Runtime.getRuntime().halt(4);
            });
            halter.start();
            // System.exit runs Kafka's shutdown hook (clean log close); it blocks, so not on the reaper thread.
            Thread.ofPlatform().name("orphan-exit").start(() -> System.exit(0));
        });
    }
}
