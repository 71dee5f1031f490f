package io.orbitkv.pd.cli;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.decider.DeciderApp;
import io.orbitkv.pd.decider.DeciderConfig;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.FailurePolicy;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.schemas.config.ConfigProps;
import io.orbitkv.pd.testsupport.kafka.WithKafka;
import io.orbitkv.pd.worker.WorkerApp;
import io.orbitkv.pd.worker.WorkerConfig;
import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;

/**
 * The Python engine library ({@code python/orbitkv_pd}) drives real transfer workers (engine API on), a real decider
 * and a real broker: {@code python/tests/it_engine_api.py} runs a whole handoff, a cancel, a lease expiry and an
 * engine that vanishes mid-request and comes back, as two engines that exist only as that library. This harness
 * starts the rest, admits the requests the script asks for (what the proxy would), and then checks the log itself:
 * every decode lease the script held was released exactly once.
 */
@WithKafka
class PythonEngineLibraryIT {

    @Test
    void thePythonLibraryDrivesRealWorkersThroughHandoffCancelLeaseExpiryAndReconnect(KraftCluster kafka) throws Exception {
        Path dir = Files.createDirectories(Path.of("target", "it", "PythonEngineLibraryIT-" + System.nanoTime()).toAbsolutePath());
        Path sockets = Files.createTempDirectory("orbitkv-pyit");
        String prefix = "py" + System.nanoTime() % 100_000 + ".";
        Map<String, String> common = Map.of("bootstrap.servers", kafka.bootstrapServers(), "topics.prefix", prefix, "topics.partitions", "3",
                "topics.retention", "1h", "auth.key", "python-it-auth-key-0123456789");
        Topics topics = new Topics(new TopicsConfig(prefix, 3, (short) 1, Duration.ofHours(1)), EventSerdes.embedded());
        Map<String, String> decider = new HashMap<>(common);
        decider.putAll(Map.of("decider.application.id", "pyit-" + prefix, "decider.state.dir", dir.resolve("state").toString(),
                "decider.store", "in_memory", "decider.lease.duration", "4s", "decider.timeout.prefill", "60s",
                "decider.timeout.decode-ready", "60s", "decider.commit.interval", "50ms", "decider.tick.interval", "100ms"));
        List<AutoCloseable> closing = new ArrayList<>();
        try {
            closing.add(new DeciderApp(DeciderConfig.from(props(decider))).start());
            Map<String, Path> api = new HashMap<>();
            for (String engine : List.of("prefill-py", "decode-py")) {
                Path sock = sockets.resolve(engine + ".sock");
                Map<String, String> w = new HashMap<>(common);
                w.putAll(Map.of("worker.engine.id", engine, "worker.engine-api.path", sock.toString(), "worker.commit.interval", "100ms",
                        "worker.peer.wait", "10s"));
                closing.add(new WorkerApp(WorkerConfig.from(props(w))).start());
                api.put(engine, sock);
            }
            try (KafkaProducer<String, byte[]> producer = new KafkaProducer<>(Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG,
                    kafka.bootstrapServers(), ProducerConfig.LINGER_MS_CONFIG, 0), new StringSerializer(), new ByteArraySerializer())) {
                ProcessBuilder pb = new ProcessBuilder("python3", "-m", "unittest", "-v", "tests.it_engine_api")
                        .directory(Path.of("..", "python").toAbsolutePath().normalize().toFile())
                        .redirectError(dir.resolve("python.log").toFile());
                pb.environment().put("ORBITKV_IT_PREFILL_SOCKET", api.get("prefill-py").toString());
                pb.environment().put("ORBITKV_IT_DECODE_SOCKET", api.get("decode-py").toString());
                pb.environment().put("ORBITKV_IT_SHM_DIR", "/dev/shm");
                pb.environment().put("PYTHONDONTWRITEBYTECODE", "1");
                Process py = pb.start();
                List<String> admitted = new ArrayList<>();
                try (BufferedReader out = new BufferedReader(new InputStreamReader(py.getInputStream(), StandardCharsets.UTF_8));
                     Writer in = new java.io.OutputStreamWriter(py.getOutputStream(), StandardCharsets.UTF_8)) {
                    String line;
                    while ((line = out.readLine()) != null) {
                        String[] f = line.split(" ");
                        if (f.length == 4 && f[0].equals("ADMIT")) {
                            admit(producer, topics, f[1], f[2], f[3]);
                            admitted.add(f[1]);
                            in.write("OK " + f[1] + "\n");
                            in.flush();
                        }
                    }
                }
                boolean exited = py.waitFor(5, TimeUnit.MINUTES);
                String log = Files.readString(dir.resolve("python.log"));
                assertThat(exited).as("the Python test finished").isTrue();
                assertThat(py.exitValue()).as("python/tests/it_engine_api.py:\n%s", log).isZero();
                assertThat(log).contains("Ran 4 tests").contains("OK");
                assertThat(admitted).hasSize(4);
                // Every decode lease the script held was released exactly once by the decider's rules.
                Map<String, Integer> decodeReleases = releases(kafka, topics, "decode-py");
                for (String rid : admitted) {
                    assertThat(decodeReleases.getOrDefault(rid, 0)).as("decode releases of %s", rid).isEqualTo(1);
                }
            }
        } finally {
            for (int i = closing.size() - 1; i >= 0; i--) {
                closing.get(i).close();
            }
        }
    }

    private static ConfigProps props(Map<String, String> m) {
        ConfigProps p = ConfigProps.empty();
        for (Map.Entry<String, String> e : m.entrySet()) {
            p = p.with(e.getKey(), e.getValue());
        }
        return p;
    }

    private static void admit(KafkaProducer<String, byte[]> producer, Topics topics, String rid, String prefill, String decode) throws Exception {
        RequestEvent e = RequestEvent.newBuilder().setRequestId(rid).setEventId(rid + "/admitted").setSource("proxy:python-it")
                .setEventTimeMs(System.currentTimeMillis()).setPayload(RequestAdmitted.newBuilder().setModel("sim-it").setPromptTokens(64)
                        .setMaxTokens(16).setPrefillEngineId(prefill).setDecodeEngineId(decode).setFailurePolicy(FailurePolicy.FAIL)
                        .setDeadlineMs(System.currentTimeMillis() + 120_000).build()).build();
        producer.send(new ProducerRecord<>(topics.requestEvents().name(), rid,
                topics.requestEvents().valueSerde().serializer().serialize(topics.requestEvents().name(), e))).get(10, TimeUnit.SECONDS);
    }

    /** ReleaseDecided(DECODE) decisions for {@code engine} on engine-commands, by request (distinct decision ids: copies are one decision). */
    private static Map<String, Integer> releases(KraftCluster kafka, Topics topics, String engine) {
        Map<String, java.util.Set<String>> ids = new HashMap<>();
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(Map.of(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, kafka.bootstrapServers(),
                ConsumerConfig.GROUP_ID_CONFIG, "pyit-check-" + System.nanoTime(), ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest",
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed"), new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            c.subscribe(List.of(topics.engineCommands().name()));
            long idleSince = System.nanoTime();
            while (System.nanoTime() - idleSince < TimeUnit.SECONDS.toNanos(3)) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    idleSince = System.nanoTime();
                    Decision d = topics.engineCommands().valueSerde().deserializer().deserialize(r.topic(), r.value());
                    if (d.getPayload() instanceof ReleaseDecided rel && rel.getSide() == ReleaseSide.DECODE && engine.equals(rel.getEngineId())) {
                        ids.computeIfAbsent(d.getRequestId(), k -> new java.util.HashSet<>()).add(d.getDecisionId());
                    }
                }
            }
        }
        Map<String, Integer> out = new HashMap<>();
        ids.forEach((k, v) -> out.put(k, v.size()));
        return out;
    }
}
