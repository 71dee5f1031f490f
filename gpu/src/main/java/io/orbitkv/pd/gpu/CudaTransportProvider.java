package io.orbitkv.pd.gpu;

import io.orbitkv.pd.gpu.cuda.CudaDriver;
import io.orbitkv.pd.gpu.cuda.CudaUnavailableException;
import io.orbitkv.pd.transport.KvTransport;
import io.orbitkv.pd.transport.KvTransportProvider;
import io.orbitkv.pd.transport.PushGate;
import java.util.Map;
import java.util.Optional;
import java.util.function.Supplier;

/**
 * Makes the {@code cuda} transport findable by name ({@code KvTransportProvider.find("cuda")}, registered in
 * {@code META-INF/services}). Nothing native is loaded until it is asked for.
 */
public final class CudaTransportProvider implements KvTransportProvider {

    private final Supplier<CudaDriver.Availability> driver;

    /** The provider ServiceLoader makes: the process's driver, {@code libcuda.so.1}. */
    public CudaTransportProvider() {
        this(CudaDriver::load);
    }

    /** A provider with another driver source (tests exercise the unavailable path with it). */
    public CudaTransportProvider(Supplier<CudaDriver.Availability> driver) {
        this.driver = driver;
    }

    @Override
    public String name() {
        return CudaTransport.NAME;
    }

    @Override
    public Optional<String> unavailableReason() {
        CudaDriver.Availability a = driver.get();
        return a.available() ? Optional.empty() : Optional.of(a.reason());
    }

    /**
     * @throws CudaUnavailableException {@code transport cuda is unavailable: <why>} when there is no usable driver
     */
    @Override
    public KvTransport open(String workerId, PushGate gate, Map<String, String> settings) {
        CudaConfig config = CudaConfig.parse(settings);
        CudaDriver.Availability a = driver.get();
        if (!a.available()) {
            throw new CudaUnavailableException("transport cuda is unavailable: " + a.reason());
        }
        return CudaTransport.open(config, CudaFabric.shared(), workerId, gate, a.orElseThrow());
    }
}
