package io.orbitkv.pd.cli;

import io.orbitkv.pd.dashboard.DashboardApp;
import io.orbitkv.pd.dashboard.DashboardConfig;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/** {@code orbitkv-pd dashboard}: runs one instance of the stream-processing dashboard (page, API, Prometheus). */
@Command(name = "dashboard", mixinStandardHelpOptions = true,
        header = "Runs the dashboard: live handoff statistics, a JSON API and Prometheus metrics.",
        description = {"Runs the dashboard: a Kafka Streams application of its own that reads decisions and request events,",
                "keeps 1 s and 1 min handoff statistics, and serves a live page, a JSON API and Prometheus /metrics.",
                "Start several with the same dashboard.application.id to share the partitions; any of them answers for all.",
                "Keys and defaults: docs/dashboard.md."})
final class DashboardCommand implements Callable<Integer> {

    @Option(names = "--config", description = "Properties file (bootstrap.servers, dashboard.*, topics.*, serde.*, kafka.*).")
    Path config;

    @Option(names = "--bootstrap", description = "Kafka bootstrap servers (overrides bootstrap.servers).")
    String bootstrap;

    @Option(names = "--port", description = "HTTP port (overrides dashboard.http.port; 0 picks a free one).")
    Integer port;

    @Override
    public Integer call() throws Exception {
        ConfigProps props = ConfigProps.loadOrEmpty(config);
        props.override("bootstrap.servers", bootstrap);
        props.override("dashboard.http.port", port);
        DashboardConfig cfg = DashboardConfig.from(props);
        props.requireAllKeysUsed("docs/dashboard.md");
        DashboardApp app = new DashboardApp(cfg).start();
        io.orbitkv.pd.runtime.ShutdownBound.install("dashboard", app::close);
        if (!app.awaitRunning(Duration.ofMinutes(2))) {
            System.err.println("dashboard did not reach RUNNING (state " + app.streams().state() + ")");
            app.close();
            return 1;
        }
        System.out.println("dashboard running: " + app.url() + "  (API " + app.url() + "api/overview, Prometheus " + app.url() + "metrics)");
        app.awaitClose();
        return 0;
    }
}
