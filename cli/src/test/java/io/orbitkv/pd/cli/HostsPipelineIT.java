package io.orbitkv.pd.cli;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.orbitkv.pd.engine.sim.ModelPreset;
import io.orbitkv.pd.engine.sim.SimModel;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.TransferFailed;
import io.orbitkv.pd.harness.LoadClient;
import io.orbitkv.pd.harness.NetnsHosts;
import io.orbitkv.pd.harness.Pipeline;
import io.orbitkv.pd.harness.PipelineLog;
import io.orbitkv.pd.harness.PipelineSpec;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;

/**
 * The demo's layout over separate network hosts (network namespaces, each with its own address: the broker, the decider,
 * the prefill node, the decode node and the proxy), every listener bound and advertised on its host's address. Answers
 * are verified against the colocated reference, a silent partition of the data plane between the two engine nodes is
 * healed mid-load (the pushes caught in it fail on the sender's io timeout and are retried once it heals), and the
 * whole log audits clean and replays identically. Needs root (CI runs as root).
 */
class HostsPipelineIT {

    @Test
    void theDemosLayoutAcrossFiveHostsSurvivesAHealedPartition() throws Exception {
        Path dir = Files.createDirectories(Path.of("target", "it", "HostsPipelineIT-" + System.nanoTime()).toAbsolutePath());
        PipelineSpec spec = PipelineSpec.defaults().withEngines(1, 1).withModel(ModelPreset.TINY, 512, 0.5, 2).withEngineApi(true).withNetns(true)
                // a cut data plane shows up within 3 s instead of the default 10 s io timeout: the test waits less
                .withExtra(Map.of(), Map.of(), Map.of("transfer.tcp.io-timeout", "3s"), Map.of());
        SimModel model = new SimModel(42);
        String deciderConfig;
        String bootstrap;
        try (Pipeline p = Pipeline.start(spec, dir, System.out::println);
             LoadClient client = new LoadClient(p.proxyUrl(), "orbitkv-sim-tiny", p.deciderUrl(), Duration.ofSeconds(90))) {
            NetnsHosts hosts = p.hosts().orElseThrow();
            assertThat(hosts.hosts()).hasSize(5);
            // every component listens on its own host's address, none on loopback
            assertThat(p.proxyUrl()).contains(hosts.address("proxy"));
            assertThat(p.engines()).allSatisfy(e -> assertThat(e.url()).contains(hosts.address(e.id())));
            bootstrap = p.bootstrapServers();
            assertThat(bootstrap).startsWith(hosts.address("broker-1") + ":");
            deciderConfig = p.dir().resolve("config").resolve("decider.properties").toString();

            List<LoadClient.Result> results = new ArrayList<>(client.run(LoadClient.workload(3, 12, 40, 120, 8, true), 4, () -> { }));

            // The data plane between the two engine nodes goes silent (packets dropped both ways) with pushes under way.
            hosts.cut("prefill-0", "decode-0", NetnsHosts.Cut.DROP);
            CompletableFuture<List<LoadClient.Result>> caught = CompletableFuture.supplyAsync(() -> {
                try {
                    return client.run(LoadClient.workload(4, 6, 40, 120, 8, true), 3, () -> { });
                } catch (InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            });
            await("a push fails in the partition").atMost(Duration.ofSeconds(60)).pollInterval(Duration.ofMillis(500))
                    .until(() -> PipelineLog.read(bootstrap).stories.values().stream()
                            .anyMatch(s -> s.facts.stream().anyMatch(f -> f instanceof TransferFailed)));
            hosts.heal("prefill-0", "decode-0");
            results.addAll(caught.get());
            results.addAll(client.run(LoadClient.workload(5, 8, 40, 120, 8, true), 4, () -> { }));

            // The proxy's host cut from the decode node mid-answer: the silent stream is broken off within
            // proxy.timeout.stream-idle (10 s), not held until the 120 s request timeout.
            double brokenAfter = streamCutMidAnswer(p, hosts);
            assertThat(brokenAfter).as("seconds from the cut until the client's stream ended").isLessThan(15);

            // The prefill node cut from every other host with a request on it: once the proxy's health checks mark it down
            // the request fails over (here: no other prefill engine, so it fails) instead of waiting out the decider's
            // 60 s prefill timeout or the proxy's 120 s request timeout.
            hosts.isolate("prefill-0", NetnsHosts.Cut.DROP);
            long sentAt = System.nanoTime();
            LoadClient.Result lost;
            try {
                lost = client.send(LoadClient.workload(6, 1, 40, 60, 8, false).get(0));
            } finally {
                hosts.healAll("prefill-0");
            }
            double lostAfter = (System.nanoTime() - sentAt) / 1e9;
            assertThat(lost.ok()).isFalse();
            assertThat(lostAfter).as("seconds until the request on the vanished prefill node ended").isLessThan(15);
            await("the prefill node routed to again").atMost(Duration.ofSeconds(30)).pollInterval(Duration.ofMillis(500))
                    .until(() -> client.send(LoadClient.workload(7, 1, 40, 60, 8, false).get(0)).ok());

            assertThat(results).hasSize(26).allSatisfy(r -> {
                assertThat(r.ok()).as("request %s: status %s %s", r.requestId(), r.status(), r.error()).isTrue();
                assertThat(r.text()).isEqualTo(r.request().expected(model));
            });
            PipelineLog[] log = new PipelineLog[1];
            await("every request has its outcome").atMost(Duration.ofSeconds(60)).pollInterval(Duration.ofMillis(500)).until(() -> {
                log[0] = PipelineLog.read(bootstrap);
                return log[0].admitted() >= 29 && log[0].outcomeCount() >= log[0].admitted();
            });
            // every answered request completed; the one broken off mid-answer ended COMPLETED if its engine finished before
            // the proxy's cancel was read, else CANCELLED: one outcome per request either way
            // (and the request lost with the prefill node ended once too; the probes until it was routed to again completed)
            assertThat(log[0].outcomes.keySet()).isSubsetOf(OutcomeKind.COMPLETED, OutcomeKind.CANCELLED, OutcomeKind.FAILED, OutcomeKind.TIMED_OUT);
            assertThat(log[0].outcomes.values().stream().mapToInt(Integer::intValue).sum()).isEqualTo((int) log[0].admitted());
            assertThat(log[0].outcomes.get(OutcomeKind.COMPLETED)).isGreaterThanOrEqualTo(27);

            CliRun audit = cli("audit", "--config", deciderConfig);
            assertThat(audit.exit()).as(audit.out() + audit.err()).isZero();
            assertThat(audit.out()).contains("CLEAN");
            CliRun replay = cli("replay", "--config", deciderConfig);
            assertThat(replay.exit()).as(replay.out() + replay.err()).isZero();
            assertThat(replay.out()).contains("IDENTICAL");
        }
        // everything the rig made is gone with the pipeline
        Process ns = new ProcessBuilder("ip", "netns", "list").redirectErrorStream(true).start();
        String list = new String(ns.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        ns.waitFor();
        String pid36 = Long.toString(ProcessHandle.current().pid(), 36);
        assertThat(list).doesNotContain("okv-" + "0".repeat(5 - pid36.length()) + pid36);
    }

    /** Starts a long streamed answer, cuts the proxy from the decode node after its first chunk, heals; seconds until it ended. */
    private static double streamCutMidAnswer(Pipeline p, NetnsHosts hosts) throws Exception {
        java.net.http.HttpClient http = java.net.http.HttpClient.newHttpClient();
        java.net.http.HttpRequest req = java.net.http.HttpRequest.newBuilder(java.net.URI.create(p.proxyUrl() + "/v1/completions"))
                .header("content-type", "application/json").POST(java.net.http.HttpRequest.BodyPublishers.ofString("{\"model\":"
                        + " \"orbitkv-sim-tiny\", \"prompt\": \"a long story please\", \"max_tokens\": 4000, \"stream\": true}")).build();
        java.net.http.HttpResponse<java.io.InputStream> r = http.send(req, java.net.http.HttpResponse.BodyHandlers.ofInputStream());
        assertThat(r.statusCode()).isEqualTo(200);
        long cutAt;
        StringBuilder body = new StringBuilder();
        try (java.io.InputStream in = r.body()) {
            byte[] buf = new byte[4096];
            int n = in.read(buf);
            assertThat(n).as("a first chunk").isPositive();
            hosts.cut("proxy", "decode-0", NetnsHosts.Cut.DROP);
            cutAt = System.nanoTime();
            try {
                for (; (n = in.read(buf)) > 0; ) {
                    body.append(new String(buf, 0, n, StandardCharsets.UTF_8));
                }
            } catch (java.io.IOException broken) {
                // the proxy broke the stream off: the honest signal mid-answer
            }
        } finally {
            hosts.heal("proxy", "decode-0");
        }
        assertThat(body.toString()).doesNotContain("[DONE]");
        return (System.nanoTime() - cutAt) / 1e9;
    }

    private static CliRun cli(String... args) {
        return CliRun.of(args);
    }
}
