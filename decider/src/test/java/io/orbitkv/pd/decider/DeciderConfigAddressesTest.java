package io.orbitkv.pd.decider;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.schemas.config.ConfigProps;
import org.junit.jupiter.api.Test;

/**
 * The decider's query endpoint as other instances reach it (Streams' {@code application.server}), and a shortened
 * session that keeps its heartbeat inside it.
 */
class DeciderConfigAddressesTest {

    private static ConfigProps base(String bootstrap) {
        return ConfigProps.empty().with("bootstrap.servers", bootstrap);
    }

    @Test
    void aWildcardBindAdvertisesTheAddressGivenNeverTheWildcard() {
        // Before: the wildcard itself was advertised, so every instance thought every key was its own.
        assertThatThrownBy(() -> DeciderConfig.from(base("kafka:9092").with("decider.http.host", "0.0.0.0")))
                .hasMessageStartingWith("decider.http.advertised-host: required when decider.http.host is a wildcard");
        DeciderConfig c = DeciderConfig.from(base("kafka:9092").with("decider.http.host", "0.0.0.0")
                .with("decider.http.advertised-host", "decider-0.orbitkv-decider"));
        assertThat(c.httpAdvertisedHost()).isEqualTo("decider-0.orbitkv-decider");
        assertThat(DeciderConfig.from(base("127.0.0.1:9092")).httpAdvertisedHost()).isEqualTo("127.0.0.1");
    }

    @Test
    void loopbackIsRefusedWhenTheBrokersAreOnOtherHosts() {
        assertThatThrownBy(() -> DeciderConfig.from(base("198.18.0.10:9092")))
                .hasMessageStartingWith("decider.http.host: 127.0.0.1 is advertised, but peers are on other hosts");
    }

    @Test
    void aShortSessionNeedsAShorterHeartbeat() {
        // Before: kafka.session.timeout.ms=2000 with the default 3 s heartbeat was accepted and failed in the consumer.
        assertThatThrownBy(() -> DeciderConfig.from(base("127.0.0.1:9092").with("kafka.session.timeout.ms", "2000")))
                .hasMessage("kafka.heartbeat.interval.ms: 3000 ms must be shorter than kafka.session.timeout.ms (2000 ms; a third of it is usual)");
        DeciderConfig.from(base("127.0.0.1:9092").with("kafka.session.timeout.ms", "2000").with("kafka.heartbeat.interval.ms", "500"));
    }
}
