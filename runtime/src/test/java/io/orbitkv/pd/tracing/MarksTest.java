package io.orbitkv.pd.tracing;

import static org.assertj.core.api.Assertions.assertThat;

import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.orbitkv.pd.metrics.MetricNames;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.junit.jupiter.api.Test;

class MarksTest {

    @Test
    void marksRoundTripThroughAHeaderInTheOrderTheyWereMade() {
        Marks m = Marks.receivedAt(1_000).at("run", 1_500).at(Marks.CONNECTED, 2_000);
        RecordHeaders h = new RecordHeaders();
        m.writeOut(h);
        Marks back = Marks.read(h);
        assertThat(back.asMap().keySet()).containsExactly(Marks.IN, "run", Marks.CONNECTED, Marks.OUT);
        assertThat(back.get(Marks.IN).getAsLong()).isEqualTo(1_000);
        assertThat(back.get(Marks.OUT).getAsLong()).isGreaterThan(2_000);
        assertThat(new String(h.lastHeader(Marks.HEADER).value(), StandardCharsets.US_ASCII)).startsWith("in=1000,run=1500,conn=2000,out=");
        // Writing again replaces the header instead of adding a second one.
        m.write(h);
        assertThat(h.headers(Marks.HEADER)).hasSize(1);
    }

    @Test
    void aNameMarkedTwiceKeepsItsLastTimeAndCopiesAreIndependent() {
        Marks m = Marks.empty().at("a", 1).at("a", 2);
        Marks c = m.copy().at("b", 3);
        assertThat(m.asMap()).isEqualTo(Map.of("a", 2L));
        assertThat(c.asMap()).isEqualTo(Map.of("a", 2L, "b", 3L));
        assertThat(Marks.empty().addAll("rx.", c).asMap()).containsOnlyKeys("rx.a", "rx.b");
    }

    @Test
    void malformedOrMissingTimingReadsAsNoMarks() {
        assertThat(Marks.read(null).isEmpty()).isTrue();
        assertThat(Marks.read(new RecordHeaders()).isEmpty()).isTrue();
        for (String bad : new String[] {"in", "in=", "in=x", "=5", "IN=5", "in=-1", "in=1,,out=2", "in=1;out=2", "a".repeat(3000)}) {
            assertThat(Marks.parse(bad).isEmpty()).as(bad).isTrue();
        }
        assertThat(Marks.parse("in=1,out=2").size()).isEqualTo(2);
        // Invalid names are refused on write too: they never reach a header.
        assertThat(Marks.empty().at("Bad Name", 1).isEmpty()).isTrue();
    }

    @Test
    void theWallClockIsInMicrosecondsSinceTheEpoch() {
        long ms = System.currentTimeMillis();
        long us = Marks.nowMicros();
        assertThat(us / 1000).isBetween(ms - 1_000, ms + 1_000);
    }

    @Test
    void hopMetersRecordOnlyRegisteredHopsAndSaneSpans() {
        SimpleMeterRegistry r = new SimpleMeterRegistry();
        Hop.Meters m = Hop.meters(r, Hop.ORDER_TO_WORKER);
        m.record(Hop.ORDER_TO_WORKER, 1_000, 3_500);
        m.record(Hop.ORDER_TO_WORKER, 0, 3_500); // not marked
        m.record(Hop.ORDER_TO_WORKER, 5_000, 4_000); // a clock step backwards
        m.record(Hop.TRANSFER_WIRE, 1, 2); // not registered here
        assertThat(r.get(MetricNames.HOP).tag("hop", "order_to_worker").timer().count()).isEqualTo(1);
        assertThat(r.get(MetricNames.HOP).tag("hop", "order_to_worker").timer().totalTime(java.util.concurrent.TimeUnit.MICROSECONDS))
                .isEqualTo(2_500);
        assertThat(r.find(MetricNames.HOP).tag("hop", "transfer_wire").timer()).isNull();
    }
}
