package io.orbitkv.pd.decider;

import static io.orbitkv.pd.decider.Facts.admitted;
import static io.orbitkv.pd.decider.Facts.completed;
import static io.orbitkv.pd.decider.Facts.decodeCompleted;
import static io.orbitkv.pd.decider.Facts.decodeReady;
import static io.orbitkv.pd.decider.Facts.fastPolicy;
import static io.orbitkv.pd.decider.Facts.prefillCompleted;
import static io.orbitkv.pd.decider.Facts.run;
import static io.orbitkv.pd.decider.Facts.started;
import static org.assertj.core.api.Assertions.assertThat;

import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.metrics.MetricNames;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.tracing.TraceContext;
import io.orbitkv.pd.tracing.TraceHeaders;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyTestDriver;
import org.apache.kafka.streams.test.TestRecord;
import org.junit.jupiter.api.Test;

/** A request's facts carry one trace; every decision about it (both topics) carries the same trace id; meters count. */
class DeciderTraceTest {

    @Test
    void decisionsContinueTheTraceOfTheFactThatCausedThemAndAreCounted() {
        Topics topics = new Topics(TopicsConfig.defaults(), EventSerdes.embedded());
        SimpleMeterRegistry registry = new SimpleMeterRegistry();
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, "decider-trace-test");
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "unused:9092");
        try (TopologyTestDriver driver = new TopologyTestDriver(DeciderTopology.build(fastPolicy(), DeciderConfig.StoreKind.IN_MEMORY, topics,
                false, new DeciderMetrics(registry)), p)) {
            TestInputTopic<String, RequestEvent> in = driver.createInputTopic(topics.requestEvents().name(), Serdes.String().serializer(),
                    topics.requestEvents().valueSerde().serializer());
            TestOutputTopic<String, Decision> decisions = driver.createOutputTopic(topics.decisions().name(), Serdes.String().deserializer(),
                    topics.decisions().valueSerde().deserializer());
            TestOutputTopic<String, Decision> commands = driver.createOutputTopic(topics.engineCommands().name(), Serdes.String().deserializer(),
                    topics.engineCommands().valueSerde().deserializer());
            // given one request whose facts all carry its trace (as proxy, engines and workers write them)
            TraceContext root = TraceContext.newRoot();
            long t = 1000;
            for (RequestEvent e : List.of(admitted("r1"), decodeReady("r1", run(100, 8)), prefillCompleted("r1", run(0, 8)), started("r1", 1),
                    completed("r1", 1), decodeCompleted("r1"))) {
                in.pipeInput(new TestRecord<>("r1", e, TraceHeaders.write(new RecordHeaders(), root.newChild()), Instant.ofEpochMilli(t += 10)));
            }
            // then every decision on both topics has a traceparent of that trace, as a new span
            List<TestRecord<String, Decision>> out = new ArrayList<>(decisions.readRecordsToList());
            int onDecisions = out.size();
            out.addAll(commands.readRecordsToList());
            assertThat(onDecisions).isGreaterThanOrEqualTo(5);
            assertThat(out.size()).isGreaterThan(onDecisions);
            for (TestRecord<String, Decision> r : out) {
                TraceContext tc = TraceHeaders.read(r.headers()).orElseThrow(() -> new AssertionError("no traceparent on " + r.value()));
                assertThat(tc.traceId()).isEqualTo(root.traceId());
                assertThat(tc.spanId()).isNotEqualTo(root.spanId());
                assertThat(r.headers().headers(TraceHeaders.TRACEPARENT)).hasSize(1);
            }
            // and a fact without a header gives decisions without one (never a failure)
            in.pipeInput("r2", admitted("r2"), Instant.ofEpochMilli(t += 10));
            in.pipeInput("r2", Facts.cancel("r2"), Instant.ofEpochMilli(t + 10));
            decisions.readRecordsToList().forEach(r -> assertThat(r.headers().lastHeader(TraceHeaders.TRACEPARENT)).isNull());
        }
        // and the meters counted facts, decisions and processing times
        assertThat(registry.get(MetricNames.DECIDER_FACTS).tag("type", "RequestAdmitted").counter().count()).isEqualTo(2);
        assertThat(registry.get(MetricNames.DECIDER_DECISIONS).tag("type", "TransferOrder").counter().count()).isEqualTo(1);
        assertThat(registry.get(MetricNames.DECIDER_PROCESS).timer().count()).isEqualTo(8);
    }
}
