package io.orbitkv.pd.kvbridge;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.schemas.config.ConfigProps;
import java.time.Duration;
import org.junit.jupiter.api.Test;

/** The bridge's settings: defaults, and every bad value refused naming its key. */
class BridgeConfigTest {

    private static ConfigProps base() {
        return ConfigProps.empty().with("bootstrap.servers", "127.0.0.1:9092").with("bridge.engine-id", "vllm-0")
                .with("bridge.endpoint", "tcp://10.0.0.5:5557");
    }

    @Test
    void defaults() {
        BridgeConfig c = BridgeConfig.from(base());
        assertThat(c.replayEndpoint()).isEmpty();
        assertThat(c.zmqTopic()).isEmpty();
        assertThat(c.instanceEpoch()).isZero();
        assertThat(c.replayTimeout()).isEqualTo(Duration.ofSeconds(2));
        assertThat(c.topics().prefix()).isEqualTo("orbitkv.");
    }

    @Test
    void badValuesAreRefusedNamingTheKey() {
        assertThatThrownBy(() -> BridgeConfig.from(ConfigProps.empty().with("bridge.engine-id", "e").with("bridge.endpoint", "tcp://h:1")))
                .hasMessageContaining("bootstrap.servers");
        assertThatThrownBy(() -> BridgeConfig.from(base().with("bridge.engine-id", "bad id")))
                .hasMessageContaining("bridge.engine-id");
        assertThatThrownBy(() -> BridgeConfig.from(base().with("bridge.endpoint", "tcp://*:5557")))
                .hasMessageContaining("bridge.endpoint").hasMessageContaining("give the host it is reached at");
        assertThatThrownBy(() -> BridgeConfig.from(base().with("bridge.endpoint", "")))
                .hasMessageContaining("bridge.endpoint: required");
        assertThatThrownBy(() -> BridgeConfig.from(base().with("bridge.replay-endpoint", "10.0.0.5:5558")))
                .hasMessageContaining("bridge.replay-endpoint");
        assertThatThrownBy(() -> BridgeConfig.from(base().with("bridge.instance-epoch", "-3")))
                .hasMessageContaining("bridge.instance-epoch");
        assertThatThrownBy(() -> BridgeConfig.from(base().with("bridge.replay-timeout", "0s")))
                .hasMessageContaining("bridge.replay-timeout");
    }
}
