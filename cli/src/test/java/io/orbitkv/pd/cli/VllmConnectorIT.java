package io.orbitkv.pd.cli;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.engine.sim.ModelPreset;
import io.orbitkv.pd.engine.sim.SimModel;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.PrefillFailed;
import io.orbitkv.pd.events.RecomputeDecided;
import io.orbitkv.pd.harness.LoadClient;
import io.orbitkv.pd.harness.LoadClient.Cancel;
import io.orbitkv.pd.harness.LoadClient.Request;
import io.orbitkv.pd.harness.LoadClient.Result;
import io.orbitkv.pd.harness.Pipeline;
import io.orbitkv.pd.harness.PipelineLog;
import io.orbitkv.pd.harness.PipelineSpec;
import io.orbitkv.pd.testsupport.kafka.WithKafka;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;

/**
 * The pipeline with both engines' P/D flow going through the vLLM connector ({@code orbitkv_pd.vllm}), called as vLLM's
 * scheduler and model runner call it ({@code engine.vllm-connector=true}: {@code orbitkv_pd.vllm_sim}): every answer is
 * the model's, and a client that walks away mid-prefill, one that walks away while its push is in flight (held once
 * started: {@code worker.fault.hold-push-prefix}), a decode lease that expires (a prefill that stalls, a decode that
 * stops renewing) and a prefill that fails (recomputed on the decode engine, vLLM's {@code kv_load_failure_policy}
 * recompute) each end as the decider decides; every page comes back and the log audits clean.
 */
@WithKafka
class VllmConnectorIT {

    private static final ObjectMapper JSON = new ObjectMapper();

