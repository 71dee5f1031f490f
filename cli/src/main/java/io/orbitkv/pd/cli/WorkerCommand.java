package io.orbitkv.pd.cli;

import io.orbitkv.pd.schemas.config.ConfigProps;
import io.orbitkv.pd.worker.WorkerApp;
import io.orbitkv.pd.worker.WorkerConfig;
import io.orbitkv.pd.worker.WorkerHttpConfig;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code orbitkv-pd worker}: runs the transfer worker of one engine (the sidecar that moves its KV bytes), or the
 * workers of several engines of one node in one process (one {@code --config} each): the {@code cuda} transport
 * copies between pools that one process mapped, so engines that hand off over {@code cuda} share a node worker.
 */
@Command(name = "worker", mixinStandardHelpOptions = true,
        header = "Runs one engine's transfer worker: executes its orders and receives pushes into its KV pool.",
        description = {"Runs the transfer worker of one engine: executes the transfer orders routed to the engine on",
                "orbitkv.engine-commands, receives pushes into the engine's KV pool (token, epochs and bounds checked before any",
                "byte lands), and reports TransferStarted/Completed/Failed. Several --config files: the workers of several engines",
                "of one node in one process (needed for the cuda transport between them). Keys and defaults: docs/worker.md."})
final class WorkerCommand implements Callable<Integer> {

    @Option(names = "--config", description = "Properties file (bootstrap.servers, worker.*, transfer.*, topics.*, serde.*, auth.key, kafka.*);"
            + " repeat it for the workers of several engines in this process.")
    List<Path> configs = new ArrayList<>();

    @Option(names = "--bootstrap", description = "Kafka bootstrap servers (overrides bootstrap.servers).")
    String bootstrap;

    @Option(names = "--engine", description = "The engine this worker serves (overrides worker.engine.id; one --config only).")
    String engine;

    @picocli.CommandLine.Spec
    picocli.CommandLine.Model.CommandSpec spec;

    @Override
    public Integer call() throws Exception {
        if (engine != null && configs.size() > 1) {
            throw new picocli.CommandLine.ParameterException(spec.commandLine(), "--engine: names the engine of one worker; with several --config"
                    + " files each file names its own (worker.engine.id)");
        }
        List<Path> files = configs.isEmpty() ? java.util.Collections.singletonList(null) : configs;
        List<WorkerApp> apps = new ArrayList<>();
        // Every configuration is read and checked before any worker starts: a typo in the second stops none half-way.
        List<WorkerConfig> cfgs = new ArrayList<>();
        List<WorkerHttpConfig> https = new ArrayList<>();
        for (Path f : files) {
            ConfigProps props = ConfigProps.loadOrEmpty(f);
            props.override("bootstrap.servers", bootstrap);
            props.override("worker.engine.id", engine);
            cfgs.add(WorkerConfig.from(props));
            https.add(WorkerHttpConfig.from(props));
            props.requireAllKeysUsed("docs/worker.md");
        }
        if (cfgs.stream().map(WorkerConfig::engineId).distinct().count() < cfgs.size()) {
            throw new picocli.CommandLine.ParameterException(spec.commandLine(), "--config: two files name the same engine (worker.engine.id)");
        }
        io.orbitkv.pd.runtime.ShutdownBound.install("worker", () -> apps.forEach(WorkerApp::close));
        for (int i = 0; i < cfgs.size(); i++) {
            WorkerConfig cfg = cfgs.get(i);
            WorkerApp app = new WorkerApp(cfg, https.get(i));
            apps.add(app);
            app.start();
            System.out.println("worker running: engine=" + cfg.engineId() + " instance-epoch=" + cfg.instanceEpoch() + " transports=" + cfg.transports()
                    + app.tcpAddress().map(a -> " tcp=" + a).orElse("") + app.httpAddress().map(a -> " metrics=http://" + a + "/metrics").orElse("")
                    + " pool=" + app.pool());
        }
        for (WorkerApp app : apps) {
            app.awaitClose();
        }
        return 0;
    }
}
