package io.orbitkv.pd.cli;

import io.orbitkv.pd.decider.DeciderApp;
import io.orbitkv.pd.decider.DeciderConfig;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/** {@code orbitkv-pd decider}: runs one instance of the decider (the Kafka Streams application). */
@Command(name = "decider", mixinStandardHelpOptions = true,
        header = "Runs the decider, the Kafka Streams app that turns facts into transfer orders and outcomes.",
        description = {"Runs the decider: the Kafka Streams application that matches prefill-complete with decode-ready into",
                "transfer orders and drives every request to exactly one outcome. Start several with the same",
                "decider.application.id to share the partitions. Keys and defaults: docs/decider.md."})
final class DeciderCommand implements Callable<Integer> {

    @Option(names = "--config", description = "Properties file (bootstrap.servers, decider.*, topics.*, serde.*, auth.key, kafka.*).")
    Path config;

    @Option(names = "--bootstrap", description = "Kafka bootstrap servers (overrides bootstrap.servers).")
    String bootstrap;

    @Override
    public Integer call() throws Exception {
        ConfigProps props = ConfigProps.loadOrEmpty(config);
        props.override("bootstrap.servers", bootstrap);
        DeciderConfig cfg = DeciderConfig.from(props);
        props.requireAllKeysUsed("docs/decider.md");
        DeciderApp app = new DeciderApp(cfg).start();
        io.orbitkv.pd.runtime.ShutdownBound.install("decider", app::close);
        if (!app.awaitRunning(Duration.ofMinutes(2))) {
            System.err.println("decider did not reach RUNNING (state " + app.streams().state() + ")");
            app.close();
            return 1;
        }
        System.out.println("decider running: application.id=" + cfg.applicationId() + " guarantee=" + cfg.guarantee()
                + (app.httpUrl() == null ? "" : " queries=" + app.httpUrl()));
        app.awaitClose();
        return 0;
    }
}
