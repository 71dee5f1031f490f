package io.orbitkv.pd.cli;

import io.orbitkv.pd.schemas.config.ConfigProps;
import io.orbitkv.pd.worker.WorkerApp;
import io.orbitkv.pd.worker.WorkerConfig;
import io.orbitkv.pd.worker.WorkerHttpConfig;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/** {@code orbitkv-pd worker}: runs the transfer worker of one engine (the sidecar that moves its KV bytes). */
@Command(name = "worker", mixinStandardHelpOptions = true,
        description = {"Runs the transfer worker of one engine: executes the transfer orders routed to the engine on",
                "orbitkv.engine-commands, receives pushes into the engine's KV pool over tcp (token, epochs and bounds checked",
                "before any byte lands), and reports TransferStarted/Completed/Failed. Keys and defaults: docs/worker.md."})
final class WorkerCommand implements Callable<Integer> {

    @Option(names = "--config", description = "Properties file (bootstrap.servers, worker.*, transfer.tcp.*, topics.*, serde.*, auth.key, kafka.*).")
    Path config;

    @Option(names = "--bootstrap", description = "Kafka bootstrap servers (overrides bootstrap.servers).")
    String bootstrap;

    @Option(names = "--engine", description = "The engine this worker serves (overrides worker.engine.id).")
    String engine;

    @Override
    public Integer call() throws Exception {
        ConfigProps props = ConfigProps.loadOrEmpty(config);
        props.override("bootstrap.servers", bootstrap);
        props.override("worker.engine.id", engine);
        WorkerConfig cfg = WorkerConfig.from(props);
        WorkerHttpConfig httpCfg = WorkerHttpConfig.from(props);
        props.requireAllKeysUsed("docs/worker.md");
        WorkerApp app = new WorkerApp(cfg, httpCfg);
        Runtime.getRuntime().addShutdownHook(new Thread(app::close, "worker-shutdown"));
        app.start();
        System.out.println("worker running: engine=" + cfg.engineId() + " instance-epoch=" + cfg.instanceEpoch() + " transports=" + cfg.transports()
                + app.tcpAddress().map(a -> " tcp=" + a).orElse("") + app.httpAddress().map(a -> " metrics=http://" + a + "/metrics").orElse("") + " pool=" + app.pool());
        app.awaitClose();
        return 0;
    }
}
