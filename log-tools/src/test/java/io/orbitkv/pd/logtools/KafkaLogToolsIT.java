package io.orbitkv.pd.logtools;

import static io.orbitkv.pd.logtools.SyntheticRun.POLICY;
import static io.orbitkv.pd.logtools.SyntheticRun.SERDES;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.decider.DeciderApp;
import io.orbitkv.pd.decider.DeciderConfig;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.logtools.audit.AuditReport;
import io.orbitkv.pd.logtools.audit.Auditor;
import io.orbitkv.pd.logtools.replay.ReplayReport;
import io.orbitkv.pd.logtools.replay.Replayer;
import io.orbitkv.pd.logtools.trace.RequestTrace;
import io.orbitkv.pd.schemas.SerdeConfig;
import io.orbitkv.pd.schemas.TopicAdmin;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.testsupport.kafka.WithKafka;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * The log tools against a real KRaft broker and a real decider ({@link DeciderApp}, exactly-once): the facts of a
 * synthetic workload (handoffs, retries, cancels, rejections, timeouts, recomputes) are produced to the topics, the
 * decider decides, and then the tools read the cluster: the audit is clean, the replay reproduces every decision,
 * the live decisions equal those the test driver made from the same facts, the trace tells a request's story, and
 * an export of the cluster replays the same from the file.
 */
@WithKafka
class KafkaLogToolsIT {

    private static final SyntheticLog.Options RUN = new SyntheticLog.Options(150, 3, 4, 500, System.currentTimeMillis());
    private static KraftCluster cluster;
    private static Topics topics;
    private static List<LogRecord> expected;
    private static Path work;

