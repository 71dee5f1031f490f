package io.orbitkv.pd.cli;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpServer;
import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.decider.DeciderApp;
import io.orbitkv.pd.decider.DeciderConfig;
import io.orbitkv.pd.engine.client.api.ApiProtocol;
import io.orbitkv.pd.engine.client.api.EngineApiClient;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.proxy.OrbitProxy;
import io.orbitkv.pd.proxy.ProxyConfig;
import io.orbitkv.pd.schemas.config.ConfigProps;
import io.orbitkv.pd.testsupport.kafka.WithKafka;
import io.orbitkv.pd.worker.WorkerApp;
import io.orbitkv.pd.worker.WorkerConfig;
import io.orbitkv.pd.worker.WorkerHttpConfig;
import java.net.InetSocketAddress;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.streams.KafkaStreams;
import org.junit.jupiter.api.Test;

/**
 * {@code /health/live} and {@code /health/ready} on real components and a real broker: the decider is ready only once
 * Streams runs; a worker on the engine API only once its engine said hello; a proxy only once the decider knows a
 * prefill and a decode engine it can route to. Live all along. The proxy's API keys and rate limits on real HTTP too.
 */
@WithKafka
class HealthProbesIT {

    private static final ObjectMapper JSON = new ObjectMapper();
    private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();

    private record Probe(int status, JsonNode body) { }