    @Test
    void thePipelineRunsThroughTheConnectorWithACancelALeaseExpiryAndAPrefillFailure(KraftCluster kafka) throws Exception {
        Path dir = Files.createDirectories(Path.of("target", "it", "VllmConnectorIT-" + System.nanoTime()).toAbsolutePath());
        PipelineSpec spec = PipelineSpec.defaults().withEngines(1, 1).withModel(ModelPreset.TINY, 512, 0.5, 2)
                .withPythonEngines(Set.of("prefill-0", "decode-0"))
                .withExtra(Map.of(), Map.of("engine.vllm-connector", "true", "engine.lease.duration", "6s", "engine.lease.heartbeat", "1s",
                                "engine.fault.stall-prefill-prefix", "expire-", "engine.fault.no-heartbeat-prefix", "expire-",
                                "engine.fault.fail-prefill-prefix", "fail-"),
                        // pushes of held-* requests wait once started (worker.fault.hold-push-prefix): a cancel meets one in flight
                        Map.of("worker.fault.hold-push-prefix", "held-", "worker.fault.hold-push", "20s"), Map.of("proxy.fallback.recompute", "true"));
        SimModel model = new SimModel(42);
        try (Pipeline pipeline = Pipeline.start(spec, dir, System.out::println, kafka.bootstrapServers());
             LoadClient client = new LoadClient(pipeline.proxyUrl(), "orbitkv-sim-tiny", pipeline.deciderUrl())) {
            // the lease expiry takes its 6 s: started first, beside the rest
            String expireId = "expire-" + System.nanoTime();
            Request expire = new Request(1000, false, "a prefill that stalls while its decode stops renewing", 4, false, false, Cancel.NONE, 0);
            CompletableFuture<Result> expired = CompletableFuture.supplyAsync(() -> client.sendAs(expireId, expire));

            List<Request> normal = new ArrayList<>(LoadClient.workload(7, 24, 20, 120, 8, false));
            for (int i = 0; i < normal.size(); i += 2) {
                Request r = normal.get(i);
                normal.set(i, new Request(r.index(), r.chat(), r.prompt(), r.maxTokens(), true, false, Cancel.NONE, 0));
            }
            List<Result> results = client.run(normal, 4, () -> { });
            for (Result r : results) {
                assertThat(r.ok()).as("request %d: %d %s", r.request().index(), r.status(), r.error()).isTrue();
                assertThat(r.text()).as("answer of %d", r.request().index()).isEqualTo(r.request().expected(model));
                assertThat(r.mode()).isEqualTo("decode");
            }

            // a prefill that fails: the decider has the decode engine recompute it, and the answer is still the model's
            String failId = "fail-" + System.nanoTime();
            Request fail = new Request(2000, false, "a prefill that fails on the prefill engine", 6, true, false, Cancel.NONE, 0);
            Result failed = client.sendAs(failId, fail);
            assertThat(failed.ok()).as("%d %s", failed.status(), failed.error()).isTrue();
            assertThat(failed.text()).isEqualTo(fail.expected(model));
            assertThat(failed.mode()).isEqualTo("recomputed");

            // a client that walks away while the (long) prompt is prefilled: ~1,500 tokens at 0.5 ms each
            String cancelId = "walk-away-" + System.nanoTime();
            Request walk = new Request(3000, false, "walk away " + "while it computes ".repeat(500), 8, true, false, Cancel.AFTER_DELAY, 150);
            Result walked = client.sendAs(cancelId, walk);
            assertThat(walked.walkedAway()).isTrue();

            // a client that walks away while its push is in flight (held once started): the decider aborts the push
            String heldId = "held-" + System.nanoTime();
            Request held = new Request(4000, false, "a push the cancel meets in flight", 8, true, false, Cancel.WHILE_TRANSFERRING, 0);
            Result heldResult = client.sendAs(heldId, held);
            assertThat(heldResult.walkedAway()).isTrue();

            Result exp = expired.get();
            System.out.println("lease expiry: status " + exp.status() + " mode " + exp.mode() + " " + exp.error());

            PipelineLog[] log = new PipelineLog[1];
            await().atMost(Duration.ofSeconds(60)).pollInterval(Duration.ofMillis(500)).until(() -> {
                log[0] = PipelineLog.read(pipeline.bootstrapServers());
                return log[0].outcomeCount() >= log[0].admitted() && log[0].admitted() >= results.size() + 4;
            });
            PipelineLog l = log[0];
            for (Result r : results) {
                assertThat(l.stories.get(r.requestId()).outcomes.get(0).getKind()).as(r.requestId()).isEqualTo(OutcomeKind.COMPLETED);
            }
            PipelineLog.Story f = l.stories.get(failId);
            assertThat(f.facts).anyMatch(x -> x instanceof PrefillFailed);
            assertThat(f.decisions).anyMatch(x -> x instanceof RecomputeDecided);
            assertThat(f.outcomes.get(0).getKind()).isEqualTo(OutcomeKind.COMPLETED);
            assertThat(l.stories.get(cancelId).outcomes.get(0).getKind()).isEqualTo(OutcomeKind.CANCELLED);
            PipelineLog.Story h = l.stories.get(heldId);
            assertThat(h.outcomes.get(0).getKind()).isEqualTo(OutcomeKind.CANCELLED);
            assertThat(h.facts).anyMatch(x -> x instanceof io.orbitkv.pd.events.TransferStarted);
            assertThat(h.decisions).anyMatch(x -> x instanceof io.orbitkv.pd.events.AbortTransfer);
            assertThat(h.facts).anyMatch(x -> x instanceof io.orbitkv.pd.events.TransferFailed tf && tf.getReason().contains("held"));
            assertThat(l.stories.get(expireId).outcomes.get(0).getKind()).as("the decode lease that was not renewed")
                    .isEqualTo(OutcomeKind.TIMED_OUT);

            // every page comes back: the prefill's once the decider released them, the decodes' as vLLM frees them
            HttpClient http = HttpClient.newHttpClient();
            for (Pipeline.Engine e : pipeline.engines()) {
                await().atMost(Duration.ofSeconds(30)).pollInterval(Duration.ofMillis(300)).untilAsserted(() -> {
                    JsonNode st = JSON.readTree(http.send(HttpRequest.newBuilder(URI.create(e.url() + "/stats")).build(),
                            HttpResponse.BodyHandlers.ofString()).body());
                    assertThat(st.path("blocks_used").asInt()).as("blocks still used on %s: %s", e.id(), st).isZero();
                    assertThat(st.path("kv_corrupt").asInt()).isZero();
                });
            }
            String config = pipeline.child("decider").config().toString();
            await().atMost(Duration.ofSeconds(30)).untilAsserted(() -> {
                CliRun a = CliRun.of("audit", "--config", config);
                assertThat(a.exit()).as(a.out() + a.err()).isZero();
                assertThat(a.out()).contains("CLEAN");
            });
        }
    }
}
