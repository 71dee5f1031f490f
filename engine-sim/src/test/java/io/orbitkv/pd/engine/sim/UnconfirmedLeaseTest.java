package io.orbitkv.pd.engine.sim;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.engine.client.KvSignal;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.schemas.config.ConfigProps;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceContext;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.Test;

/**
 * A decode engine cut off from Kafka before its KV arrived: nothing acknowledges its decode-ready fact or its heartbeats,
 * so the decider may never see the lease (it waits up to its 60 s decode-ready timeout) and the KV never comes. The engine
 * gives the request back within {@code engine.kv.confirm-timeout} (a 503 before any byte of the answer: the proxy tries
 * other engines) instead of holding its client until the lease's end (the partitions chaos run: 13 clients past 30 s),
 * and keeps the pages until the request's outcome says the decider never knew them.
 */
class UnconfirmedLeaseTest {

    /** Kafka unreachable: no lease fact is ever acknowledged, and no KV comes. */
    static final class CutOff extends SelfFencingTest.Control {
        CutOff() {
            super(true);
        }

        @Override
        public CompletableFuture<Void> decodeReady(String r, String l, long e, int[] b, long d, TraceContext t, Marks m) {
            log.add("decode ready");
            return new CompletableFuture<>();
        }

        @Override
        public CompletableFuture<KvSignal> awaitKv(String r) {
            return new CompletableFuture<>();
        }
    }

    @Test
    void aDecodeWhoseLeaseNobodyAcknowledgesIsGivenBackBeforeItsKvAndKeepsItsPages() throws Exception {
        // A 30 s lease (the default): self-fencing alone would hold the client ~27 s.
        SimEngine e = SimEngine.start(SimEngineConfig.from(ConfigProps.empty().with("engine.id", "d-0").with("engine.role", "decode")
                .with("engine.preset", "tiny").with("engine.http.port", "0").with("engine.kv.verify", "false")
                .with("engine.kv.confirm-timeout", "800ms")));
        try {
            CutOff c = new CutOff();
            e.useControl(c);
            long t0 = System.nanoTime();
            HttpResponse<String> r = HttpClient.newHttpClient().send(HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + e.port()
                    + "/v1/completions")).header("content-type", "application/json").POST(HttpRequest.BodyPublishers.ofString(
                    "{\"model\": \"orbitkv-sim-tiny\", \"prompt\": \"a prompt\", \"max_tokens\": 4, \"kv_transfer_params\":"
                            + " {\"do_remote_prefill\": true, \"request_id\": \"r-1\"}}")).build(), HttpResponse.BodyHandlers.ofString());
            double seconds = (System.nanoTime() - t0) / 1e9;
            assertThat(r.statusCode()).isEqualTo(503);
            assertThat(r.body()).contains("lease_unconfirmed").contains("engine.kv.confirm-timeout");
            assertThat(seconds).as("confirm timeout 0.8 s + a heartbeat period 0.2 s, not the 27 s of the lease").isBetween(0.7, 3.0);
            assertThat(c.log).contains("decode ready", "heartbeat").anySatisfy(l -> assertThat(l).startsWith("cancel: lease of r-1 on d-0 unconfirmed"));
            assertThat(e.allocatorForTests().usedBlocks()).as("the decode-ready may be in the log: the pages stay").isPositive();
            Decision d = new Decision();
            d.setRequestId("r-1");
            e.decisionsForTests().onOutcome(d, new RequestOutcome());
            assertThat(e.allocatorForTests().usedBlocks()).as("the outcome came without a release: the decider never knew them").isZero();
        } finally {
            e.close();
        }
    }
}