    private Probe get(String url) throws Exception {
        HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create(url)).timeout(Duration.ofSeconds(5)).build(),
                HttpResponse.BodyHandlers.ofString());
        return new Probe(r.statusCode(), JSON.readTree(r.body()));
    }

    @Test
    void eachComponentIsReadyOnlyOnceItCanDoItsJob(KraftCluster kafka) throws Exception {
        String prefix = "health" + System.nanoTime() % 100_000 + ".";
        Path dir = Files.createTempDirectory("orbitkv-health-it");
        ConfigProps common = ConfigProps.empty().with("bootstrap.servers", kafka.bootstrapServers()).with("topics.prefix", prefix)
                .with("topics.partitions", "2").with("topics.retention", "1h").with("auth.key", "health-it-auth-key-0123456789");
        List<AutoCloseable> closing = new ArrayList<>();
        // The engines' own HTTP: the proxy checks an engine's /health before it routes to it.
        HttpServer engineHttp = HttpServer.create(new InetSocketAddress("127.0.0.1", 0), 0);
        engineHttp.createContext("/health", ex -> {
            byte[] ok = "{\"status\":\"ok\"}".getBytes();
            ex.sendResponseHeaders(200, ok.length);
            ex.getResponseBody().write(ok);
            ex.close();
        });
        engineHttp.start();
        String engineUrl = "http://127.0.0.1:" + engineHttp.getAddress().getPort();
        try {
            DeciderApp decider = new DeciderApp(DeciderConfig.from(common.with("decider.application.id", "health-" + prefix)
                    .with("decider.state.dir", dir.resolve("state").toString()).with("decider.store", "in_memory")
                    .with("decider.http.port", "0"))).start();
            closing.add(decider);
            // Ready exactly when Streams runs: every "not ready" names Streams' state, and the first "ready" finds it RUNNING.
            List<String> reasons = new ArrayList<>();
            await().atMost(Duration.ofSeconds(90)).until(() -> {
                assertThat(get(decider.httpUrl() + "/health/live").status()).isEqualTo(200);
                Probe p = get(decider.httpUrl() + "/health/ready");
                if (p.status() != 200) {
                    reasons.add(p.body().path("reason").asText());
                    return false;
                }
                assertThat(decider.streams().state()).isEqualTo(KafkaStreams.State.RUNNING);
                return true;
            });
            assertThat(reasons).allSatisfy(r -> assertThat(r).startsWith("Kafka Streams is "));

            WorkerApp decode = worker(common, dir, "decode-h", closing);
            String decodeUrl = "http://" + decode.httpAddress().orElseThrow();
            Probe waiting = get(decodeUrl + "/health/ready");
            assertThat(waiting.status()).isEqualTo(503);
            assertThat(waiting.body().path("reason").asText()).startsWith("no engine registered yet");
            assertThat(get(decodeUrl + "/health/live").status()).isEqualTo(200);

            Path keys = Files.writeString(dir.resolve("api-keys"), "team-a  key-of-team-a-0123456789  1\n");
            OrbitProxy proxy = OrbitProxy.start(ProxyConfig.from(common.with("proxy.id", "proxy-h").with("proxy.http.port", "0")
                    .with("proxy.decider.url", decider.httpUrl()).with("proxy.engines.refresh", "200ms")
                    .with("proxy.auth.keys-file", keys.toString())), prompt -> prompt.length());
            closing.add(proxy);
            Probe noEngines = get(proxy.url() + "/health/ready");
            assertThat(noEngines.status()).isEqualTo(503);
            assertThat(noEngines.body().path("reason").asText()).isEqualTo("no prefill engine to route to");
            assertThat(get(proxy.url() + "/health/live").status()).isEqualTo(200);

            // The decode engine says hello: its worker is ready at once; the proxy still has no prefill engine.
            closing.add(hello(dir, decode, "decode-h", EngineRole.DECODE, engineUrl));
            assertThat(get(decodeUrl + "/health/ready").status()).isEqualTo(200);
            Probe decodeOnly = get(proxy.url() + "/health/ready");
            assertThat(decodeOnly.status()).isEqualTo(503);
            assertThat(decodeOnly.body().path("reason").asText()).isEqualTo("no prefill engine to route to");

            WorkerApp prefill = worker(common, dir, "prefill-h", closing);
            closing.add(hello(dir, prefill, "prefill-h", EngineRole.PREFILL, engineUrl));
            await().atMost(Duration.ofSeconds(30)).until(() -> get(proxy.url() + "/health/ready").status() == 200);
            assertThat(get(proxy.url() + "/health/ready").body().path("status").asText()).isEqualTo("ready");

            // With API keys: /v1/* wants one (401), a valid key passes, past its rate (1/s) a 429 says when to retry;
            // the probes never ask for a key.
            HttpResponse<String> none = http.send(HttpRequest.newBuilder(URI.create(proxy.url() + "/v1/models")).build(),
                    HttpResponse.BodyHandlers.ofString());
            assertThat(none.statusCode()).isEqualTo(401);
            assertThat(none.headers().firstValue("WWW-Authenticate")).hasValue("Bearer");
            HttpRequest withKey = HttpRequest.newBuilder(URI.create(proxy.url() + "/v1/models"))
                    .header("Authorization", "Bearer key-of-team-a-0123456789").build();
            assertThat(http.send(withKey, HttpResponse.BodyHandlers.ofString()).statusCode()).isNotIn(401, 429);
            HttpResponse<String> limited = http.send(withKey, HttpResponse.BodyHandlers.ofString());
            assertThat(limited.statusCode()).isEqualTo(429);
            assertThat(limited.headers().firstValue("Retry-After")).hasValue("1");
            assertThat(JSON.readTree(limited.body()).path("error").path("message").asText()).contains("team-a");
        } finally {
            for (int i = closing.size() - 1; i >= 0; i--) {
                closing.get(i).close();
            }
            engineHttp.stop(0);
        }
    }

    /** A worker on the engine API with its HTTP endpoint on: it runs before any engine registers. */
    private static WorkerApp worker(ConfigProps common, Path dir, String engine, List<AutoCloseable> closing) throws Exception {
        ConfigProps p = common.with("worker.engine.id", engine).with("worker.engine-api.path", dir.resolve(engine + ".sock").toString())
                .with("worker.http.port", "0").with("worker.commit.interval", "100ms");
        WorkerApp w = new WorkerApp(WorkerConfig.from(p), WorkerHttpConfig.from(p)).start();
        closing.add(w);
        return w;
    }

    /** The engine's hello through the engine API (its pool a shared-memory file), as an engine in any language sends it. */
    private static AutoCloseable hello(Path dir, WorkerApp worker, String engine, EngineRole role, String httpUrl) throws Exception {
        KvGeometry g = new KvGeometry(2, KvSplit.SEPARATE, 16, 8, 128, Dtype.BF16, 32 * 1024, 32);
        Path pool = Path.of("/dev/shm", "orbitkv-health-it-" + ProcessHandle.current().pid() + "-" + engine);
        HostKvPool.ensureFile(g, pool);
        EngineApiClient c = EngineApiClient.connect(worker.config().engineApi().path(), new EngineApiClient.Registration(engine, 1, role,
                "sim-test", httpUrl, g.toLayout(0, 1), new ApiProtocol.PoolSpec(ApiProtocol.PoolSpec.SHM, pool.toString(), 0, List.of())),
                null, Duration.ofSeconds(10));
        return () -> {
            c.close();
            Files.deleteIfExists(pool);
        };
    }
}
