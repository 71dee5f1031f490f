package io.orbitkv.pd.worker;

import io.orbitkv.pd.broker.ChildClasspath;
import io.orbitkv.pd.broker.LogTail;
import java.io.IOException;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.TimeUnit;

/**
 * A transfer worker in its own JVM, launched from this JVM's class path (expanded by {@link ChildClasspath}, as the
 * embedded broker does) through {@link WorkerMain}. It exits by itself when this JVM dies.
 */
final class WorkerProcess implements AutoCloseable {

    private final String name;
    private final Path dir;
    private final Path config;
    private final Path ready;
    private final Path log;
    private Process process;

    private WorkerProcess(String name, Path dir) {
        this.name = name;
        this.dir = dir;
        this.config = dir.resolve(name + ".properties");
        this.ready = dir.resolve(name + ".ready");
        this.log = dir.resolve(name + ".log");
    }

    static WorkerProcess start(Path dir, String name, Map<String, String> settings) throws IOException {
        WorkerProcess w = new WorkerProcess(name, dir);
        Properties p = new Properties();
        p.putAll(settings);
        try (Writer out = Files.newBufferedWriter(w.config, StandardCharsets.UTF_8)) {
            p.store(out, "worker " + name);
        }
        w.launch();
        return w;
    }

    void launch() throws IOException {
        Files.deleteIfExists(ready);
        String cp = ChildClasspath.join(ChildClasspath.current());
        Path argfile = dir.resolve(name + ".classpath.args");
        Files.writeString(argfile, "-cp\n\"" + cp.replace("\\", "\\\\").replace("\"", "\\\"") + "\"\n", StandardCharsets.UTF_8);
        List<String> cmd = new ArrayList<>(List.of(ProcessHandle.current().info().command().orElse(
                        Path.of(System.getProperty("java.home"), "bin", "java").toString()),
                "-Xmx256m", "-XX:+UseG1GC", "--enable-native-access=ALL-UNNAMED",
                "-D" + io.orbitkv.pd.runtime.ParentWatch.PROPERTY + "=" + ProcessHandle.current().pid(), "-Dorbitkv.worker.name=" + name,
                "@" + argfile, WorkerMain.class.getName(), "--config", config.toString(), "--ready-file", ready.toString()));
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.appendTo(log.toFile()));
        for (String v : List.of("CLASSPATH", "JAVA_TOOL_OPTIONS", "JDK_JAVA_OPTIONS", "_JAVA_OPTIONS")) {
            pb.environment().remove(v);
        }
        process = pb.start();
        process.getOutputStream().close();
    }

    /** True once the worker takes orders; fails at once with its log if it died. */
    boolean isReady() {
        if (!process.isAlive()) {
            throw new AssertionError("worker " + name + " exited with " + process.exitValue() + ":\n" + LogTail.of(log, 60));
        }
        return Files.exists(ready);
    }

    Properties readyInfo() throws IOException {
        Properties p = new Properties();
        try (var r = Files.newBufferedReader(ready)) {
            p.load(r);
        }
        return p;
    }

    String tcpAddress() throws IOException {
        return readyInfo().getProperty("tcp");
    }

    /** SIGKILL: no shutdown hook, no deregistration, sockets reset by the kernel. */
    void kill() throws InterruptedException {
        process.destroyForcibly();
        process.waitFor(30, TimeUnit.SECONDS);
    }

    String logTail() {
        return LogTail.of(log, 80);
    }

    boolean isAlive() {
        return process.isAlive();
    }

    /** SIGTERM (the worker deregisters), SIGKILL if it does not exit within 15 s. */
    @Override
    public void close() {
        if (process == null || !process.isAlive()) {
            return;
        }
        process.destroy();
        try {
            if (!process.waitFor(Duration.ofSeconds(15).toMillis(), TimeUnit.MILLISECONDS)) {
                process.destroyForcibly();
                process.waitFor(30, TimeUnit.SECONDS);
            }
        } catch (InterruptedException e) {
            process.destroyForcibly();
            Thread.currentThread().interrupt();
        }
    }
}
