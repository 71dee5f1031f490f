package io.orbitkv.pd.engine.sim;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;

/**
 * A simulated engine computes one step at a time (real HTTP, a standalone colocated engine): concurrent requests share
 * steps, a repeated prompt is served from the prefix cache, and a request whose KV could never fit is refused.
 */
class SteppingEngineTest {

    private static SimEngine engine(String... kv) throws Exception {
        ConfigProps p = ConfigProps.empty().with("engine.id", "c-0").with("engine.preset", "tiny").with("engine.http.port", "0")
                .with("engine.pool.blocks", "64").with("engine.compute.prefill-ms-per-token", "0.01").with("engine.compute.decode-ms-per-token", "1");
        for (int i = 0; i < kv.length; i += 2) {
            p = p.with(kv[i], kv[i + 1]);
        }
        return SimEngine.start(SimEngineConfig.from(p));
    }

    private static CompletableFuture<HttpResponse<String>> complete(SimEngine e, String prompt, int maxTokens, boolean stream) {
        HttpRequest req = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + e.port() + "/v1/completions"))
                .header("content-type", "application/json").POST(HttpRequest.BodyPublishers.ofString("{\"model\": \"orbitkv-sim-tiny\","
                        + " \"prompt\": \"" + prompt + "\", \"max_tokens\": " + maxTokens + ", \"stream\": " + stream + "}")).build();
        return HttpClient.newHttpClient().sendAsync(req, HttpResponse.BodyHandlers.ofString());
    }

    private static JsonNode model(SimEngine e) throws Exception {
        HttpRequest req = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + e.port() + "/stats")).build();
        return SimEngine.JSON.readTree(HttpClient.newHttpClient().send(req, HttpResponse.BodyHandlers.ofString()).body()).path("model");
    }

    @Test
    void concurrentRequestsDecodeInTheSameSteps() throws Exception {
        try (SimEngine e = engine()) {
            var a = complete(e, "one prompt of a few words", 40, true);
            var b = complete(e, "another prompt with other words", 40, false);
            assertThat(a.get().statusCode()).isEqualTo(200);
            assertThat(b.get().statusCode()).isEqualTo(200);
            assertThat(a.get().body()).contains("[DONE]");
            JsonNode m = model(e);
            // alone, 2 × 40 tokens take at least 80 steps; batched they share most of them
            assertThat(m.path("steps").asLong()).isLessThan(80);
            assertThat(m.path("mean_tokens_per_step").asDouble()).isGreaterThan(1.0);
            assertThat(m.path("running").asInt()).isZero();
            assertThat(m.path("kv_blocks_used").asInt()).isZero();
        }
    }

    @Test
    void aRepeatedPromptIsServedFromThePrefixCache() throws Exception {
        String prompt = "w ".repeat(40).trim(); // 40 tokens: 2 full blocks of 16
        try (SimEngine e = engine()) {
            assertThat(complete(e, prompt, 2, false).get().statusCode()).isEqualTo(200);
            assertThat(model(e).path("prefix_cache").path("hit_tokens").asLong()).isZero();
            assertThat(complete(e, prompt, 2, false).get().statusCode()).isEqualTo(200);
            JsonNode pc = model(e).path("prefix_cache");
            assertThat(pc.path("hit_tokens").asLong()).isEqualTo(32);
            assertThat(pc.path("queried_tokens").asLong()).isEqualTo(80);
        }
        try (SimEngine e = engine("engine.prefix-cache.enabled", "false")) {
            complete(e, prompt, 2, false).get();
            complete(e, prompt, 2, false).get();
            assertThat(model(e).path("prefix_cache").path("hit_tokens").asLong()).isZero();
        }
    }

    @Test
    void aRequestWhoseKvCouldNeverFitIsRefused() throws Exception {
        try (SimEngine e = engine()) {
            HttpResponse<String> r = complete(e, "a short prompt", 64 * 16, false).get();
            assertThat(r.statusCode()).isEqualTo(400);
            assertThat(r.body()).contains("max_tokens").contains("needs more KV than engine c-0 has (64 blocks of 16 tokens)");
        }
    }

    @Test
    void aRequestThatFindsThePoolFullWaitsForPagesAsVllmDoesOrIsRefusedWithoutKvWait() throws Exception {
        String a = "w ".repeat(640).trim(); // 40 of the pool's 64 blocks, held while 100 tokens decode at 10 ms each
        String b = "x ".repeat(640).trim();
        try (SimEngine e = engine("engine.compute.decode-ms-per-token", "10")) {
            var first = complete(e, a, 100, false);
            org.awaitility.Awaitility.await().pollInterval(java.time.Duration.ofMillis(5)).atMost(java.time.Duration.ofSeconds(5))
                    .until(() -> e.allocatorForTests().usedBlocks() > 0);
            var second = complete(e, b, 4, false);
            org.awaitility.Awaitility.await().pollInterval(java.time.Duration.ofMillis(5)).atMost(java.time.Duration.ofSeconds(5))
                    .until(() -> model(e).path("waiting_for_kv").asInt() == 1);
            assertThat(first.get().statusCode()).isEqualTo(200);
            assertThat(second.get().statusCode()).as("served once the first freed its pages").isEqualTo(200);
            assertThat(model(e).path("waiting_for_kv").asInt()).isZero();
        }
        try (SimEngine e = engine("engine.kv-wait", "0s", "engine.compute.decode-ms-per-token", "10")) {
            var first = complete(e, a, 100, false);
            org.awaitility.Awaitility.await().pollInterval(java.time.Duration.ofMillis(5)).atMost(java.time.Duration.ofSeconds(5))
                    .until(() -> e.allocatorForTests().usedBlocks() > 0);
            HttpResponse<String> second = complete(e, b, 4, false).get();
            assertThat(second.statusCode()).isEqualTo(503);
            assertThat(second.body()).contains("has no free KV blocks for 40 blocks");
            assertThat(first.get().statusCode()).isEqualTo(200);
        }
    }

    @Test
    void aClientThatLeavesWhileItsPromptComputesLeavesNothingHeld() throws Exception {
        // 200 prompt tokens at 1 ms each: the client is long gone before the prompt is computed. The engine learns that
        // from a write that fails (the HTTP server does not read while a request is in flight), so the answer's 50 tokens
        // take 10 ms each: at 1 ms the whole answer could be out before the failed write is seen
        try (SimEngine e = engine("engine.compute.prefill-ms-per-token", "1", "engine.compute.decode-ms-per-token", "10")) {
            String body = "{\"model\": \"orbitkv-sim-tiny\", \"prompt\": \"" + "w ".repeat(200).trim() + "\", \"max_tokens\": 50, \"stream\": true}";
            try (java.net.Socket s = new java.net.Socket("127.0.0.1", e.port())) {
                s.getOutputStream().write(("POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: "
                        + body.length() + "\r\n\r\n" + body).getBytes(java.nio.charset.StandardCharsets.UTF_8));
                s.getOutputStream().flush();
                org.awaitility.Awaitility.await().atMost(java.time.Duration.ofSeconds(5)).until(() -> model(e).path("running").asInt() == 1);
            }
            org.awaitility.Awaitility.await().atMost(java.time.Duration.ofSeconds(10)).untilAsserted(() -> {
                assertThat(e.allocatorForTests().usedBlocks()).isZero();
                JsonNode m = model(e);
                assertThat(m.path("running").asInt() + m.path("waiting").asInt()).isZero();
            });
            // it left before its 50 tokens were decoded (once the engine saw the connection gone)
            assertThat(model(e).path("steps").asLong()).isLessThan(50);
        }
    }

    @Test
    void whatTheCacheGainsAndLosesIsReportedAsKvCacheEvents() throws Exception {
        java.util.List<Object> events = new java.util.concurrent.CopyOnWriteArrayList<>();
        // a pool of 4 blocks: the second prompt's blocks evict the first's
        try (SimEngine e = engine("engine.pool.blocks", "4")) {
            e.useControl(new SelfFencingTest.Control(false) {
                @Override
                public java.util.concurrent.CompletableFuture<Void> kvEvents(java.util.List<Object> payloads) {
                    events.addAll(payloads);
                    return java.util.concurrent.CompletableFuture.completedFuture(null);
                }
            });
            String a = "w ".repeat(40).trim(); // 40 tokens: 2 full blocks
            assertThat(complete(e, a, 2, false).get().statusCode()).isEqualTo(200);
            assertThat(complete(e, a, 2, false).get().statusCode()).isEqualTo(200); // all cached: nothing new
            assertThat(complete(e, "v ".repeat(50).trim(), 2, false).get().statusCode()).isEqualTo(200); // 3 blocks: 1 evicted
            org.awaitility.Awaitility.await().atMost(java.time.Duration.ofSeconds(5)).until(() -> events.size() >= 3);
            assertThat(events).extracting(x -> x.getClass().getSimpleName()).containsExactly("BlockStored", "BlockStored", "BlockRemoved");
            io.orbitkv.pd.events.BlockStored first = (io.orbitkv.pd.events.BlockStored) events.get(0);
            assertThat(first.getBlockHashes()).hasSize(2);
            assertThat(first.getTokenIds()).hasSize(32);
            assertThat(first.getBlockSize()).isEqualTo(16);
            assertThat(first.getParentBlockHash()).isNull();
            // the first prompt's tail goes, its head stays (vLLM frees a request's blocks tail first)
            assertThat(((io.orbitkv.pd.events.BlockRemoved) events.get(2)).getBlockHashes()).containsExactly(first.getBlockHashes().get(1));
        }
    }
}
