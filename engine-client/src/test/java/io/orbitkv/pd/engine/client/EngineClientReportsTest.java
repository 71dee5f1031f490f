package io.orbitkv.pd.engine.client;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import io.orbitkv.pd.testsupport.kafka.StuckProducer;
import org.junit.jupiter.api.Test;

/**
 * Reporting a fact never holds the caller (the engine's event loop): a producer's send blocks while it has no metadata
 * for the topic — during a Kafka outage up to max.block.ms, 60 s — and the engine's event loop serves every request,
 * stream and health check. It used to call send itself (issue 31, "Kafka sends on Vert.x event loops").
 */
class EngineClientReportsTest {

    @Test
    void aBlockedSendDoesNotHoldTheCallerAndTheFactsKeepTheirOrder() {
        StuckProducer producer = new StuckProducer();
        EngineClient c = EngineClient.reportingOnly(EngineClientConfig.from(ConfigProps.empty().with("bootstrap.servers", "127.0.0.1:9")
                .with("engine.id", "decode-0")), new EngineClient.Identity(EngineRole.DECODE, "m", "http://127.0.0.1:1",
                new KvGeometry(2, KvSplit.SEPARATE, 16, 8, 128, Dtype.BF16, 32 * 1024, 64), 0, 1, List.of()), producer);
        long t0 = System.nanoTime();
        CompletableFuture<Void> ready = c.decodeReady("r1", "lease/decode-0/r1", 1, new int[] {3, 4}, System.currentTimeMillis() + 30_000);
        CompletableFuture<Void> beat = c.heartbeat("r1", "lease/decode-0/r1", 1, System.currentTimeMillis() + 30_000, 1, null, null);
        assertThat((System.nanoTime() - t0) / 1e6).as("ms the caller was held").isLessThan(1000);
        assertThat(ready).isNotDone();
        producer.released.countDown();
        ready.join();
        beat.join();
        assertThat(producer.history()).hasSize(2);
        assertThat(new String(producer.history().get(0).value(), java.nio.charset.StandardCharsets.ISO_8859_1)).contains("decode-ready");
    }
}
