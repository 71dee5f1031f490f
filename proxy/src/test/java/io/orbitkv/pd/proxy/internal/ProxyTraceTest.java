package io.orbitkv.pd.proxy.internal;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.orbitkv.pd.metrics.MetricNames;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceContext;
import io.orbitkv.pd.tracing.TraceHeaders;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;

/** The proxy continues the client's trace onto its facts; its meters are registered up front. */
class ProxyTraceTest {

    @Test
    void admissionAndCancelCarryTheProxysSpanOfTheClientsTrace() {
        MockProducer<String, byte[]> producer = new MockProducer<>(true, null, new StringSerializer(), new ByteArraySerializer());
        Admissions a = new Admissions(producer, new Topics(TopicsConfig.defaults(), EventSerdes.embedded()), "proxy-1", null);
        TraceContext client = TraceContext.parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").orElseThrow();
        TraceContext proxy = TraceHeaders.continueOrStart(TraceHeaders.fromHttp(Map.of(TraceHeaders.TRACEPARENT, client.format())::get));
        a.admitted("r1", "m", 10, 5, "p", "d", false, null, proxy, Marks.receivedAt(1_700_000_000_000_000L)).join();
        a.cancelled("r1", "client disconnected", proxy).join();
        a.admitted("r2", "m", 10, 5, "p", "d", false, null).join();
        assertEquals(3, producer.history().size());
        for (ProducerRecord<String, byte[]> r : producer.history().subList(0, 2)) {
            TraceContext t = TraceHeaders.read(r.headers()).orElseThrow();
            assertEquals(client.traceId(), t.traceId());
            assertNotEquals(client.spanId(), t.spanId());
            assertEquals(proxy, t);
        }
        assertEquals(Optional.empty(), TraceHeaders.read(producer.history().get(2).headers()));
        // Every fact carries the proxy's timing marks: when the request came in (if known) and when the fact went out.
        Marks admitted = Marks.read(producer.history().get(0).headers());
        assertEquals(1_700_000_000_000_000L, admitted.get(Marks.IN).getAsLong());
        assertTrue(admitted.get(Marks.OUT).getAsLong() > 1_700_000_000_000_000L);
        assertTrue(Marks.read(producer.history().get(2).headers()).get(Marks.OUT).isPresent());
    }

    @Test
    void aRequestWithoutTraceparentStartsANewTrace() {
        TraceContext t = TraceHeaders.continueOrStart(TraceHeaders.fromHttp(h -> null));
        assertTrue(t.sampled());
    }

    @Test
    void metersAreRegisteredUpFront() {
        SimpleMeterRegistry r = new SimpleMeterRegistry();
        AtomicInteger inFlight = new AtomicInteger(3);
        ProxyMetrics m = new ProxyMetrics(r, inFlight);
        m.status(200);
        m.ttft(1_000_000);
        m.handoff(1_000_000);
        m.upstream("prefill", 1_000_000);
        m.cancel();
        assertEquals(1.0, r.get(MetricNames.PROXY_REQUESTS).tag("status", "200").counter().count());
        assertEquals(0.0, r.get(MetricNames.PROXY_REQUESTS).tag("status", "503").counter().count());
        assertEquals(1, r.get(MetricNames.PROXY_REQUEST).tag("phase", "handoff").timer().count());
        assertEquals(1, r.get(MetricNames.PROXY_UPSTREAM).tag("role", "prefill").timer().count());
        assertEquals(1.0, r.get(MetricNames.PROXY_CANCELS).counter().count());
        assertEquals(3.0, r.get(MetricNames.PROXY_INFLIGHT).gauge().value());
    }
}
