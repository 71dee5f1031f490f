package io.orbitkv.pd.cli;

import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.Topic;
import io.orbitkv.pd.schemas.TopicAdmin;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Callable;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
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

    @Option(names = "--prefix", defaultValue = TopicsConfig.DEFAULT_PREFIX, description = "Topic name prefix (default: ${DEFAULT-VALUE}).")
    String prefix;

    @Option(names = "--partitions", defaultValue = "6", description = "Partitions of the per-request topics (default: ${DEFAULT-VALUE}).")
    int partitions;

    @Option(names = "--replication-factor", defaultValue = "1", description = "Replication factor (default: ${DEFAULT-VALUE}).")
    short replicationFactor;

    @Override
    public Integer call() {
        Topics topics = new Topics(new TopicsConfig(prefix, partitions, replicationFactor, Duration.ofDays(7)), EventSerdes.embedded());
        if (create) {
            if (bootstrap == null) {
                throw new IllegalArgumentException("--bootstrap: required with --create");
            }
            try (Admin admin = Admin.create(Map.of(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap))) {
                List<String> created = TopicAdmin.ensureTopics(admin, topics);
                System.out.println(created.isEmpty() ? "all topics already exist" : "created: " + String.join(", ", created));
            }
        }
        System.out.printf("%-28s %-12s %-20s %-10s %-3s %s%n", "TOPIC", "KEY", "VALUE", "PARTITIONS", "RF", "RETENTION");
        for (Topic<String, ?> t : topics.all()) {
            System.out.printf("%-28s %-12s %-20s %-10d %-3d %s%n", t.name(), t.keyName(), t.valueTypeName(), t.spec().partitions(),
                    t.spec().replicationFactor(), t.spec().retentionDescription());
        }
        return 0;
    }
}
