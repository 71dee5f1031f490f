package io.orbitkv.pd.gpu;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.gpu.cuda.CudaDriver;
import io.orbitkv.pd.gpu.cuda.CudaUnavailableException;
import io.orbitkv.pd.transport.KvTransportProvider;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The worker finds the transport by name; on a machine without a GPU it says so, with the reason, and nothing else breaks. */
class CudaTransportProviderTest {

    private final CudaTransportProvider missing = new CudaTransportProvider(() -> CudaDriver.load("libcuda-not-here.so.1"));

    @Test
    void isFoundByNameOnTheClassPath() {
        assertThat(KvTransportProvider.find("cuda")).get().isInstanceOf(CudaTransportProvider.class);
        assertThat(KvTransportProvider.find("carrier-pigeon")).isEmpty();
    }

    @Test
    void withoutADriverItReportsItselfUnavailableWithTheReason() {
        assertThat(missing.unavailableReason()).get().asString().startsWith("cannot load libcuda-not-here.so.1");
        assertThatThrownBy(() -> missing.open("w-1", null, Map.of()))
                .isInstanceOf(CudaUnavailableException.class)
                .hasMessageStartingWith("transport cuda is unavailable: cannot load libcuda-not-here.so.1");
    }

    @Test
    void badSettingsAreNamedBeforeTheDriverIsTouched() {
        assertThatThrownBy(() -> missing.open("w-1", null, Map.of("mode", "teleport")))
                .isInstanceOf(IllegalArgumentException.class).hasMessageStartingWith("transfer.cuda.mode: must be kernel, batch or per-copy");
    }
}
