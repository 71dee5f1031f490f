package io.orbitkv.pd.transport.local;

import io.orbitkv.pd.transport.PushGate;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The "network" of the {@code local} transport: gates of receivers in this JVM by address. One process-wide
 * fabric ({@link #shared()}) joins every worker started in the same JVM; tests may make their own.
 */
public final class LocalFabric {

    private static final LocalFabric SHARED = new LocalFabric();

    private final Map<String, PushGate> gates = new ConcurrentHashMap<>();

    public static LocalFabric shared() {
        return SHARED;
    }

    void bind(String address, PushGate gate) {
        if (gates.putIfAbsent(address, gate) != null) {
            throw new IllegalStateException("local transport: address " + address + " is already bound in this process");
        }
    }

    void unbind(String address, PushGate gate) {
        gates.remove(address, gate);
    }

    Optional<PushGate> lookup(String address) {
        return Optional.ofNullable(gates.get(address));
    }
}
