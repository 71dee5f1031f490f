package io.orbitkv.pd.worker;

import static io.orbitkv.pd.schemas.config.ConfigProps.requirePort;

import io.orbitkv.pd.schemas.config.ConfigProps;

/**
 * The worker's small HTTP endpoint ({@code GET /metrics}, {@code GET /health}); kept apart from {@link WorkerConfig}
 * so the transfer settings stay one record. Off unless {@code worker.http.port} is set (0: any free port).
 *
 * @param host {@code worker.http.host} (127.0.0.1)
 * @param port {@code worker.http.port}: -1 (default) off, 0 any free port, else 1..65535
 */
public record WorkerHttpConfig(String host, int port) {

    public static final WorkerHttpConfig DISABLED = new WorkerHttpConfig("127.0.0.1", -1);

    public WorkerHttpConfig {
        if (host == null || host.isBlank()) {
            throw new IllegalArgumentException("worker.http.host: required");
        }
        requirePort("worker.http.port", port, true);
    }

    public boolean enabled() {
        return port >= 0;
    }

    public static WorkerHttpConfig from(ConfigProps p) {
        return new WorkerHttpConfig(p.string("worker.http.host", "127.0.0.1"), p.integer("worker.http.port", -1));
    }
}