    @BeforeAll
    static void aRealRun(KraftCluster kafka) throws Exception {
        cluster = kafka;
        work = Files.createDirectories(Path.of("target", "it", "KafkaLogToolsIT-" + System.nanoTime()));
        // A recorded log imported into a cluster keeps its writers' times (topics.facts.timestamp=producer): the live
        // decider must see the very timestamps the test driver saw.
        topics = new Topics(new TopicsConfig("lt" + System.nanoTime() % 100000 + ".", RUN.partitions(), (short) 1, Duration.ofHours(1), false),
                SERDES);
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", kafka.bootstrapServers()))) {
            TopicAdmin.ensureTopics(admin, topics);
        }
        expected = SyntheticLog.generate(RUN, POLICY, topics);
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, kafka.bootstrapServers(),
                ProducerConfig.ACKS_CONFIG, "all", ProducerConfig.LINGER_MS_CONFIG, 5), new ByteArraySerializer(), new ByteArraySerializer())) {
            for (LogRecord r : expected) {
                if (r.role() == TopicRole.REQUEST_EVENTS || r.role() == TopicRole.ENGINES) {
                    producer.send(new ProducerRecord<>(r.topic(), r.partition(), r.timestamp(), r.key(), r.value()));
                }
            }
        }
        long decisions = expected.stream().filter(r -> r.role() == TopicRole.DECISIONS).count();
        DeciderConfig config = new DeciderConfig(kafka.bootstrapServers(), topics.config().prefix() + "decider", topics.config(),
                SerdeConfig.embedded(), DeciderConfig.Guarantee.EXACTLY_ONCE_V2, Duration.ofMillis(100), work.resolve("state"),
                DeciderConfig.StoreKind.IN_MEMORY, DeciderConfig.DEFAULT_STORE_WRITE_BEHIND, 1, POLICY, Duration.ofMillis(200), "127.0.0.1", "", -1, Map.of());
        try (DeciderApp decider = new DeciderApp(config).start();
             KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(Map.of(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, kafka.bootstrapServers(),
                     ConsumerConfig.GROUP_ID_CONFIG, topics.config().prefix() + "count", ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest",
                     ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"), new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.subscribe(List.of(topics.decisions().name()));
            long[] seen = {0};
            await().atMost(Duration.ofSeconds(120)).until(() -> {
                seen[0] += consumer.poll(Duration.ofMillis(200)).count();
                return seen[0] >= decisions;
            });
        }
    }

    private static KafkaLogSource open(Long fromMs) {
        return KafkaLogSource.open(new KafkaLogSource.Options(cluster.bootstrapServers(), Map.of(), topics, "embedded",
                EnumSet.of(TopicRole.ENGINES, TopicRole.REQUEST_EVENTS, TopicRole.DECISIONS, TopicRole.DEAD_LETTERS), fromMs, null,
                Duration.ofSeconds(20)));
    }

    @Test
    void theLiveDecisionsAreThoseTheTestDriverMadeFromTheSameFacts() {
        Map<String, List<Decision>> live = new HashMap<>();
        try (KafkaLogSource source = open(null)) {
            source.read(new LogSource.RecordFilter() {
                @Override
                public boolean wantsPartition(TopicRole role, int partition) {
                    return role == TopicRole.DECISIONS;
                }
            }, r -> live.computeIfAbsent(r.keyString(), k -> new ArrayList<>()).add(SyntheticRun.decision(r)), Progress.NONE);
        }
        Map<String, List<Decision>> driver = new HashMap<>();
        expected.stream().filter(r -> r.role() == TopicRole.DECISIONS)
                .forEach(r -> driver.computeIfAbsent(r.keyString(), k -> new ArrayList<>()).add(SyntheticRun.decision(r)));
        assertThat(live).isEqualTo(driver);
    }

    @Test
    void theMergedReadKeepsEveryPartitionInOffsetOrderAndEndsAtTheEndOffsetsSeenAtOpen() {
        try (KafkaLogSource source = open(null)) {
            Map<String, Long> last = new HashMap<>();
            long[] n = {0};
            source.read(LogSource.RecordFilter.ALL, r -> {
                Long prev = last.put(r.topic() + "-" + r.partition(), r.offset());
                assertThat(prev == null || prev < r.offset()).as("offset order of %s", r.where()).isTrue();
                n[0]++;
            }, Progress.NONE);
            assertThat(n[0]).isGreaterThanOrEqualTo(expected.size()).isLessThanOrEqualTo(source.slice().estimatedRecords());
            assertThat(source.slice().topic(TopicRole.REQUEST_EVENTS).orElseThrow().partitions()).hasSize(RUN.partitions())
                    .allSatisfy(p -> assertThat(p.fromLogStart()).isTrue());
        }
    }

    @Test
    void theRealRunAuditsClean() {
        try (KafkaLogSource source = open(null)) {
            AuditReport r = Auditor.audit(source, SERDES, POLICY, 100, Progress.NONE);
            assertThat(r.violations()).isEmpty();
            assertThat(r.clean()).isTrue();
            assertThat(r.checked()).isEqualTo(RUN.requests());
            assertThat(r.openAtEnd()).isZero();
        }
    }

    @Test
    void replayingTheRealRunReproducesItsDecisionsExactly() {
        try (KafkaLogSource source = open(null)) {
            ReplayReport r = Replayer.replay(source, POLICY, topics, 10, Progress.NONE);
            assertThat(r.differences()).isEmpty();
            assertThat(r.identical()).isTrue();
            assertThat(r.requestsCompared()).isEqualTo(RUN.requests());
            assertThat(r.decisionsReplayed()).isEqualTo(r.decisionsRecorded()).isEqualTo(
                    expected.stream().filter(x -> x.role() == TopicRole.DECISIONS).count());
        }
    }

    @Test
    void traceTellsARetriedRequestsStoryFromTheCluster() {
        String id = null;
        for (int i = 0; i < RUN.requests() && id == null; i++) {
            if (SyntheticLog.scenario(RUN, i).equals("retry")) {
                id = SyntheticLog.requestId(i);
            }
        }
        try (KafkaLogSource source = open(null)) {
            RequestTrace t = RequestTrace.collect(source, id, SERDES, false, Progress.NONE);
            assertThat(t.found()).isTrue();
            assertThat(t.outcome()).isNotNull();
            // two attempts; the first one's order also went out ahead of the prefill (decider.order-ahead)
            assertThat(t.entries()).filteredOn(e -> e.event() instanceof Decision d && d.getPayload() instanceof TransferOrder)
                    .extracting(e -> ((TransferOrder) ((Decision) e.event()).getPayload()).getAttempt()).containsOnly(1, 2);
            assertThat(t.entries()).allSatisfy(e -> assertThat(e.record().partition()).isEqualTo(Partitioning.partitionOf(t.requestId(), RUN.partitions())));
        }
    }

    @Test
    void anExportOfTheClusterAuditsAndReplaysTheSameFromTheFile() throws Exception {
        Path file = work.resolve("run.okvlog");
        try (KafkaLogSource source = open(null)) {
            LogExport.export(source, file, null, false, Progress.NONE);
        }
        LogFile f = LogFile.open(file);
        assertThat(f.slice().origin()).contains(cluster.bootstrapServers());
        assertThat(Auditor.audit(f, SERDES, POLICY, 10, Progress.NONE).clean()).isTrue();
        ReplayReport r = Replayer.replay(f, POLICY, topics, 10, Progress.NONE);
        assertThat(r.identical()).isTrue();
        assertThat(r.requestsCompared()).isEqualTo(RUN.requests());

        Path one = work.resolve("one.okvlog");
        String cancel = null;
        for (int i = 0; i < RUN.requests() && cancel == null; i++) {
            if (SyntheticLog.scenario(RUN, i).equals("cancel")) {
                cancel = SyntheticLog.requestId(i);
            }
        }
        try (KafkaLogSource source = open(null)) {
            LogExport.export(source, one, Set.of(cancel), false, Progress.NONE);
        }
        ReplayReport alone = Replayer.replay(LogFile.open(one), POLICY, topics, 10, Progress.NONE);
        assertThat(alone.identical()).isTrue();
        assertThat(alone.requestsCompared()).isEqualTo(1);
        assertThat(Files.size(one)).isLessThan(Files.size(file) / 10);
    }

    @Test
    void aSliceFromTheMiddleLeavesOutWhatBeganBeforeIt() {
        try (KafkaLogSource source = open(RUN.startMs() + 150)) {
            assertThat(source.slice().topic(TopicRole.REQUEST_EVENTS).orElseThrow().partitions()).anySatisfy(p -> assertThat(p.fromLogStart()).isFalse());
            AuditReport a = Auditor.audit(source, SERDES, POLICY, 100, Progress.NONE);
            assertThat(a.violations()).isEmpty();
            assertThat(a.partial()).isPositive();
        }
    }

    @Test
    void aClusterThatIsNotThereOrAWrongPrefixIsACleanError() throws Exception {
        int port;
        try (java.net.ServerSocket s = new java.net.ServerSocket(0)) {
            port = s.getLocalPort();
        }
        int closed = port;
        assertThatThrownBy(() -> KafkaLogSource.open(new KafkaLogSource.Options("127.0.0.1:" + closed, Map.of(), topics, "embedded",
                EnumSet.of(TopicRole.REQUEST_EVENTS, TopicRole.DECISIONS), null, null, Duration.ofSeconds(3))))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("cannot reach Kafka at 127.0.0.1:" + closed);
        Topics other = new Topics(new TopicsConfig("nope.", 4, (short) 1, Duration.ofHours(1)), SERDES);
        assertThatThrownBy(() -> KafkaLogSource.open(new KafkaLogSource.Options(cluster.bootstrapServers(), Map.of(), other, "embedded",
                EnumSet.of(TopicRole.REQUEST_EVENTS, TopicRole.DECISIONS), null, null, Duration.ofSeconds(10))))
                .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("topic nope.request-events does not exist")
                .hasMessageContaining(topics.requestEvents().name()).hasMessageContaining("--prefix");
    }
}
