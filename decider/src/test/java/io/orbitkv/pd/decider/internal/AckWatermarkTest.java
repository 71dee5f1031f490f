package io.orbitkv.pd.decider.internal;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

class AckWatermarkTest {

    @Test
    void advancesOverContiguousAcknowledgementsWhateverOrderTheyArriveIn() {
        AckWatermark w = new AckWatermark();
        long a = w.send();
        long b = w.send();
        long c = w.send();
        assertThat(w.sent()).isEqualTo(3);
        w.completed(c, true);
        w.completed(b, true);
        assertThat(w.acknowledged()).isZero(); // the first is still in flight
        w.completed(a, true);
        assertThat(w.acknowledged()).isEqualTo(3);
        w.completed(a, true); // a repeated completion changes nothing
        assertThat(w.acknowledged()).isEqualTo(3);
    }

    @Test
    void aFailedSendHoldsTheWatermarkUntilReset() {
        AckWatermark w = new AckWatermark();
        long a = w.send();
        long b = w.send();
        long c = w.send();
        w.completed(a, true);
        w.completed(b, false);
        w.completed(c, true);
        assertThat(w.acknowledged()).isEqualTo(1);
        long d = w.send();
        w.completed(d, true);
        assertThat(w.acknowledged()).isEqualTo(1);

        w.reset(); // the commit was refused: what was sent before no longer matters
        assertThat(w.acknowledged()).isEqualTo(w.sent()).isEqualTo(4);
        long e = w.send();
        w.completed(b, true); // a late completion from before the reset is ignored
        assertThat(w.acknowledged()).isEqualTo(4);
        w.completed(e, true);
        assertThat(w.acknowledged()).isEqualTo(5);
    }
}
