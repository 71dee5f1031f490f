package io.orbitkv.pd.mooncake;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import org.junit.jupiter.api.Test;

class MooncakeConfigTest {

    @Test
    void defaultsAreRdmaOverP2PHandshake() {
        MooncakeConfig c = MooncakeConfig.defaults();
        assertThat(c.protocol()).isEqualTo("rdma");
        assertThat(c.metadata()).isEqualTo("P2PHANDSHAKE");
        assertThat(c.host()).isEqualTo("127.0.0.1");
        assertThat(c.library()).isEmpty();
        assertThat(c.batchRequests()).isEqualTo(32);
        assertThat(c.maxInflightRequests()).isEqualTo(256);
        assertThat(c.maxRequestBytes()).isEqualTo(1 << 20);
        assertThat(c.pollMin()).isEqualTo(Duration.ofNanos(20_000));
        assertThat(c.pollMax()).isEqualTo(Duration.ofMillis(1));
        assertThat(MooncakeConfig.parse(c.toSettings())).isEqualTo(c);
    }

    @Test
    void settingsParseAndRoundTrip() {
        MooncakeConfig c = MooncakeConfig.parse(Map.of("protocol", "tcp", "library", "/opt/mc/libtransfer_engine.so", "poll-min", "5us",
                "poll-max", "2ms", "batch-requests", "64", "max-inflight-requests", "512", "host", "10.0.0.7", "control-port", "7200"));
        assertThat(c.protocol()).isEqualTo("tcp");
        assertThat(c.library()).isEqualTo("/opt/mc/libtransfer_engine.so");
        assertThat(c.pollMin()).isEqualTo(Duration.ofNanos(5000));
        assertThat(c.pollMax()).isEqualTo(Duration.ofMillis(2));
        assertThat(c.controlPort()).isEqualTo(7200);
        assertThat(MooncakeConfig.parse(c.toSettings())).isEqualTo(c);
        assertThat(c.withProtocol("rdma").protocol()).isEqualTo("rdma");
        assertThat(c.withBatching(32, 64, 65536).batchRequests()).isEqualTo(32);
    }

    @Test
    void badValuesNameTheirKey() {
        // Mooncake's engine announces the address it binds: a wildcard used to be accepted and announced to peers
        assertThatThrownBy(() -> MooncakeConfig.parse(Map.of("host", "0.0.0.0")))
                .hasMessageContaining("host: 0.0.0.0 is a wildcard, but Mooncake announces this address to its peers");
        assertThatThrownBy(() -> MooncakeConfig.parse(Map.of("protocol", "ucx")))
                .hasMessage("transfer.mooncake.protocol: must be rdma or tcp, got 'ucx'");
        assertThatThrownBy(() -> MooncakeConfig.parse(Map.of("batch-size", "3")))
                .hasMessageStartingWith("transfer.mooncake.batch-size: unknown setting; known: [batch-requests,");
        assertThatThrownBy(() -> MooncakeConfig.parse(Map.of("batch-requests", "0")))
                .hasMessage("transfer.mooncake.batch-requests: must be 1..65536, got 0");
        assertThatThrownBy(() -> MooncakeConfig.parse(Map.of("batch-requests", "512", "max-inflight-requests", "256")))
                .hasMessageStartingWith("transfer.mooncake.max-inflight-requests: 256 is less than transfer.mooncake.batch-requests 512");
        assertThatThrownBy(() -> MooncakeConfig.parse(Map.of("poll-min", "soon")))
                .hasMessage("transfer.mooncake.poll-min: must be a duration like 20us, 250ms, 10s or 2m, got 'soon'");
        assertThatThrownBy(() -> MooncakeConfig.parse(Map.of("poll-min", "2ms", "poll-max", "1ms")))
                .hasMessageStartingWith("transfer.mooncake.poll-max: PT0.001S is shorter than transfer.mooncake.poll-min");
        assertThatThrownBy(() -> MooncakeConfig.parse(Map.of("control-port", "70000")))
                .hasMessage("transfer.mooncake.control-port: must be 0 (any free port) or 1..65535, got 70000");
        assertThatThrownBy(() -> MooncakeConfig.parse(Map.of("max-request-bytes", "12")))
                .hasMessage("transfer.mooncake.max-request-bytes: must be 4096..1073741824, got 12");
        Map<String, String> blank = new HashMap<>();
        blank.put("host", " ");
        assertThatThrownBy(() -> MooncakeConfig.parse(blank)).hasMessageStartingWith("transfer.mooncake.host:");
    }
}
