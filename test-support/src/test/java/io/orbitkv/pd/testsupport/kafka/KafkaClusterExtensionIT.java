package io.orbitkv.pd.testsupport.kafka;

import static org.assertj.core.api.Assertions.assertThat;
import static org.junit.platform.engine.discovery.DiscoverySelectors.selectClass;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.Config;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.config.ConfigResource;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Nested;
import org.junit.jupiter.api.Test;
import org.junit.platform.testkit.engine.EngineTestKit;

import io.orbitkv.pd.broker.KraftCluster;

/**
 * {@link WithKafka} end to end: one cluster per class injected everywhere, placed under
 * {@code target/kafka/<TestClass>/}, shared with nested classes, and closed after the class even when a test
 * fails.
 */
@WithKafka(brokerProperties = "log.retention.ms=3600000")
class KafkaClusterExtensionIT {

    private static KraftCluster fromBeforeAll;
    private final KraftCluster fromConstructor;

    KafkaClusterExtensionIT(KraftCluster cluster) {
        this.fromConstructor = cluster;
    }

    @BeforeAll
    static void captureCluster(KraftCluster cluster) {
        fromBeforeAll = cluster;
    }

    @Test
    void oneRunningClusterIsInjectedEverywhere(KraftCluster cluster) throws Exception {
        assertThat(cluster).isSameAs(fromBeforeAll).isSameAs(fromConstructor);
        assertThat(cluster.dataDir()).isEqualTo(Path.of("target", "kafka", "KafkaClusterExtensionIT", "data")
                .toAbsolutePath());
        assertThat(cluster.logFile(1)).isRegularFile()
                .hasParent(Path.of("target", "kafka", "KafkaClusterExtensionIT", "logs").toAbsolutePath());

        try (Admin admin = cluster.createAdmin()) {
            assertThat(admin.describeCluster().nodes().get()).extracting(Node::id).containsExactly(1);
            admin.createTopics(List.of(new NewTopic("extension-it", 1, (short) 1))).all().get();
            assertThat(admin.listTopics().names().get()).contains("extension-it");
            // brokerProperties from the annotation reached server.properties.
            ConfigResource broker = new ConfigResource(ConfigResource.Type.BROKER, "1");
            Config cfg = admin.describeConfigs(List.of(broker)).all().get().get(broker);
            assertThat(cfg.get("log.retention.ms").value()).isEqualTo("3600000");
        }
    }

    @Nested
    class NestedTests {
        @Test
        void sharesTheEnclosingClassCluster(KraftCluster cluster) {
            assertThat(cluster).isSameAs(fromBeforeAll);
        }
    }

    @Test
    void clusterIsClosedAfterItsClassEvenWhenATestFails() {
        Fixture.SEEN.set(null);

        var results = EngineTestKit.engine("junit-jupiter")
                .selectors(selectClass(Fixture.class))
                .execute();

        results.testEvents().assertStatistics(s -> s.started(2).succeeded(1).failed(1));
        KraftCluster seen = Fixture.SEEN.get();
        assertThat(seen).isNotNull().isNotSameAs(fromBeforeAll);
        assertThat(seen.isClosed()).isTrue();
        assertThat(seen.isRunning(1)).isFalse();
        assertThat(seen.dataDir().resolve("node-1")).doesNotExist();
        assertThat(seen.dataDir()).isEqualTo(Path.of("target", "kafka", "KafkaClusterExtensionIT$Fixture", "data")
                .toAbsolutePath());
        assertThat(Files.exists(seen.logFile(1))).as("logs are kept").isTrue();
    }

    /** Run only through {@link EngineTestKit} above; not matched by the Failsafe includes. */
    @WithKafka
    static class Fixture {
        static final AtomicReference<KraftCluster> SEEN = new AtomicReference<>();

        @Test
        void passes(KraftCluster cluster) {
            SEEN.set(cluster);
            assertThat(cluster.isRunning(1)).isTrue();
        }

        @Test
        void fails(KraftCluster cluster) {
            SEEN.set(cluster);
            throw new AssertionError("deliberate failure: teardown must still happen");
        }
    }
}
