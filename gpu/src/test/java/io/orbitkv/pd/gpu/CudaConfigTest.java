package io.orbitkv.pd.gpu;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.util.Map;
import org.junit.jupiter.api.Test;

class CudaConfigTest {

    @Test
    void defaultsAreOneKernelLaunchPerOrderOnDeviceZero() {
        CudaConfig c = CudaConfig.parse(Map.of("node-id", "n1"));
        assertThat(c.device()).isZero();
        assertThat(c.mode()).isEqualTo(CudaCopyEngine.Mode.KERNEL);
        assertThat(c.kernel()).isEqualTo(CopyKernel.DEFAULT);
        assertThat(c.grid()).isEqualTo(CudaCopyEngine.Grid.PER_CHUNK);
        assertThat(c.chunkBytes()).isEqualTo(CudaConfig.DEFAULT_CHUNK_BYTES);
        assertThat(CudaConfig.parse(c.toSettings())).isEqualTo(c);
    }

    @Test
    void everySettingIsParsed() {
        CudaConfig c = CudaConfig.parse(Map.of("node-id", "n2", "device", "3", "mode", "batch", "kernel", "t512_u4_h0", "grid", "persistent",
                "chunk-bytes", "32768", "max-batch", "100"));
        assertThat(c).isEqualTo(new CudaConfig("n2", 3, CudaCopyEngine.Mode.BATCH, CopyKernel.T512_U4_H0, CudaCopyEngine.Grid.PERSISTENT, 32768, 100));
    }

    @Test
    void badValuesNameTheSetting() {
        assertThatThrownBy(() -> CudaConfig.parse(Map.of("device", "-1"))).hasMessage("transfer.cuda.device: must be >= 0, got -1");
        assertThatThrownBy(() -> CudaConfig.parse(Map.of("chunk-bytes", "1000"))).hasMessageStartingWith("transfer.cuda.chunk-bytes: must be a multiple of 16");
        assertThatThrownBy(() -> CudaConfig.parse(Map.of("kernel", "t64_u1_h0"))).hasMessageStartingWith("transfer.cuda.kernel: unknown kernel 't64_u1_h0'");
        assertThatThrownBy(() -> CudaConfig.parse(Map.of("grid", "huge"))).hasMessageStartingWith("transfer.cuda.grid:");
        assertThatThrownBy(() -> CudaConfig.parse(Map.of("max-batch", "lots"))).hasMessage("transfer.cuda.max-batch: not a number: 'lots'");
        assertThatThrownBy(() -> CudaConfig.parse(Map.of("colour", "blue"))).hasMessageStartingWith("transfer.cuda.colour: unknown setting");
        assertThatThrownBy(() -> CudaConfig.parse(Map.of("node-id", " "))).hasMessage("transfer.cuda.node-id: must not be blank");
    }
}
