package io.orbitkv.pd.engine.sim;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.engine.client.api.ApiException;
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
import java.util.concurrent.TimeoutException;
import org.junit.jupiter.api.Test;

/**
 * A prefill report whose acknowledgement never came may still have reached the log, and an order may then read its
 * pages: the engine keeps them until a release or the request's outcome says what the decider knew (it used to free them
 * at once, so a push could read pages already given to another request). A report the worker refused is surely not in
 * the log: its pages are freed at once.
 */
class UnsureReportTest {

    /** A control plane whose prefill reports fail with {@code failure}. */
    static final class Failing extends SelfFencingTest.Control {
        final Throwable failure;

        Failing(Throwable failure) {
            super(false);
            this.failure = failure;
        }

        @Override
        public CompletableFuture<Void> prefillCompleted(String r, int[] b, int n, Integer f, TraceContext t, Marks m) {
            return CompletableFuture.failedFuture(failure);
        }
    }

    private static int prefill(SimEngine e) throws Exception {
        HttpRequest req = HttpRequest.newBuilder(URI.create("http://127.0.0.1:" + e.port() + "/v1/completions"))
                .header("content-type", "application/json").POST(HttpRequest.BodyPublishers.ofString("{\"model\": \"orbitkv-sim-tiny\","
                        + " \"prompt\": \"a prompt of some words\", \"max_tokens\": 4, \"kv_transfer_params\": {\"do_remote_decode\": true,"
                        + " \"request_id\": \"r-1\"}}")).build();
        return HttpClient.newHttpClient().send(req, HttpResponse.BodyHandlers.ofString()).statusCode();
    }

    private static SimEngine engine() throws Exception {
        return SimEngine.start(SimEngineConfig.from(ConfigProps.empty().with("engine.id", "p-0").with("engine.role", "prefill")
                .with("engine.preset", "tiny").with("engine.http.port", "0").with("engine.compute.prefill-ms-per-token", "0")));
    }

    @Test
    void anUnacknowledgedReportKeepsItsPagesUntilTheOutcome() throws Exception {
        SimEngine e = engine();
        try {
            e.useControl(new Failing(new TimeoutException("no acknowledgement within 60 s")));
            assertThat(prefill(e)).isEqualTo(503);
            assertThat(e.allocatorForTests().usedBlocks()).as("the report may be in the log: its pages stay").isPositive();
            Decision d = new Decision();
            d.setRequestId("r-1");
            e.decisionsForTests().onOutcome(d, new RequestOutcome());
            assertThat(e.allocatorForTests().usedBlocks()).as("the outcome came without a release: the decider never read it").isZero();
        } finally {
            e.close();
        }
    }

    @Test
    void aRefusedReportFreesItsPagesAtOnce() throws Exception {
        SimEngine e = engine();
        try {
            e.useControl(new Failing(new ApiException(ApiException.BAD_REQUEST, "num_tokens", "num_tokens: must be >= 1")));
            assertThat(prefill(e)).isEqualTo(503);
            assertThat(e.allocatorForTests().usedBlocks()).isZero();
        } finally {
            e.close();
        }
    }
}
