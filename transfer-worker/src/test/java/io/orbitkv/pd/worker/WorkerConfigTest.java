package io.orbitkv.pd.worker;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.schemas.OrderTokens;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import org.junit.jupiter.api.Test;

class WorkerConfigTest {

    private static ConfigProps base() {
        return ConfigProps.empty().with("bootstrap.servers", "127.0.0.1:9092").with("worker.engine.id", "decode-0");
    }

    @Test
    void defaultsDescribeAnEightBillionParameterModelShapedPool() {
        ConfigProps p = base();
        WorkerConfig c = WorkerConfig.from(p);
        assertThat(c.workerId()).isEqualTo("worker-decode-0");
        assertThat(c.role()).isEqualTo(EngineRole.BOTH);
        assertThat(c.geometry().pageBytes()).isEqualTo(32 * 1024);
        assertThat(c.geometry().regionCount()).isEqualTo(64);
        assertThat(c.geometry().numBlocks()).isEqualTo(256);
        assertThat(c.transports()).containsExactly("tcp");
        assertThat(c.tcp().connections()).isEqualTo(2);
        assertThat(c.isolationLevel()).isEqualTo("read_uncommitted");
        assertThat(c.groupId()).isEqualTo("orbitkv-worker-decode-0");
        assertThat(c.instanceEpoch()).isPositive();
        assertThat(c.usesDevAuthKey()).isTrue();
        assertThat(c.authKey()).isEqualTo(OrderTokens.DEV_KEY.getBytes(StandardCharsets.UTF_8));
        assertThat(p.unusedKeys()).isEmpty();
    }

    @Test
    void everyKeyIsRead() {
        ConfigProps p = base().with("worker.id", "w1").with("worker.engine.role", "prefill").with("worker.engine.model", "m")
                .with("worker.engine.instance-epoch", "7").with("worker.layout.num-layers", "2").with("worker.layout.kv-split", "fused")
                .with("worker.layout.block-size-tokens", "64").with("worker.layout.num-kv-heads", "1").with("worker.layout.head-dim", "576")
                .with("worker.layout.dtype", "bf16").with("worker.layout.page-bytes", "73728").with("worker.layout.num-blocks", "10")
                .with("worker.layout.tp-rank", "1").with("worker.layout.tp-size", "2").with("worker.pool.path", "/dev/shm/x.kv")
                .with("worker.transports", "local, tcp").with("worker.concurrency", "2").with("worker.queue.limit", "10")
                .with("worker.dedupe.capacity", "100").with("worker.max-runs", "100").with("worker.peer.wait", "1s")
                .with("worker.commit.interval", "50ms").with("worker.isolation.level", "read_committed").with("auth.key", "hex:00112233445566778899aabbccddeeff")
                .with("transfer.tcp.host", "0.0.0.0").with("transfer.tcp.advertised-host", "node-1").with("transfer.tcp.port", "7100")
                .with("transfer.tcp.connections", "4").with("transfer.tcp.max-connections", "8").with("transfer.tcp.frame-bytes", "1048576")
                .with("transfer.tcp.max-segments", "256").with("transfer.tcp.max-payload-bytes", "2097152").with("transfer.tcp.io-timeout", "3s")
                .with("transfer.tcp.connect-timeout", "1s").with("transfer.tcp.max-bytes-per-second", "1000000")
                .with("transfer.tcp.socket-buffer-bytes", "65536").with("topics.prefix", "x.").with("kafka.client.rack", "r1");
        WorkerConfig c = WorkerConfig.from(p);
        assertThat(p.unusedKeys()).isEmpty();
        assertThat(c.transports()).containsExactly("local", "tcp");
        assertThat(c.geometry().regionCount()).isEqualTo(2);
        assertThat(c.authKey()).hasSize(16);
        assertThat(c.tcp().advertisedHost()).isEqualTo("node-1");
        assertThat(c.tcp().maxBytesPerSecond()).isEqualTo(1_000_000);
        assertThat(c.peerWait()).isEqualTo(Duration.ofSeconds(1));
        assertThat(c.kafkaOverrides()).containsEntry("client.rack", "r1");
    }

