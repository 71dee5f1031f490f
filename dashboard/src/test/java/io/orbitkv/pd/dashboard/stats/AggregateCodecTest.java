package io.orbitkv.pd.dashboard.stats;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.Arrays;
import java.util.SplittableRandom;
import org.junit.jupiter.api.Test;

class AggregateCodecTest {

    private static Aggregate sample() {
        Aggregate a = new Aggregate().add("COMPLETED", 41).add("FAILED", 2).add("kv_bytes", 123_456_789_000L).add("negative", -3);
        for (long v : new long[] {0, 5, 999, 1_500, 2_000_000, 45_000_000_000L}) {
            a.record("handoff", v);
        }
        a.record("decision", 1_200);
        return a;
    }

    @Test
    void roundTripsEverything() {
        Aggregate a = sample();
        Aggregate back = AggregateCodec.decode(AggregateCodec.encode(a));
        assertThat(back).isEqualTo(a);
        assertThat(back.histogram("handoff").percentile(50)).isEqualTo(a.histogram("handoff").percentile(50));
        assertThat(AggregateCodec.decode(AggregateCodec.encode(new Aggregate())).isEmpty()).isTrue();
        assertThat(AggregateCodec.encode(a).length).as("compact").isLessThan(120);
    }

    @Test
    void mergeAddsCountersAndHistograms() {
        Aggregate a = sample().merge(sample());
        assertThat(a.counter("COMPLETED")).isEqualTo(82);
        assertThat(a.counter("missing")).isZero();
        assertThat(a.histogram("handoff").count()).isEqualTo(12);
        assertThat(a.histogram("none").count()).isZero();
    }

    @Test
    void cappedLabelsFoldIntoOther() {
        Aggregate a = new Aggregate();
        for (int i = 0; i < 5; i++) {
            a.addCapped("fail|", "reason-" + i, 1, 3);
        }
        a.addCapped("fail|", "reason-0", 1, 3);
        assertThat(a.withPrefix("fail|")).containsOnlyKeys("reason-0", "reason-1", "reason-2", "other");
        assertThat(a.counter("fail|other")).isEqualTo(2);
        assertThat(a.counter("fail|reason-0")).isEqualTo(2);
    }

    @Test
    void corruptBytesAreRefusedNotMisread() {
        byte[] good = AggregateCodec.encode(sample());
        assertThatThrownBy(() -> AggregateCodec.decode(new byte[] {9})).hasMessageContaining("version");
        assertThatThrownBy(() -> AggregateCodec.decode(Arrays.copyOf(good, good.length - 1))).isInstanceOf(IllegalArgumentException.class);
        byte[] longer = Arrays.copyOf(good, good.length + 1);
        assertThatThrownBy(() -> AggregateCodec.decode(longer)).hasMessageContaining("trailing");
        SplittableRandom rnd = new SplittableRandom(3);
        for (int i = 0; i < 2_000; i++) {
            byte[] b = good.clone();
            b[rnd.nextInt(1, b.length)] = (byte) rnd.nextInt(256);
            try {
                AggregateCodec.decode(b); // either a valid aggregate or IllegalArgumentException, never anything else
            } catch (IllegalArgumentException expected) {
                // refused
            }
        }
    }
}
