package io.orbitkv.pd.proxy.internal;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import java.util.concurrent.CompletableFuture;
import io.orbitkv.pd.testsupport.kafka.StuckProducer;
import org.junit.jupiter.api.Test;

/**
 * Writing a fact never holds the caller (the proxy's event loop): a producer's send blocks while it has no metadata for
 * the topic — during a Kafka outage up to max.block.ms, 60 s — and the proxy's event loops serve every other request,
 * health check and stream. Before, the admission's send ran on the event loop itself. The facts keep their call order.
 */
class AdmissionsTest {

    @Test
    void aBlockedSendDoesNotHoldTheCallerAndTheFactsKeepTheirOrder() {
        StuckProducer producer = new StuckProducer();
        Admissions a = new Admissions(producer, new Topics(TopicsConfig.defaults(), EventSerdes.embedded()), "proxy-1", null);
        long t0 = System.nanoTime();
        CompletableFuture<Void> admitted = a.admitted("r1", "m", 10, 5, "p", "d", false, null);
        CompletableFuture<Void> cancelled = a.cancelled("r1", "client disconnected");
        assertThat((System.nanoTime() - t0) / 1e6).as("ms the caller was held").isLessThan(1000);
        assertThat(admitted).isNotDone();
        producer.released.countDown();
        admitted.join();
        cancelled.join();
        assertThat(producer.history()).extracting(r -> r.value().length).hasSize(2);
        assertThat(new String(producer.history().get(1).value(), java.nio.charset.StandardCharsets.ISO_8859_1)).contains("client disconnected");
        a.close();
    }
}
