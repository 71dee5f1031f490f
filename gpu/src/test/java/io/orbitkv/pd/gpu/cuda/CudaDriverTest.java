package io.orbitkv.pd.gpu.cuda;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import org.junit.jupiter.api.Test;

/** Loading the driver where there is none must never throw, and must say why CUDA is unavailable. */
class CudaDriverTest {

    @Test
    void aMissingLibraryMakesCudaUnavailableWithTheReason() {
        CudaDriver.Availability a = CudaDriver.load("libcuda-not-here.so.1");
        assertThat(a.available()).isFalse();
        assertThat(a.driver()).isEmpty();
        assertThat(a.reason()).startsWith("cannot load libcuda-not-here.so.1 (no NVIDIA driver on this machine?)");
        assertThatThrownBy(a::orElseThrow).isInstanceOf(CudaUnavailableException.class).hasMessage(a.reason());
    }

    @Test
    void aLibraryWithoutTheDriverSymbolsIsNotTakenForADriver() {
        CudaDriver.Availability a = CudaDriver.load("libc.so.6");
        assertThat(a.available()).isFalse();
        assertThat(a.reason()).isEqualTo("libc.so.6 is not a usable CUDA driver: it has no cuInit "
                + "(a driver older than CUDA 12, or not the NVIDIA driver library)");
    }

    @Test
    void theProcessDriverLoadsOnceAndEitherWorksOrSaysWhy() {
        CudaDriver.Availability a = CudaDriver.load();
        assertThat(CudaDriver.load()).isSameAs(a);
        if (a.available()) {
            assertThat(a.orElseThrow().driverVersion()).isGreaterThanOrEqualTo(12000);
        } else {
            assertThat(a.reason()).contains(CudaDriver.LIBRARY);
        }
    }

    @Test
    void errorsNameTheFunctionTheCodeAndTheContext() {
        CudaException e = new CudaException("cuMemAlloc_v2", 2, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory", "allocating 1024 bytes");
        assertThat(e).hasMessage("cuMemAlloc_v2 failed: CUDA_ERROR_OUT_OF_MEMORY (2): out of memory (allocating 1024 bytes)");
        assertThat(e.function()).isEqualTo("cuMemAlloc_v2");
        assertThat(e.code()).isEqualTo(CudaException.OUT_OF_MEMORY);
        assertThat(new CudaException("cuInit", 100, "CUDA_ERROR_NO_DEVICE", "", "")).hasMessage("cuInit failed: CUDA_ERROR_NO_DEVICE (100)");
    }

    @Test
    void structLayoutsMatchTheDriverHeaders() {
        assertThat(CudaDriver.IPC_HANDLE.byteSize()).isEqualTo(64);
        assertThat(CudaDriver.MEMCPY_ATTRIBUTES.byteSize()).isEqualTo(24);
    }
}
