package io.orbitkv.pd.engine.client;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import io.orbitkv.pd.events.DecodeCompleted;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.tracing.TraceContext;
import io.orbitkv.pd.tracing.TraceHeaders;
import java.util.Map;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.junit.jupiter.api.Test;

/** A fact the engine client writes for a request carries a child span of the trace the request came with. */
class EngineTraceTest {

    private final Topics topics = new Topics(TopicsConfig.defaults(), EventSerdes.embedded());

    @Test
    void factCarriesAChildOfTheIncomingTrace() {
        String header = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        TraceContext incoming = TraceHeaders.fromHttp(Map.of(TraceHeaders.TRACEPARENT, header)::get).orElseThrow();
        ProducerRecord<String, byte[]> r = EngineFacts.record(topics, "engine-d0", "r1", "r1/decode-completed",
                DecodeCompleted.newBuilder().setEngineId("d0").setOutputTokens(3).setRecomputed(false).build(), incoming);
        TraceContext t = TraceHeaders.read(r.headers()).orElseThrow();
        assertEquals(incoming.traceId(), t.traceId());
        assertNotEquals(incoming.spanId(), t.spanId());
        assertEquals(incoming.flags(), t.flags());
        assertEquals("r1", r.key());
    }

    @Test
    void noIncomingTraceNoHeader() {
        ProducerRecord<String, byte[]> r = EngineFacts.record(topics, "engine-d0", "r1", "r1/decode-completed",
                DecodeCompleted.newBuilder().setEngineId("d0").setOutputTokens(3).setRecomputed(false).build(), null);
        assertNull(r.headers().lastHeader(TraceHeaders.TRACEPARENT));
    }
}
