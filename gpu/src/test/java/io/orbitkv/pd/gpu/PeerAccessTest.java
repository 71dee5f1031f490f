package io.orbitkv.pd.gpu;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import org.junit.jupiter.api.Test;

/**
 * A pool on another GPU than the worker's: accepted with peer access, refused with the reason without it, or when the
 * process does not see that GPU at all (checked at registration, never at the first push).
 */
class PeerAccessTest {

    @Test
    void theSameGpuNeedsNothing() {
        assertThat(ImportedKvPool.peerProblem("decode-0", 0, 0, 1, (a, b) -> false)).isNull();
    }

    @Test
    void anotherGpuNeedsPeerAccess() {
        assertThat(ImportedKvPool.peerProblem("decode-0", 0, 1, 2, (a, b) -> true)).isNull();
        assertThat(ImportedKvPool.peerProblem("decode-0", 0, 1, 2, (a, b) -> false))
                .isEqualTo("the KV pool of engine decode-0 is on cuda:1 and this worker copies on cuda:0, and the two GPUs cannot reach each other"
                        + " (cuDeviceCanAccessPeer says no: no NVLink or PCIe peer path): put the engine and the worker's transfer.cuda.device on"
                        + " one GPU, or on GPUs with peer access");
    }

    @Test
    void aGpuTheProcessDoesNotSeeIsRefused() {
        assertThat(ImportedKvPool.peerProblem("decode-0", 0, 1, 1, (a, b) -> true))
                .contains("this process sees 1 GPU(s): cuda:1 is not one of them").contains("CUDA_VISIBLE_DEVICES");
    }

    @Test
    void aLocationIsCudaAndAnOrdinal() {
        assertThat(ImportedKvPool.ordinalOf("cuda:3")).isEqualTo(3);
        assertThatThrownBy(() -> ImportedKvPool.ordinalOf("cuda:x")).hasMessageContaining("not cuda:<device ordinal>");
    }
}
