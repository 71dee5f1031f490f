package io.orbitkv.pd.proxy.internal;

import static org.assertj.core.api.Assertions.assertThat;

import java.net.SocketException;
import org.junit.jupiter.api.Test;

/** What a client reads when an engine cannot be reached: the reason in words, not the kernel's errno text alone. */
class UpstreamErrorsTest {

    @Test
    void aConnectToAHostWithoutARouteSaysSo() {
        // Linux's answer to a connect over a blackhole route (the by-hand partition run of issue 31 showed only this).
        UpstreamErrors.Mapped m = UpstreamErrors.fromFailure("decode", "decode-0",
                new RuntimeException("connect failed", new SocketException("Invalid argument: /198.18.0.17:8100")));
        assertThat(m.status()).isEqualTo(502);
        assertThat(m.message()).contains("decode engine decode-0").contains("no route to the engine's host").contains("Invalid argument");
    }

    @Test
    void otherSocketFailuresKeepTheirName() {
        UpstreamErrors.Mapped m = UpstreamErrors.fromFailure("prefill", "prefill-0", new SocketException("Connection reset"));
        assertThat(m.message()).contains("SocketException: Connection reset").doesNotContain("no route");
    }
}
