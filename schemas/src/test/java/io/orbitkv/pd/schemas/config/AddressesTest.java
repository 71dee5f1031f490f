package io.orbitkv.pd.schemas.config;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import org.junit.jupiter.api.Test;

/** Bind and advertised addresses: nothing guessed, a wildcard never announced, loopback refused where peers are elsewhere. */
class AddressesTest {

    @Test
    void theAdvertisedAddressIsTheOneSetElseAConcreteBindAddress() {
        assertThat(Addresses.advertised("x.host", "10.0.0.5", "x.advertised-host", "")).isEqualTo("10.0.0.5");
        assertThat(Addresses.advertised("x.host", "0.0.0.0", "x.advertised-host", "node-3.example")).isEqualTo("node-3.example");
        assertThatThrownBy(() -> Addresses.advertised("x.host", "0.0.0.0", "x.advertised-host", null))
                .hasMessageStartingWith("x.advertised-host: required when x.host is a wildcard (0.0.0.0)");
        assertThatThrownBy(() -> Addresses.advertised("x.host", "::", "x.advertised-host", " "))
                .hasMessageStartingWith("x.advertised-host: required");
        assertThatThrownBy(() -> Addresses.advertised("x.host", "10.0.0.5", "x.advertised-host", "0.0.0.0"))
                .hasMessageStartingWith("x.advertised-host: a wildcard address (0.0.0.0) cannot be advertised");
    }

    @Test
    void loopbackIsRefusedOnlyWhenKafkaIsOnOtherHosts() {
        Addresses.requireReachable("transfer.tcp.host", "127.0.0.1", "127.0.0.1:9092,localhost:9093"); // one host: fine
        Addresses.requireReachable("transfer.tcp.host", "10.0.0.7", "kafka-0.kafka:9092");
        assertThatThrownBy(() -> Addresses.requireReachable("transfer.tcp.host", "127.0.0.1", "127.0.0.1:9092,10.0.0.2:9092"))
                .hasMessageStartingWith("transfer.tcp.host: 127.0.0.1 is advertised, but peers are on other hosts (Kafka at");
        assertThatThrownBy(() -> Addresses.requireReachable("k", "localhost", "[fd00::2]:9092")).hasMessageContaining("peers are on other hosts");
        assertThatThrownBy(() -> Addresses.requireReachableUrl("engine.http.advertised-url", "http://127.0.0.2:8000/v1", "kafka:9092"))
                .hasMessageStartingWith("engine.http.advertised-url: 127.0.0.2 is advertised");
        assertThatThrownBy(() -> Addresses.requireReachableUrl("u", "http://[::1]:8000", "kafka:9092")).hasMessageContaining("::1 is advertised");
    }

    @Test
    void aLoopbackListenerCannotAdvertiseAnotherAddress() {
        Addresses.requireListening("b", "0.0.0.0", "a", "10.0.0.5");
        Addresses.requireListening("b", "10.0.0.5", "a", "10.0.0.5");
        Addresses.requireListening("b", "127.0.0.1", "a", "127.0.0.1");
        assertThatThrownBy(() -> Addresses.requireListening("transfer.tcp.host", "127.0.0.1", "transfer.tcp.advertised-host", "10.244.1.17"))
                .hasMessage("transfer.tcp.host: 127.0.0.1 listens on loopback only, but transfer.tcp.advertised-host tells peers 10.244.1.17:"
                        + " bind 0.0.0.0 or 10.244.1.17");
    }

    @Test
    void bootstrapHosts() {
        assertThat(Addresses.bootstrapHosts(" a:1, [::1]:2 ,c")).containsExactly("a", "::1", "c");
        assertThat(Addresses.multiHost("127.0.0.1:9092")).isFalse();
        assertThat(Addresses.multiHost("127.0.0.1:9092,198.18.0.10:9092")).isTrue();
    }
}
