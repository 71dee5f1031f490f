package io.orbitkv.pd.cli;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.harness.LoadClient;
import io.orbitkv.pd.harness.LoadClient.Cancel;
import io.orbitkv.pd.harness.LoadClient.Request;
import io.orbitkv.pd.harness.Pipeline;
import io.orbitkv.pd.harness.PipelineSpec;
import io.orbitkv.pd.harness.PipelineLog;
import io.orbitkv.pd.decider.DeciderConfig;
import io.orbitkv.pd.engine.sim.ModelPreset;
import io.orbitkv.pd.events.AbortTransfer;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.logtools.KafkaLogSource;
import io.orbitkv.pd.logtools.Progress;
import io.orbitkv.pd.logtools.TopicRole;
import io.orbitkv.pd.logtools.audit.AuditReport;
import io.orbitkv.pd.logtools.audit.Auditor;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.config.ConfigProps;
import io.orbitkv.pd.testsupport.kafka.WithKafka;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * {@code orbitkv-pd trace|audit|replay|export} on the log of a real demo run: the whole pipeline as processes (decider,
 * a prefill and a decode engine on their tcp workers' engine API, the proxy) on a real broker, under a workload in which some
 * clients walk away mid-prefill, mid-transfer and mid-decode. Then, with the pipeline stopped, the commands read the
 * broker: the run audits clean, its replay reproduces every decision, a request's story is traced, an export of it
 * replays the same from the file, and a corrupted export is refused with a clear error.
 */
@WithKafka
class LogToolsIT {

    private static Path dir;
    private static Path deciderConfig;
    private static String completedId;
    private static String cancelledMidTransferId;
    private static long admitted;

    @BeforeAll
    static void aRealDemoRun(KraftCluster kafka) throws Exception {
        dir = Files.createDirectories(Path.of("target", "it", "LogToolsIT-" + System.nanoTime()).toAbsolutePath());
        PipelineSpec spec = PipelineSpec.defaults().withEngines(1, 1).withModel(ModelPreset.TINY, 512, 0.5, 4)
                .withExtra(Map.of("decider.drain.grace", "1s"), Map.of(), Map.of("transfer.tcp.max-bytes-per-second", "6000000"), Map.of())
                // as the demo runs them: the Java engines on their workers' engine API (orders ahead, KV handed over on landing)
                .withEngineApi(true);
        try (Pipeline p = Pipeline.start(spec, dir, System.out::println, kafka.bootstrapServers());
             LoadClient client = new LoadClient(p.proxyUrl(), "orbitkv-sim-tiny", p.deciderUrl())) {
            deciderConfig = p.dir().resolve("config").resolve("decider.properties");
            List<Request> work = new ArrayList<>();
            int i = 0;
            for (Request r : LoadClient.workload(5, 48, 60, 160, 12, true)) {
                Cancel cancel = i % 8 == 3 ? Cancel.WHILE_TRANSFERRING : i % 8 == 5 ? Cancel.AFTER_FIRST_TOKEN : i % 8 == 7 ? Cancel.AFTER_DELAY : Cancel.NONE;
                work.add(new Request(r.index(), r.chat(), r.prompt(), r.maxTokens(), cancel == Cancel.AFTER_FIRST_TOKEN || r.stream(), false, cancel,
                        cancel == Cancel.AFTER_DELAY ? 15 : 0));
                i++;
            }
            client.run(work, 8, () -> { });
            // every admitted request reaches its outcome, and every page it held is released (a cancelled attempt's
            // pages after the drain grace): the log is complete before the pipeline stops
            PipelineLog[] log = new PipelineLog[1];
            await().atMost(Duration.ofSeconds(90)).pollInterval(Duration.ofMillis(500)).until(() -> {
                log[0] = PipelineLog.read(p.bootstrapServers());
                if (log[0].admitted() == 0 || log[0].outcomeCount() < log[0].admitted()) {
                    return false;
                }
                AuditReport a = auditOf(p.bootstrapServers());
                return a.pagesReleased() == a.pagesHeld();
            });
            admitted = log[0].admitted();
            for (PipelineLog.Story s : log[0].stories.values()) {
                if (!s.outcomes.isEmpty() && s.outcomes.get(0).getKind() == OutcomeKind.COMPLETED && completedId == null) {
                    completedId = s.requestId;
                }
                if (s.cancelled && s.decisions.stream().anyMatch(d -> d instanceof AbortTransfer)) {
                    cancelledMidTransferId = s.requestId;
                }
            }
        }
    }

    private static AuditReport auditOf(String bootstrap) {
        DeciderConfig c = DeciderConfig.from(ConfigProps.load(deciderConfig));
        try (EventSerdes serdes = EventSerdes.create(c.serde());
             KafkaLogSource source = KafkaLogSource.open(new KafkaLogSource.Options(bootstrap, Map.of(), new Topics(c.topics(), serdes), "embedded",
                     EnumSet.of(TopicRole.REQUEST_EVENTS, TopicRole.DECISIONS, TopicRole.DEAD_LETTERS), null, null, Duration.ofSeconds(10)))) {
            return Auditor.audit(source, serdes, c.policy(), 10, Progress.NONE);
        }
    }

    private static CliRun cli(String... args) {
        return CliRun.of(args);
    }

    private static String config() {
        return deciderConfig.toString();
    }

    @Test
    void theRunAuditsClean() throws Exception {
        CliRun r = cli("audit", "--config", config());
        assertThat(r.exit()).as(r.out() + r.err()).isZero();
        assertThat(r.out()).contains("CLEAN").contains(admitted + " admitted").contains("CANCELLED");
        CliRun json = cli("audit", "--config", config(), "--json");
        JsonNode report = new ObjectMapper().readTree(json.out());
        assertThat(report.get("clean").asBoolean()).isTrue();
        assertThat(report.get("requests").get("admitted").asLong()).isEqualTo(admitted);
        assertThat(json.err()).doesNotContain("reading"); // no progress bar unless asked for
    }

    @Test
    void replayingTheRunReproducesEveryDecision() {
        CliRun r = cli("replay", "--config", config());
        assertThat(r.exit()).as(r.out() + r.err()).isZero();
        assertThat(r.out()).contains("IDENTICAL: " + admitted + " request(s) compared").contains(admitted + " reproduced exactly");
    }

    @Test
    void traceTellsTheStoryOfACompletedAndOfAWalkedAwayRequest() {
        CliRun r = cli("trace", completedId, "--config", config());
        assertThat(r.exit()).as(r.err()).isZero();
        assertThat(r.out()).contains("request " + completedId + " — COMPLETED").contains("proxy").contains("engine:").contains("worker")
                .contains("decider").contains("TransferOrder").contains("phases").contains("transfer")
                // the wall-clock hops from the records' timing marks, through to the first token at the proxy
                // the push started by the decider's order copy (fact_to_decider), or by the engine's own prefill report to the
                // worker holding the order issued ahead (prefill_to_worker): which one comes first is the run's timing
                .contains("hops (wall clock").containsPattern("fact_to_decider|prefill_to_worker").contains("transfer_wire")
                // the decode engine, on its worker's engine API, has its KV from the worker as the pages land (or, should the
                // decider's KvReady reach it first on a loaded machine, from the decider)
                .containsPattern("landed_to_engine|kv_ready_to_engine").contains("first_token_to_proxy").contains("TTFT at the proxy").contains("RequestAnswered");
        CliRun c = cli("trace", cancelledMidTransferId, "--config", config(), "--progress");
        assertThat(c.exit()).isZero();
        assertThat(c.out()).contains("CANCELLED").contains("CancelRequested").contains("AbortTransfer").contains("ReleaseDecided");
        assertThat(c.err()).contains("reading"); // --progress draws the bar on stderr
        assertThat(cli("trace", "no-such-request", "--config", config()).exit()).isEqualTo(1);
    }

    @Test
    void anExportReplaysTheSameAndACorruptedOneIsRefused() throws Exception {
        Path all = dir.resolve("run.okvlog");
        CliRun e = cli("export", "--config", config(), "--out", all.toString());
        assertThat(e.exit()).as(e.err()).isZero();
        assertThat(e.out()).contains("SHA-256 ok");
        assertThat(cli("audit", "--config", config(), "--file", all.toString()).out()).contains("CLEAN");

        Path one = dir.resolve("one.okvlog");
        assertThat(cli("export", "--config", config(), "--request", cancelledMidTransferId, "--out", one.toString()).exit()).isZero();
        CliRun replay = cli("replay", "--config", config(), "--file", one.toString());
        assertThat(replay.exit()).as(replay.out()).isZero();
        assertThat(replay.out()).contains("IDENTICAL: 1 request(s) compared");
        // the export keeps every record's timing marks, and the proxy's answer
        CliRun traced = cli("trace", cancelledMidTransferId, "--config", config(), "--file", one.toString());
        assertThat(traced.out()).contains("hops (wall clock").containsPattern("order_to_worker|prefill_to_worker").contains("RequestAnswered");

        byte[] bytes = Files.readAllBytes(all);
        bytes[bytes.length / 2] ^= 0x10;
        Path bad = dir.resolve("bad.okvlog");
        Files.write(bad, bytes);
        CliRun refused = cli("audit", "--config", config(), "--file", bad.toString());
        assertThat(refused.exit()).isEqualTo(2);
        assertThat(refused.out()).isEmpty();
        assertThat(refused.err()).contains("audit: ").contains("bad.okvlog").contains("checksum mismatch").contains("at file offset");
    }

    @Test
    void aMissingClusterIsOneClearLine() {
        CliRun r = cli("audit", "--bootstrap", "127.0.0.1:1", "--timeout", "2s");
        assertThat(r.exit()).isEqualTo(2);
        assertThat(r.err()).contains("cannot reach Kafka at 127.0.0.1:1");
    }
}
