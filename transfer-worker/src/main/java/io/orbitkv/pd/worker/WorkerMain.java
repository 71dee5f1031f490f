package io.orbitkv.pd.worker;

import io.orbitkv.pd.runtime.ParentWatch;
import io.orbitkv.pd.runtime.ShutdownBound;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;

/**
 * Plain entry point of a worker process: {@code WorkerMain --config FILE [--ready-file FILE]}. The CLI's
 * {@code orbitkv-pd worker} does the same through picocli; this one has no dependencies beyond the module, so
 * tests can start workers as child JVMs from the test class path.
 *
 * <p>{@code --ready-file} is written (atomically) once the worker takes orders: {@code tcp=host:port},
 * {@code instance-epoch=N}, {@code pid=N}. With {@code -Dorbitkv.parentPid=PID} ({@link ParentWatch}) the worker exits when that
 * process is gone, so a killed test JVM leaves no worker behind.
 */
public final class WorkerMain {

    private WorkerMain() { }

    public static void main(String[] args) throws Exception {
        Path config = null;
        Path ready = null;
        for (int i = 0; i < args.length; i++) {
            switch (args[i]) {
                case "--config" -> config = Path.of(args[++i]);
                case "--ready-file" -> ready = Path.of(args[++i]);
                default -> {
                    System.err.println("usage: WorkerMain --config FILE [--ready-file FILE]; unknown argument " + args[i]);
                    System.exit(2);
                }
            }
        }
        if (config == null) {
            System.err.println("usage: WorkerMain --config FILE [--ready-file FILE]");
            System.exit(2);
        }
        WorkerConfig cfg;
        WorkerHttpConfig httpCfg;
        try {
            ConfigProps props = ConfigProps.load(config);
            cfg = WorkerConfig.from(props);
            httpCfg = WorkerHttpConfig.from(props);
            props.requireAllKeysUsed("docs/worker.md");
        } catch (IllegalArgumentException e) {
            System.err.println("worker: " + e.getMessage());
            System.exit(2);
            return;
        }
        ParentWatch.install();
        WorkerApp app = new WorkerApp(cfg, httpCfg);
        ShutdownBound.install("worker", app::close);
        app.start();
        if (ready != null) {
            writeReady(ready, app);
        }
        app.awaitClose();
    }

    static void writeReady(Path ready, WorkerApp app) throws IOException {
        String text = "tcp=" + app.tcpAddress().orElse("") + "\ninstance-epoch=" + app.config().instanceEpoch() + "\npid=" + ProcessHandle.current().pid()
                + "\n";
        Path tmp = ready.resolveSibling(ready.getFileName() + ".tmp");
        Files.writeString(tmp, text, StandardCharsets.UTF_8);
        Files.move(tmp, ready, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
    }
}
