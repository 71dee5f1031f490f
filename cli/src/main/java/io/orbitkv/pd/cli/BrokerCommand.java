package io.orbitkv.pd.cli;

import io.orbitkv.pd.broker.BrokerSecurity;
import io.orbitkv.pd.broker.DevBroker;
import io.orbitkv.pd.broker.NodeHost;
import io.orbitkv.pd.schemas.config.Addresses;
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

    @Option(names = "--port", defaultValue = "9092", description = "Client listener port (default: ${DEFAULT-VALUE}).")
    int port;

    @Option(names = "--host", defaultValue = "127.0.0.1", description = {"Address the listeners bind (default: ${DEFAULT-VALUE}; 0.0.0.0: every",
            "interface, then --advertised-host is required)."})
    String host;

    @Option(names = "--advertised-host", description = {"Address clients on other machines are told to connect to (Kafka's",
            "advertised.listeners; default: --host). Never guessed."})
    String advertisedHost;

    @Option(names = "--secured", description = {"SASL SCRAM-SHA-512 over TLS, ACLs enforced: a CA, the broker's certificate and the super",
            "user's connection (<data-dir>/admin.properties) are made on the first secured start and kept. See docs/security.md."})
    boolean secured;

    @Override
    public Integer call() throws Exception {
        if (port < 1 || port > 65535) {
            throw new IllegalArgumentException("--port: must be 1..65535, got " + port);
        }
        Path dir = dataDir.toAbsolutePath();
        NodeHost node = new NodeHost(host, Addresses.advertised("--host", host, "--advertised-host", advertisedHost), java.util.List.of());
        if (secured) {
            BrokerSecurity security = DevBroker.securedMaterial(dir, port, node);
            System.out.println("secured: SASL_SSL (SCRAM-SHA-512), ACLs enforced; the admin's connection: " + dir.resolve("admin.properties"));
            System.out.println("  next: ./orbitkv-pd topics --config " + dir.resolve("admin.properties") + " --create");
            System.out.println("        ./orbitkv-pd acls --config " + dir.resolve("admin.properties") + " --apply --user orbitkv-decider=<password> ...");
            DevBroker.run(dir, port, dir.resolve("logs"), java.util.Map.of(), security, node);
        } else {
            DevBroker.run(dir, port, dir.resolve("logs"), java.util.Map.of(), null, node);
        }
        return 0;
    }
}
