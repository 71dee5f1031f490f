package io.orbitkv.pd.cli;

import io.orbitkv.pd.broker.DevBroker;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/** {@code orbitkv-pd broker}: a development KRaft broker whose data survives restarts. */
@Command(name = "broker", mixinStandardHelpOptions = true,
        description = {"Runs a single-node development Kafka broker (KRaft, from the Maven Central jars) in a child JVM.",
                "Its data directory survives restarts. Ctrl-C stops it."})
final class BrokerCommand implements Callable<Integer> {

    @Option(names = "--data-dir", defaultValue = ".orbitkv/broker", description = "Data directory (default: ${DEFAULT-VALUE}).")
    Path dataDir;

    @Option(names = "--port", defaultValue = "9092", description = "Client listener port on 127.0.0.1 (default: ${DEFAULT-VALUE}).")
    int port;

    @Override
    public Integer call() throws Exception {
        if (port < 1 || port > 65535) {
            throw new IllegalArgumentException("--port: must be 1..65535, got " + port);
        }
        DevBroker.run(dataDir.toAbsolutePath(), port);
        return 0;
    }
}
