package io.orbitkv.pd.engine.sim;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.schemas.config.ConfigProps;
import java.nio.file.Path;
import java.time.Duration;
import org.junit.jupiter.api.Test;

/** How an engine is told to join: Kafka, its worker's engine API, or neither (standalone). */
class SimEngineConfigTest {

    private static ConfigProps base() {
        return ConfigProps.empty().with("engine.id", "decode-0").with("engine.role", "decode").with("engine.preset", "tiny");
    }

    @Test
    void theEngineApiJoinsWithTheSocketTheEpochAndTheWait() {
        SimEngineConfig c = SimEngineConfig.from(base().with("engine.api.path", "/tmp/api.sock").with("engine.pool.path", "/dev/shm/p.kv")
                .with("engine.instance-epoch", "77").with("engine.worker.wait", "5s"));
        assertThat(c.control()).isNull();
        assertThat(c.api()).isEqualTo(new SimEngineConfig.ApiJoin(Path.of("/tmp/api.sock"), 77, Duration.ofSeconds(5)));
    }

    @Test
    void withoutAnEpochTheStartTimeIsTheEpoch() {
        long before = System.currentTimeMillis();
        SimEngineConfig c = SimEngineConfig.from(base().with("engine.api.path", "/tmp/api.sock").with("engine.pool.path", "/dev/shm/p.kv"));
        assertThat(c.api().instanceEpoch()).isBetween(before, System.currentTimeMillis());
    }

    @Test
    void kafkaAndTheEngineApiAtOnceIsAnErrorNamingTheKey() {
        assertThatThrownBy(() -> SimEngineConfig.from(base().with("engine.api.path", "/tmp/api.sock").with("engine.pool.path", "/dev/shm/p.kv")
                .with("bootstrap.servers", "localhost:9092")))
                .isInstanceOf(IllegalArgumentException.class).hasMessageStartingWith("engine.api.path: ").hasMessageContaining("not both");
    }

    @Test
    void theEngineApiNeedsThePoolFileTheWorkerMaps() {
        assertThatThrownBy(() -> SimEngineConfig.from(base().with("engine.api.path", "/tmp/api.sock")))
                .isInstanceOf(IllegalArgumentException.class).hasMessageStartingWith("engine.pool.path: required with engine.api.path");
        assertThatThrownBy(() -> SimEngineConfig.from(base().with("engine.api.path", "/tmp/api.sock").with("engine.pool.path", "/dev/shm/p.kv")
                .with("engine.instance-epoch", "soon")))
                .isInstanceOf(IllegalArgumentException.class).hasMessage("engine.instance-epoch: must be an integer, got 'soon'");
    }

    @Test
    void neitherIsAStandaloneEngine() {
        SimEngineConfig c = SimEngineConfig.from(base());
        assertThat(c.control()).isNull();
        assertThat(c.api()).isNull();
    }

    @Test
    void theCostModelIsThePresetsUnlessThePerTokenKnobsAreSet() {
        assertThat(SimEngineConfig.from(base()).compute().cost()).isEqualTo("tiny");
        assertThat(SimEngineConfig.from(base().with("engine.preset", "8b")).compute().cost()).isEqualTo("llama-8b-h100");
        assertThat(SimEngineConfig.from(base().with("engine.compute.decode-ms-per-token", "5")).compute().cost()).isEqualTo("per-token");
        ComputeModel c = SimEngineConfig.from(base().with("engine.cost", "llama-70b-tp4").with("engine.max-batched-tokens", "2048")
                .with("engine.max-num-seqs", "64")).compute();
        assertThat(c.maxBatchedTokens()).isEqualTo(2048);
        assertThat(c.maxNumSeqs()).isEqualTo(64);
        assertThatThrownBy(() -> SimEngineConfig.from(base().with("engine.cost", "gpt-5")))
                .isInstanceOf(IllegalArgumentException.class).hasMessageStartingWith("engine.cost: must be one of").hasMessageEndingWith("got 'gpt-5'");
        assertThatThrownBy(() -> SimEngineConfig.from(base().with("engine.max-num-seqs", "0")))
                .isInstanceOf(IllegalArgumentException.class).hasMessageStartingWith("engine.max-num-seqs");
    }
}
