package io.orbitkv.pd.gpu;

import io.orbitkv.pd.transport.PushGate;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;

/**
 * The receivers a {@code cuda} push can reach: the gates of the engines whose pools this worker process has mapped,
 * by engine id. A cuda handoff runs inside the one process that holds both engines' pools (the node's worker), so
 * this registry is per process; {@link #shared()} joins every cuda transport of the JVM, tests make their own.
 */
public final class CudaFabric {

    private static final CudaFabric SHARED = new CudaFabric();

    private final Map<String, PushGate> gates = new ConcurrentHashMap<>();

    public static CudaFabric shared() {
        return SHARED;
    }

    void bind(PushGate gate) {
        if (gates.putIfAbsent(gate.engineId(), gate) != null) {
            throw new IllegalStateException("cuda transport: engine " + gate.engineId() + " already has a receiver in this process");
        }
    }

    void unbind(PushGate gate) {
        gates.remove(gate.engineId(), gate);
    }

    Optional<PushGate> lookup(String engineId) {
        return Optional.ofNullable(gates.get(engineId));
    }
}
