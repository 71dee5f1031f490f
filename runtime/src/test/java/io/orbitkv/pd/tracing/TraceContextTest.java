package io.orbitkv.pd.tracing;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.nio.charset.StandardCharsets;
import java.util.Optional;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.junit.jupiter.api.Test;

class TraceContextTest {

    private static final String SPEC_EXAMPLE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    @Test
    void parsesAndFormatsTheSpecificationExample() {
        TraceContext t = TraceContext.parse(SPEC_EXAMPLE).orElseThrow();
        assertThat(t.traceId()).isEqualTo("4bf92f3577b34da6a3ce929d0e0e4736");
        assertThat(t.spanId()).isEqualTo("00f067aa0ba902b7");
        assertThat(t.sampled()).isTrue();
        assertThat(t.format()).isEqualTo(SPEC_EXAMPLE);
        assertThat(TraceContext.parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").orElseThrow().sampled()).isFalse();
    }

    @ParameterizedTest
    @ValueSource(strings = {
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",              // no flags
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",           // upper case
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",           // zero trace id
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",           // zero span id
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",           // forbidden version
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",     // version 00 has exactly four fields
            "0g-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",           // bad version
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",           // bad separator
            "00-4bf92f3577b34da6a3ce929d0e0e473x-00f067aa0ba902b7-01",           // not hex
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",          // future version, no '-' after the fields
    })
    void refusesMalformedValues(String header) {
        assertThat(TraceContext.parse(header)).isEmpty();
    }

    @Test
    void readsFutureVersionsByTheirFirstFourFields() {
        TraceContext t = TraceContext.parse("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-what-the-future-adds").orElseThrow();
        assertThat(t.format()).isEqualTo(SPEC_EXAMPLE); // always written as version 00
        assertThat(TraceContext.parse(null)).isEmpty();
    }

    @Test
    void childKeepsTheTraceAndFlagsWithANewSpan() {
        TraceContext root = TraceContext.newRoot();
        TraceContext child = root.newChild();
        assertThat(root.sampled()).isTrue();
        assertThat(child.traceId()).isEqualTo(root.traceId());
        assertThat(child.flags()).isEqualTo(root.flags());
        assertThat(child.spanId()).isNotEqualTo(root.spanId()).hasSize(16);
        assertThat(TraceContext.parse(child.format())).contains(child);
        assertThat(TraceContext.newRoot().traceId()).isNotEqualTo(root.traceId());
    }

    @Test
    void constructorNamesTheBadField() {
        assertThatThrownBy(() -> new TraceContext("abc", "00f067aa0ba902b7", 1)).hasMessageContaining("trace-id");
        assertThatThrownBy(() -> new TraceContext("4bf92f3577b34da6a3ce929d0e0e4736", "x", 1)).hasMessageContaining("parent-id");
        assertThatThrownBy(() -> new TraceContext("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 256)).hasMessageContaining("flags");
    }

    @Test
    void kafkaHeadersCarryOneTraceparent() {
        RecordHeaders headers = new RecordHeaders();
        assertThat(TraceHeaders.read(headers)).isEmpty();
        TraceContext first = TraceContext.newRoot();
        TraceContext second = first.newChild();
        TraceHeaders.write(headers, first);
        TraceHeaders.write(headers, second);
        assertThat(headers.headers(TraceHeaders.TRACEPARENT)).hasSize(1);
        assertThat(TraceHeaders.read(headers)).contains(second);
        headers.add(TraceHeaders.TRACEPARENT, "garbage".getBytes(StandardCharsets.UTF_8));
        assertThat(TraceHeaders.read(headers)).isEmpty(); // the last one wins, and it is malformed
    }

    @Test
    void httpContinuesOrStartsATrace() {
        TraceContext incoming = TraceContext.parse(SPEC_EXAMPLE).orElseThrow();
        Optional<TraceContext> read = TraceHeaders.fromHttp(name -> name.equals("traceparent") ? SPEC_EXAMPLE : null);
        assertThat(read).contains(incoming);
        assertThat(TraceHeaders.continueOrStart(read).traceId()).isEqualTo(incoming.traceId());
        assertThat(TraceHeaders.continueOrStart(Optional.empty()).traceId()).isNotEqualTo(incoming.traceId());
    }
}
