package io.orbitkv.pd.engine.sim;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.engine.client.EngineControl;
import io.orbitkv.pd.engine.client.KvSignal;
import io.orbitkv.pd.schemas.config.ConfigProps;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceContext;
import java.io.InputStream;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.Test;

/**
 * Self-fencing of a decode's lease: with its heartbeats never acknowledged (the engine cut off from Kafka), the engine
 * stops using the lease's pages lease − margin after it sent its decode-ready fact — before the decider, which counts the
 * lease from the fact's later append to the log, could time it out — reports why, and keeps the pages held until a
 * release names them. With heartbeats acknowledged the same decode runs to the end.
 */
class SelfFencingTest {

    /** The engine's control plane; heartbeats acknowledged or never, as asked. */
    static class Control implements EngineControl {
        final boolean partitioned;
        final List<String> log = new CopyOnWriteArrayList<>();

        Control(boolean partitioned) {
            this.partitioned = partitioned;
        }

        @Override public String engineId() { return "d-0"; }
        @Override public long instanceEpoch() { return 1; }
        @Override public CompletableFuture<Void> prefillCompleted(String r, int[] b, int n, Integer f, TraceContext t, Marks m) { return done(); }
        @Override public CompletableFuture<Void> prefillFailed(String r, String why, boolean retriable, TraceContext t, Marks m) { return done(); }
        @Override public CompletableFuture<Void> decodeReady(String r, String l, long e, int[] b, long d, TraceContext t, Marks m) {
            log.add("decode ready");
            return done();
        }
        @Override public CompletableFuture<Void> decodeRejected(String r, String why, TraceContext t, Marks m) { return done(); }
        @Override public CompletableFuture<Void> heartbeat(String r, String l, long e, long x, int seq, TraceContext t, Marks m) {
            log.add("heartbeat");
            return partitioned ? new CompletableFuture<>() : done();
        }
        @Override public CompletableFuture<Void> decodeCompleted(String r, int n, boolean rc, TraceContext t, Marks m) {
            log.add("decode completed");
            return done();
        }
        @Override public CompletableFuture<Void> cancel(String r, String why, TraceContext t, Marks m) {
            log.add("cancel: " + why);
            return done();
        }
        @Override public CompletableFuture<KvSignal> awaitKv(String r) {
            return CompletableFuture.completedFuture(new KvSignal.Ready("o-1", 0, Marks.nowMicros(), Marks.nowMicros(), null, 0));
        }
        @Override public void forget(String r) { }
        @Override public long decisionsSeen() { return 0; }
        @Override public void close() { }

        private static CompletableFuture<Void> done() {
            return CompletableFuture.completedFuture(null);
        }
    }

    private static SimEngineConfig config() {
        return SimEngineConfig.from(ConfigProps.empty().with("engine.id", "d-0").with("engine.role", "decode").with("engine.preset", "tiny")
                .with("engine.http.port", "0").with("engine.kv.verify", "false").with("engine.lease.duration", "1s")
                .with("engine.lease.heartbeat", "200ms").with("engine.lease.margin", "300ms")
                .with("engine.compute.prefill-ms-per-token", "0").with("engine.compute.decode-ms-per-token", "20"));
    }

    /** Streams a 100-token decode (2 s at 20 ms a token); returns the body read until the stream ended or broke. */
    private static String decode(SimEngine e) throws Exception {
        HttpClient http = HttpClient.newHttpClient();
        HttpRequest req = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + e.port() + "/v1/completions"))
                .header("content-type", "application/json").POST(HttpRequest.BodyPublishers.ofString("{\"model\": \"orbitkv-sim-tiny\", \"prompt\": \"a long answer\","
                        + " \"max_tokens\": 100, \"stream\": true, \"kv_transfer_params\": {\"do_remote_prefill\": true, \"request_id\": \"r-1\"}}"))
                .build();
        HttpResponse<InputStream> r = http.send(req, HttpResponse.BodyHandlers.ofInputStream());
        StringBuilder body = new StringBuilder();
        try (InputStream in = r.body()) {
            byte[] buf = new byte[8192];
            for (int n; (n = in.read(buf)) > 0; ) {
                body.append(new String(buf, 0, n, StandardCharsets.UTF_8));
            }
        } catch (java.io.IOException broken) {
            // the answer broke off
        }
        return body.toString();
    }

    @Test
    void aDecodeWhoseLeaseIsNotRenewedStopsBeforeTheLeaseCanExpireAndKeepsItsPages() throws Exception {
        SimEngine e = SimEngine.start(config());
        try {
            Control c = new Control(true);
            e.useControl(c);
            long t0 = System.nanoTime();
            String body = decode(e);
            double seconds = (System.nanoTime() - t0) / 1e9;
            assertThat(seconds).as("stopped within lease - margin (0.7 s) of the decode-ready fact, not after 2 s of decode").isLessThan(1.0);
            assertThat(body).doesNotContain("[DONE]");
            assertThat(c.log).contains("heartbeat").doesNotContain("decode completed");
            assertThat(c.log).anySatisfy(l -> assertThat(l).startsWith("cancel: lease of r-1 on d-0 not renewed in time"));
            assertThat(e.allocatorForTests().usedBlocks()).as("the pages wait for the decider's release").isPositive();
        } finally {
            e.close();
        }
    }

    @Test
    void withItsHeartbeatsAcknowledgedTheSameDecodeRunsToTheEnd() throws Exception {
        SimEngine e = SimEngine.start(config());
        try {
            Control c = new Control(false);
            e.useControl(c);
            String body = decode(e);
            assertThat(body).contains("[DONE]");
            // The completion is reported right after the stream's end is written: the client can read the end first.
            org.awaitility.Awaitility.await().atMost(java.time.Duration.ofSeconds(5)).until(() -> c.log.contains("decode completed"));
            assertThat(c.log).contains("heartbeat", "decode completed").noneMatch(l -> l.startsWith("cancel"));
        } finally {
            e.close();
        }
    }
}
