package io.orbitkv.pd.broker;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

class KraftClusterConfigTest {

    private static KraftClusterConfig config(int nodes, int port, Map<String, String> props) {
        return new KraftClusterConfig(nodes, Path.of("d"), Path.of("l"), false, port, props,
                List.of("-Xmx64m"), Duration.ofSeconds(1), Duration.ZERO, null, null);
    }

    @Test
    void errorsNameTheField() {
        assertThatThrownBy(() -> config(0, 0, Map.of())).hasMessageStartingWith("nodes:");
        assertThatThrownBy(() -> config(3, 9092, Map.of())).hasMessageStartingWith("brokerPort:");
        assertThatThrownBy(() -> config(1, 70_000, Map.of())).hasMessageStartingWith("brokerPort:");
        assertThatThrownBy(() -> config(1, 0, Map.of("node.id", "7")))
                .hasMessageStartingWith("brokerProperties:").hasMessageContaining("node.id");
        assertThatThrownBy(() -> new KraftClusterConfig(1, Path.of("d"), Path.of("l"), false, 0, Map.of(),
                List.of(), Duration.ZERO, Duration.ZERO, null, null)).hasMessageStartingWith("startupTimeout:");
        assertThatThrownBy(() -> new KraftClusterConfig(1, Path.of("d"), Path.of("l"), false, 0, Map.of(),
                List.of(), Duration.ofSeconds(1), Duration.ZERO, "0-x", null)).hasMessageStartingWith("cpus:").hasMessageContaining("'0-x'");
    }

    @Test
    void normalizesPathsAndCopiesCollections() {
        KraftClusterConfig c = config(1, 0, Map.of("log.retention.ms", "1000"));
        assertThat(c.dataDir()).isAbsolute();
        assertThat(c.logsDir()).isAbsolute();
        assertThatThrownBy(() -> c.brokerProperties().put("x", "y")).isInstanceOf(UnsupportedOperationException.class);
    }

    @Test
    void defaultJvmOptionsAreSmall() {
        assertThat(KraftClusterConfig.defaultJvmOptions(1)).contains("-Xmx512m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=5");
        assertThat(KraftClusterConfig.defaultJvmOptions(3)).contains("-Xmx384m");
    }
}