    @Test
    void badValuesNameTheirKey() {
        assertThatThrownBy(() -> WorkerConfig.from(ConfigProps.empty().with("bootstrap.servers", "x:1")))
                .hasMessageStartingWith("worker.engine.id: required");
        assertThatThrownBy(() -> WorkerConfig.from(base().with("worker.transports", "tcp,mooncake")))
                .hasMessageStartingWith("worker.transports: 'mooncake' comes with the orbitkv-mooncake module, which is not on this class path");
        assertThatThrownBy(() -> WorkerConfig.from(base().with("worker.transports", "carrier-pigeon")))
                .hasMessage("worker.transports: unknown transport 'carrier-pigeon'; available: [tcp, local]");
        assertThatThrownBy(() -> WorkerConfig.from(base().with("worker.layout.page-bytes", "1000")))
                .hasMessageStartingWith("worker.layout.*: layout.page_bytes: must be block_size_tokens × num_kv_heads × head_dim × dtype bytes");
        assertThatThrownBy(() -> WorkerConfig.from(base().with("transfer.tcp.port", "70000")))
                .hasMessage("transfer.tcp.port: must be 0 (any free port) or 1..65535, got 70000");
        assertThatThrownBy(() -> WorkerConfig.from(base().with("transfer.tcp.frame-bytes", "134217728")))
                .hasMessageStartingWith("transfer.tcp.frame-bytes: 134217728 is more than transfer.tcp.max-payload-bytes");
        assertThatThrownBy(() -> WorkerConfig.from(base().with("auth.key", "short")))
                .hasMessage("auth.key: must be at least 16 bytes, got 5");
        assertThatThrownBy(() -> WorkerConfig.from(base().with("auth.key", "hex:zz")))
                .hasMessageStartingWith("auth.key: not valid hex after 'hex:'");
        assertThatThrownBy(() -> WorkerConfig.from(base().with("worker.isolation.level", "serializable")))
                .hasMessage("worker.isolation.level: must be read_uncommitted or read_committed, got serializable");
        assertThatThrownBy(() -> WorkerConfig.from(base().with("worker.engine.instance-epoch", "0")))
                .hasMessage("worker.engine.instance-epoch: must be >= 1, got 0");
        assertThatThrownBy(() -> WorkerConfig.from(base().with("worker.layout.tp-rank", "2").with("worker.layout.tp-size", "2")))
                .hasMessage("worker.layout.tp-rank / tp-size: need 0 <= tp-rank < tp-size, got 2 / 2");
        assertThatThrownBy(() -> WorkerConfig.from(base().with("worker.peer.wait", "soon")))
                .hasMessage("worker.peer.wait: must be a duration like 250ms, 30s, 2m or 1h, got 'soon'");
    }

    /**
     * The data port peers push to: a wildcard bind used to be announced as it was ({@code 0.0.0.0}: every sender pushed
     * to itself), and a worker listening on loopback while advertising its pod address was accepted (deploy/k8s did so).
     */
    @Test
    void theDataPortAdvertisesWhatPeersOnOtherHostsCanReach() {
        assertThatThrownBy(() -> WorkerConfig.from(base().with("transfer.tcp.host", "0.0.0.0")))
                .hasMessageStartingWith("transfer.tcp.advertised-host: required when transfer.tcp.host is a wildcard (0.0.0.0)");
        assertThatThrownBy(() -> WorkerConfig.from(base().with("transfer.tcp.advertised-host", "10.244.1.17")))
                .hasMessageStartingWith("transfer.tcp.host: 127.0.0.1 listens on loopback only, but transfer.tcp.advertised-host tells peers 10.244.1.17");
        assertThatThrownBy(() -> WorkerConfig.from(base().with("bootstrap.servers", "198.18.0.10:9092")))
                .hasMessageStartingWith("transfer.tcp.host: 127.0.0.1 is advertised, but peers are on other hosts (Kafka at 198.18.0.10:9092)");
        WorkerConfig c = WorkerConfig.from(base().with("bootstrap.servers", "kafka:9092").with("transfer.tcp.host", "0.0.0.0")
                .with("transfer.tcp.advertised-host", "10.244.1.17"));
        assertThat(c.tcp().advertisedHost()).isEqualTo("10.244.1.17");
    }
}
