package io.orbitkv.pd.broker;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.Future;
import java.util.stream.IntStream;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Real child-JVM KRaft clusters: one node, three nodes with a killed and restarted member, and a persistent
 * directory across a full stop/start. Data and logs go to {@code target/kafka/KraftClusterIT/<scenario>/}.
 */
@Timeout(value = 120)
class KraftClusterIT {

    private static final Path BASE = Path.of("target", "kafka", "KraftClusterIT").toAbsolutePath();

    @Test
    void singleNodeProducesAndConsumes() throws Exception {
        try (KraftCluster cluster = cluster("single", 1).build().start();
             Admin admin = cluster.createAdmin()) {
            assertThat(admin.describeCluster().nodes().get()).extracting(Node::id).containsExactly(1);
            admin.createTopics(List.of(new NewTopic("single", 3, (short) 1))).all().get();

            produce(cluster, "single", 0, 100);

            assertThat(consume(cluster, "single", "single-group", 100))
                    .containsExactlyInAnyOrderElementsOf(values(0, 100));
        }
    }

    @Test
    void threeNodesSurviveKillAndRestartOfALeader() throws Exception {
        try (KraftCluster cluster = cluster("three", 3).build().start();
             Admin admin = cluster.createAdmin()) {
            assertThat(admin.describeCluster().nodes().get()).extracting(Node::id)
                    .containsExactlyInAnyOrder(1, 2, 3);
            admin.createTopics(List.of(new NewTopic("replicated", 3, (short) 3)
                    .configs(Map.of("min.insync.replicas", "2")))).all().get();
            produce(cluster, "replicated", 0, 50);

            // Kill a broker that leads something, so the test exercises leader failover, not just a follower loss.
            int victim = describe(admin, "replicated").partitions().getFirst().leader().id();
            cluster.killNode(victim);
            assertThat(cluster.isRunning(victim)).isFalse();

            // acks=all with min.insync.replicas=2 still succeeds with two of three replicas.
            produce(cluster, "replicated", 50, 50);
            assertThat(consume(cluster, "replicated", "after-kill", 100))
                    .containsExactlyInAnyOrderElementsOf(values(0, 100));
            assertThat(describe(admin, "replicated").partitions())
                    .allSatisfy(p -> assertThat(p.leader().id()).isNotEqualTo(victim));

            cluster.restartNode(victim);

            await().atMost(Duration.ofSeconds(30)).untilAsserted(() ->
                    assertThat(admin.describeCluster().nodes().get()).extracting(Node::id)
                            .containsExactlyInAnyOrder(1, 2, 3));
            // The restarted replica catches up and rejoins every ISR.
            await().atMost(Duration.ofSeconds(30)).untilAsserted(() ->
                    assertThat(describe(admin, "replicated").partitions())
                            .allSatisfy(p -> assertThat(p.isr()).extracting(Node::id).contains(victim)));
            produce(cluster, "replicated", 100, 10);
            assertThat(consume(cluster, "replicated", "after-restart", 110))
                    .containsExactlyInAnyOrderElementsOf(values(0, 110));
        }
    }

    @Test
    void persistentDirectorySurvivesStopAndStart() throws Exception {
        Path dir = BASE.resolve("persistent");
        KraftCluster.deleteRecursively(dir); // persistent by design, so start each run from a clean slate (data and log)
        String firstBootstrap;
        try (KraftCluster cluster = cluster("persistent", 1).persistent(true).build().start();
             Admin admin = cluster.createAdmin()) {
            admin.createTopics(List.of(new NewTopic("kept", 1, (short) 1))).all().get();
            produce(cluster, "kept", 0, 20);
            firstBootstrap = cluster.bootstrapServers();
        }
        assertThat(dir.resolve("data/node-1/kafka-logs/meta.properties")).isRegularFile();

        try (KraftCluster cluster = cluster("persistent", 1).persistent(true).build().start();
             Admin admin = cluster.createAdmin()) {
            assertThat(cluster.bootstrapServers()).as("ports are reused").isEqualTo(firstBootstrap);
            assertThat(admin.listTopics().names().get()).contains("kept");
            assertThat(consume(cluster, "kept", "after-restart", 20))
                    .containsExactlyInAnyOrderElementsOf(values(0, 20));
        }
        // The storage was formatted once: the second start found meta.properties and skipped the tool.
        assertThat(Files.readString(dir.resolve("logs/node-1.log")))
                .containsOnlyOnce("Formatting storage")
                .contains("already formatted");
    }

