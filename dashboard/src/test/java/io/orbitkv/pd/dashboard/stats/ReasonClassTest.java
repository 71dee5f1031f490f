package io.orbitkv.pd.dashboard.stats;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.CsvSource;

class ReasonClassTest {

    @ParameterizedTest
    @CsvSource(delimiter = ';', value = {
            "PEER_UNREACHABLE: connect to 10.0.0.7:7001 refused; PEER_UNREACHABLE",
            "decode engine rejected the request: no free pages; decode engine rejected the request",
            "prefill timed out after 2000 ms; prefill timed out after * ms",
            "lease r-17@3 expired without a heartbeat; lease * expired without a heartbeat",
            "transfer failed after 3 attempts 4 5: x; transfer failed after * attempts *",
            "x=1 y; * y",
            " ; unknown",
    })
    void keepsTheKindAndDropsIdentifiers(String reason, String expected) {
        assertThat(ReasonClass.of(reason)).isEqualTo(expected);
    }

    @org.junit.jupiter.api.Test
    void isBounded() {
        assertThat(ReasonClass.of("word ".repeat(50))).hasSize(ReasonClass.MAX_LENGTH);
        assertThat(ReasonClass.of(null)).isEqualTo("unknown");
    }
}
