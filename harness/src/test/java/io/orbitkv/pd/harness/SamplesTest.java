package io.orbitkv.pd.harness;

import static org.assertj.core.api.Assertions.assertThat;

import java.util.List;
import org.junit.jupiter.api.Test;

/** Inter-token latency and time per output token, as the load client reports them beside TTFT (issue 32). */
class SamplesTest {

    private static LoadClient.Result streamed(long ttftMs, long... gapsMs) {
        long[] gaps = java.util.Arrays.stream(gapsMs).map(g -> g * 1_000_000L).toArray();
        return new LoadClient.Result(null, 200, "x", ttftMs * 1_000_000L, 0, "r", Double.NaN, 0, "decode", null, false, gaps);
    }

    @Test
    void itlPoolsEveryGapAndTpotIsEachRequestsMeanGap() {
        List<LoadClient.Result> rs = List.of(streamed(100, 10, 20, 30), streamed(50, 40), streamed(70),
                new LoadClient.Result(null, 503, "", -1, 0, "r", Double.NaN, 0, null, "no blocks", false));
        assertThat(Samples.itlMs(rs)).containsExactly(10, 20, 30, 40);
        // 20 ms (three gaps) and 40 ms (one); a one-token answer and a failed one have no TPOT
        assertThat(Samples.tpotMs(rs)).containsExactly(20, 40);
        assertThat(Samples.pct(Samples.itlMs(rs), 50)).isEqualTo(20);
    }
}