    @Test
    void aPinnedNodeRunsEveryThreadOnItsCpus() throws Exception {
        org.junit.jupiter.api.Assumptions.assumeTrue(Files.isExecutable(Path.of("/usr/bin/taskset")), "no taskset here");
        String first = Files.readString(Path.of("/sys/devices/system/cpu/online")).strip().split("[-,]")[0];
        try (KraftCluster cluster = cluster("pinned", 1).cpus(first).build().start();
             Admin admin = cluster.createAdmin()) {
            admin.createTopics(List.of(new NewTopic("pinned", 1, (short) 1))).all().get();
            produce(cluster, "pinned", 0, 10);
            assertThat(consume(cluster, "pinned", "pinned-group", 10)).hasSize(10);
            // Every thread of the broker JVM, those Kafka started after the pinning included (network, I/O, log cleaner).
            long pid = cluster.processHandle(1).orElseThrow().pid();
            List<String> masks = new ArrayList<>();
            try (var tasks = Files.list(Path.of("/proc/" + pid + "/task"))) {
                for (Path task : tasks.toList()) {
                    try {
                        Files.readAllLines(task.resolve("status")).stream().filter(l -> l.startsWith("Cpus_allowed_list:"))
                                .map(l -> l.substring(l.indexOf(':') + 1).strip()).forEach(masks::add);
                    } catch (java.io.IOException ended) {
                        // the thread ended while we listed
                    }
                }
            }
            assertThat(masks).hasSizeGreaterThan(20).containsOnly(first);
        }
    }

    @Test
    void aNodeCannotBeAskedForCpusThatAreNotACpuList() {
        assertThatThrownBy(() -> cluster("bad-cpus", 1).cpus("0-x"))
                .isInstanceOf(IllegalArgumentException.class)
                .hasMessageContaining("'0-x'");
    }

    @Test
    void nodeThatDiesDuringStartupFailsFastWithItsLog() {
        KraftCluster cluster = cluster("broken", 1).brokerProperty("num.io.threads", "not-a-number").build();
        // "exited with code" is the fail-fast path; the timeout path reports "not ready within" instead.
        assertThatThrownBy(cluster::start)
                .isInstanceOf(IllegalStateException.class)
                .hasMessageContaining("node 1 exited with code")
                .hasMessageContaining("node-1.log")
                .hasMessageContaining("num.io.threads");
        assertThat(cluster.isRunning(1)).isFalse();
        cluster.close();
        cluster.close(); // idempotent
    }

    // ------------------------------------------------------------------------------------------ helpers

    private static KraftCluster.Builder cluster(String scenario, int nodes) {
        return KraftCluster.builder()
                .nodes(nodes)
                .dataDir(BASE.resolve(scenario).resolve("data"))
                .logsDir(BASE.resolve(scenario).resolve("logs"));
    }

    private static List<String> values(int from, int count) {
        return IntStream.range(from, from + count).mapToObj(i -> "value-" + i).toList();
    }

    private static void produce(KraftCluster cluster, String topic, int from, int count) throws Exception {
        Map<String, Object> cfg = cluster.adminConfig();
        cfg.put(ProducerConfig.ACKS_CONFIG, "all");
        cfg.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, 60_000);
        cfg.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, 10_000);
        try (KafkaProducer<String, String> producer =
                     new KafkaProducer<>(cfg, new StringSerializer(), new StringSerializer())) {
            List<Future<RecordMetadata>> sent = new ArrayList<>();
            for (int i = from; i < from + count; i++) {
                sent.add(producer.send(new ProducerRecord<>(topic, "key-" + i, "value-" + i)));
            }
            for (Future<RecordMetadata> f : sent) {
                f.get(); // every record acknowledged by all in-sync replicas
            }
        }
    }

    /** Reads {@code expected} records from the beginning with a fresh consumer group. */
    private static List<String> consume(KraftCluster cluster, String topic, String group, int expected) {
        Map<String, Object> cfg = cluster.adminConfig();
        cfg.put(ConsumerConfig.GROUP_ID_CONFIG, group);
        cfg.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        List<String> got = new ArrayList<>();
        try (KafkaConsumer<String, String> consumer =
                     new KafkaConsumer<>(cfg, new StringDeserializer(), new StringDeserializer())) {
            consumer.subscribe(List.of(topic));
            await().atMost(Duration.ofSeconds(45)).pollInSameThread().pollInterval(Duration.ZERO).until(() -> {
                for (ConsumerRecord<String, String> r : consumer.poll(Duration.ofMillis(200))) {
                    got.add(r.value());
                }
                return got.size() >= expected;
            });
            // Nothing beyond what was produced (no duplicates from producer retries).
            consumer.poll(Duration.ofMillis(200)).forEach(r -> got.add(r.value()));
        }
        return got;
    }

    private static TopicDescription describe(Admin admin, String topic) throws Exception {
        return admin.describeTopics(Set.of(topic)).allTopicNames().get().get(topic);
    }
}
