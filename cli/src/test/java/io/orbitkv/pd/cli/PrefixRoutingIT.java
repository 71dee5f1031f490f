package io.orbitkv.pd.cli;

import static org.assertj.core.api.Assertions.assertThat;
import static io.orbitkv.pd.cli.Completions.complete;
import static io.orbitkv.pd.cli.Completions.text;
import static org.awaitility.Awaitility.await;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.engine.sim.ModelPreset;
import io.orbitkv.pd.harness.Pipeline;
import io.orbitkv.pd.harness.PipelineSpec;
import io.orbitkv.pd.testsupport.kafka.WithKafka;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;

/**
 * Prefix-aware routing end to end (docs/routing.md): a Java and a Python prefill engine report their prefix caches through
 * their workers' engine API, the proxy keeps the index from orbitkv.kv-events, hashes each prompt as the engines do, and
 * sends a prompt again to the engine that holds it — whichever language computed it.
 */
@WithKafka
class PrefixRoutingIT {

    private static final ObjectMapper JSON = new ObjectMapper();
    private final HttpClient http = HttpClient.newHttpClient();

    private JsonNode kvIndex(Pipeline p) throws Exception {
        return JSON.readTree(http.send(HttpRequest.newBuilder(URI.create(p.proxyUrl() + "/kv-index")).build(), HttpResponse.BodyHandlers.ofString()).body());
    }

