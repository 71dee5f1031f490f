package io.orbitkv.pd.transport;

import java.util.Map;
import java.util.Optional;
import java.util.ServiceLoader;

/**
 * A transport that lives in its own module ({@code cuda} in {@code orbitkv-gpu}, later {@code mooncake}), found by
 * name through {@link ServiceLoader} so that the worker can offer it without depending on that module. A provider
 * loads nothing native until {@link #open} or {@link #unavailableReason} is called.
 */
public interface KvTransportProvider {

    /** The transport's name ({@link KvTransport#name()}), e.g. {@code cuda}. */
    String name();

    /** Empty when the transport can run on this machine; else why not (no driver, no device), for the operator. */
    Optional<String> unavailableReason();

    /**
     * Starts the transport.
     *
     * @param workerId who pushes, for the receivers' logs
     * @param gate     the local engine's gate (its pool is what the transport serves); null for a send-only transport
     * @param settings the transport's settings without their {@code transfer.<name>.} prefix
     * @throws IllegalStateException    when the transport is unavailable here, with the reason
     * @throws IllegalArgumentException naming the setting that is wrong
     */
    KvTransport open(String workerId, PushGate gate, Map<String, String> settings);

    /** The provider named {@code name} on the class path, if any. */
    static Optional<KvTransportProvider> find(String name) {
        return ServiceLoader.load(KvTransportProvider.class).stream().map(ServiceLoader.Provider::get).filter(p -> p.name().equals(name))
                .findFirst();
    }
}
