package io.orbitkv.pd.cli;

import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.Topic;
import io.orbitkv.pd.schemas.TopicAdmin;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.schemas.config.ConfigProps;
import io.orbitkv.pd.schemas.config.KafkaClients;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/** {@code orbitkv-pd topics}: list the topic registry, or create the topics on a cluster. */
@Command(name = "topics", mixinStandardHelpOptions = true,
        description = "Lists the product's topics (name, key, value, partitions, retention), or creates them with --create.")
final class TopicsCommand implements Callable<Integer> {

    @Option(names = "--bootstrap", description = "Kafka bootstrap servers; needed with --create.")
    String bootstrap;

    @Option(names = "--create", description = "Create every missing topic on the cluster at --bootstrap.")
    boolean create;

    @Option(names = "--config", description = "Properties instead of the options: bootstrap.servers, topics.*, and the connection of a "
            + "secured cluster's admin (kafka.security.protocol, kafka.sasl.*, kafka.ssl.*).")
    java.nio.file.Path config;

    @Option(names = "--prefix", defaultValue = TopicsConfig.DEFAULT_PREFIX, description = "Topic name prefix (default: ${DEFAULT-VALUE}).")
    String prefix;

    @Option(names = "--partitions", defaultValue = "6", description = "Partitions of the per-request topics (default: ${DEFAULT-VALUE}).")
    int partitions;

    @Option(names = "--replication-factor", defaultValue = "1", description = "Replication factor (default: ${DEFAULT-VALUE}).")
    short replicationFactor;

    @Override
    public Integer call() {
        ConfigProps p = ConfigProps.loadOrEmpty(config);
        Topics topics = new Topics(config != null ? p.topics() : new TopicsConfig(prefix, partitions, replicationFactor, Duration.ofDays(7)),
                EventSerdes.embedded());
        if (create) {
            String servers = bootstrap != null ? bootstrap : p.string("bootstrap.servers", null);
            if (servers == null) {
                throw new IllegalArgumentException("--bootstrap: required with --create (or bootstrap.servers in --config)");
            }
            List<String> created = TopicAdmin.ensure(KafkaClients.admin(servers, p.withPrefix("kafka.")), topics);
            System.out.println(created.isEmpty() ? "all topics already exist" : "created: " + String.join(", ", created));
        }
        System.out.printf("%-28s %-12s %-20s %-10s %-3s %s%n", "TOPIC", "KEY", "VALUE", "PARTITIONS", "RF", "RETENTION");
        for (Topic<String, ?> t : topics.all()) {
            System.out.printf("%-28s %-12s %-20s %-10d %-3d %s%n", t.name(), t.keyName(), t.valueTypeName(), t.spec().partitions(),
                    t.spec().replicationFactor(), t.spec().retentionDescription());
        }
        return 0;
    }
}