    @Test
    void aRepeatedPromptGoesToThePrefillEngineThatCachedItJavaOrPython(KraftCluster kafka) throws Exception {
        Path dir = Files.createDirectories(Path.of("target", "it", "PrefixRoutingIT-" + System.nanoTime()).toAbsolutePath());
        PipelineSpec spec = PipelineSpec.defaults().withEngines(2, 1).withModel(ModelPreset.TINY, 512, 0.2, 4).withEngineApi(true)
                .withExtra(Map.of(), Map.of(), Map.of(), Map.of("proxy.routing", "prefix_aware"))
                .withPythonEngines(java.util.Set.of("prefill-1"));
        String p = "the first shared document " + "alpha beta gamma delta ".repeat(30);
        String q = "the second shared document " + "omega sigma kappa theta ".repeat(30);
        try (Pipeline pipeline = Pipeline.start(spec, dir, System.out::println, kafka.bootstrapServers())) {
            // p first (nothing cached: the first engine by id), q while p is still decoding there (q goes to the idle one)
            CompletableFuture<HttpResponse<String>> first = CompletableFuture.supplyAsync(() -> {
                try {
                    return complete(pipeline, p, 64);
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            await().atMost(Duration.ofSeconds(20)).until(() -> kvIndex(pipeline).path("engines").has("prefill-0"));
            HttpResponse<String> second = complete(pipeline, q, 4);
            assertThat(first.get().statusCode()).isEqualTo(200);
            assertThat(second.statusCode()).isEqualTo(200);
            String pAt = first.get().headers().firstValue("x-orbitkv-prefill-engine").orElseThrow();
            String qAt = second.headers().firstValue("x-orbitkv-prefill-engine").orElseThrow();
            assertThat(pAt).isNotEqualTo(qAt);
            await().atMost(Duration.ofSeconds(20)).until(() -> kvIndex(pipeline).path("engines").path(qAt).path("blocks").asInt() > 0);
            for (int i = 0; i < 3; i++) {
                for (String[] x : new String[][] {{p, pAt}, {q, qAt}}) {
                    HttpResponse<String> r = complete(pipeline, x[0], 2);
                    assertThat(r.statusCode()).isEqualTo(200);
                    assertThat(r.headers().firstValue("x-orbitkv-prefill-engine")).contains(x[1]);
                    String[] match = r.headers().firstValue("x-orbitkv-prefix-match").orElseThrow().split("/");
                    assertThat(Integer.parseInt(match[0])).as("every full block of the prompt found cached").isEqualTo(Integer.parseInt(match[1]))
                            .isPositive();
                }
            }
            JsonNode idx = kvIndex(pipeline);
            assertThat(idx.path("caught_up").asBoolean()).isTrue();
            assertThat(idx.path("undecodable").asLong()).isZero();
            assertThat(idx.path("engines").path("prefill-0").path("lost_events").asLong()).isZero();
        }
    }

    @Test
    void aPromptTheDecodeEngineHoldsIsPrefilledThereWithoutAHandoff(KraftCluster kafka) throws Exception {
        Path dir = Files.createDirectories(Path.of("target", "it", "PrefixRoutingIT-local-" + System.nanoTime()).toAbsolutePath());
        PipelineSpec spec = PipelineSpec.defaults().withEngines(1, 1).withModel(ModelPreset.TINY, 512, 0.2, 4).withEngineApi(true)
                .withExtra(Map.of(), Map.of(), Map.of(), Map.of("proxy.routing", "prefix_aware", "proxy.routing.local-prefill", "true"));
        String p = "a conversation so far " + "one two three four five six ".repeat(60); // ~360 tokens: more than 256 to compute
        try (Pipeline pipeline = Pipeline.start(spec, dir, System.out::println, kafka.bootstrapServers())) {
            HttpResponse<String> first = complete(pipeline, p, 8);
            assertThat(first.statusCode()).isEqualTo(200);
            assertThat(first.headers().firstValue("x-orbitkv-route")).isEmpty(); // nothing cached anywhere and a long prompt: P/D
            // the decode engine cached the blocks the transfer brought it
            await().atMost(Duration.ofSeconds(20)).until(() -> kvIndex(pipeline).path("engines").path("decode-0").path("blocks").asInt() > 0);
            HttpResponse<String> again = complete(pipeline, p, 8);
            assertThat(again.statusCode()).isEqualTo(200);
            assertThat(again.headers().firstValue("x-orbitkv-route")).contains("local-prefill");
            assertThat(text(again.body())).isEqualTo(text(first.body())).isNotEmpty();
        }
    }

    /**
     * An engine hashing with another seed than the proxy's settings (vLLM #51875, Dynamo #2981: a silent 0 % hit rate):
     * its registration carries its seed, the proxy shows the difference on {@code /engines} and matches it with its own
     * hashes — a repeated prompt finds every block; and {@code trace} shows the routing decision from the log.
     */
    @Test
    void anEngineOfAnotherSeedIsShownAndMatchedWithItsOwnHashesAndTraceShowsTheDecision(KraftCluster kafka) throws Exception {
        Path dir = Files.createDirectories(Path.of("target", "it", "PrefixRoutingIT-seed-" + System.nanoTime()).toAbsolutePath());
        PipelineSpec spec = PipelineSpec.defaults().withEngines(1, 1).withModel(ModelPreset.TINY, 512, 0.2, 4).withEngineApi(true)
                .withExtra(Map.of(), Map.of("engine.prefix-cache.seed", "salted"), Map.of(), Map.of("proxy.routing", "prefix_aware"))
                .withPythonEngines(java.util.Set.of("prefill-0"));
        String p = "a document hashed with a salt " + "red green blue yellow ".repeat(30);
        try (Pipeline pipeline = Pipeline.start(spec, dir, System.out::println, kafka.bootstrapServers())) {
            JsonNode engines = JSON.readTree(http.send(HttpRequest.newBuilder(URI.create(pipeline.proxyUrl() + "/engines")).build(),
                    HttpResponse.BodyHandlers.ofString()).body());
            assertThat(engines.path("prefill-0").path("hashing").asText()).contains("seed salted").contains("matched with its own");
            assertThat(engines.path("prefill-0").path("block_hashing").asText()).isEqualTo("sha256_cbor/seed=salted/16 tokens");
            assertThat(complete(pipeline, p, 2).statusCode()).isEqualTo(200);
            await().atMost(Duration.ofSeconds(20)).until(() -> kvIndex(pipeline).path("engines").path("prefill-0").path("blocks").asInt() > 0);
            HttpResponse<String> again = complete(pipeline, p, 2);
            assertThat(again.statusCode()).isEqualTo(200);
            String[] match = again.headers().firstValue("x-orbitkv-prefix-match").orElseThrow().split("/");
            assertThat(Integer.parseInt(match[0])).as("found with the engine's own seed").isEqualTo(Integer.parseInt(match[1])).isPositive();
            String id = again.headers().firstValue("x-orbitkv-request-id").orElseThrow();
            String config = pipeline.child("decider").config().toString();
            await().atMost(Duration.ofSeconds(20)).untilAsserted(() -> {
                CliRun t = CliRun.of("trace", id, "--config", config, "--full");
                assertThat(t.out()).contains("routing={prefix_aware rule=prefix_score").contains("prefill=[prefill-0 " + match[0] + " cached")
                        .contains("hashing: seed salted");
            });
        }
    }

    /**
     * Under a policy that does not route by the cache (the default), the proxy still looks the prompt up in the KV index for
     * the log, but after the dispatch, off the request's path: the answer's record carries the lookup all the same.
     */
    @Test
    void theDefaultPolicyLogsTheLookupItDidOffTheRequestsPath(KraftCluster kafka) throws Exception {
        Path dir = Files.createDirectories(Path.of("target", "it", "PrefixRoutingIT-load-" + System.nanoTime()).toAbsolutePath());
        PipelineSpec spec = PipelineSpec.defaults().withEngines(1, 1).withModel(ModelPreset.TINY, 512, 0.2, 4).withEngineApi(true);
        String p = "a document looked up for the log " + "one two three four ".repeat(30);
        try (Pipeline pipeline = Pipeline.start(spec, dir, System.out::println, kafka.bootstrapServers())) {
            assertThat(complete(pipeline, p, 2).statusCode()).isEqualTo(200);
            await().atMost(Duration.ofSeconds(20)).until(() -> kvIndex(pipeline).path("engines").path("prefill-0").path("blocks").asInt() > 0);
            HttpResponse<String> again = complete(pipeline, p, 2);
            assertThat(again.statusCode()).isEqualTo(200);
            assertThat(again.headers().firstValue("x-orbitkv-prefix-match")).isEmpty(); // nothing was chosen by it
            String id = again.headers().firstValue("x-orbitkv-request-id").orElseThrow();
            String config = pipeline.child("decider").config().toString();
            await().atMost(Duration.ofSeconds(20)).untilAsserted(() -> {
                CliRun t = CliRun.of("trace", id, "--config", config, "--full");
                assertThat(t.out()).contains("routing={least_in_flight rule=load").containsPattern("prefill=\\[prefill-0 [1-9][0-9]* cached");
            });
        }
    }

    private static long kvBytes(String sse) throws Exception {
        long bytes = -1;
        for (String line : sse.split("\n")) {
            if (line.startsWith("data: {")) {
                JsonNode n = JSON.readTree(line.substring(6));
                if (n.has("orbitkv")) {
                    bytes = n.path("orbitkv").path("kv_bytes").asLong(-1);
                }
            }
        }
        return bytes;
    }

    /**
     * Move only what is missing: the decode engine holds the blocks an earlier transfer brought, says so in its decode-ready,
     * and the order moves only the blocks after them — the answer the same as the model's, the audit clean.
     */
    @Test
    void theDecodeEngineSaysWhatItHoldsAndOnlyTheRestMoves(KraftCluster kafka) throws Exception {
        Path dir = Files.createDirectories(Path.of("target", "it", "PrefixRoutingIT-partial-" + System.nanoTime()).toAbsolutePath());
        PipelineSpec spec = PipelineSpec.defaults().withEngines(1, 1).withModel(ModelPreset.TINY, 512, 0.2, 4).withEngineApi(true)
                .withExtra(Map.of(), Map.of(), Map.of(), Map.of("proxy.routing", "prefix_aware"));
        String history = "a long shared document " + "north south east west ".repeat(60);
        String longer = history + " and a new question about it at the end";
        try (Pipeline pipeline = Pipeline.start(spec, dir, System.out::println, kafka.bootstrapServers())) {
            HttpResponse<String> first = complete(pipeline, history, 4);
            assertThat(first.statusCode()).isEqualTo(200);
            long whole = kvBytes(first.body());
            assertThat(whole).isPositive();
            await().atMost(Duration.ofSeconds(20)).until(() -> kvIndex(pipeline).path("engines").path("decode-0").path("blocks").asInt() > 0);
            HttpResponse<String> second = complete(pipeline, longer, 4);
            assertThat(second.statusCode()).isEqualTo(200);
            long moved = kvBytes(second.body());
            long blockBytes = ModelPreset.TINY.geometry(1, 1).bytesPerBlock();
            assertThat(moved).as("only the blocks after the decode engine's cached prefix moved").isPositive().isLessThanOrEqualTo(4L * blockBytes)
                    .isLessThan(whole);
            assertThat(text(second.body())).isEqualTo(new io.orbitkv.pd.engine.sim.SimModel(42).answer(longer, 4));
            String config = pipeline.child("decider").config().toString();
            await().atMost(Duration.ofSeconds(30)).untilAsserted(() -> {
                CliRun a = CliRun.of("audit", "--config", config);
                assertThat(a.exit()).as(a.out() + a.err()).isZero();
                assertThat(a.out()).contains("CLEAN");
            });
        }
    }
}
