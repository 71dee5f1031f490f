package io.orbitkv.pd.worker;

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
        if (port < -1 || port > 65535) {
            throw new IllegalArgumentException("worker.http.port: must be -1 (off), 0 (any) or 1..65535, got " + port);
        }
    }

    public boolean enabled() {
        return port >= 0;
    }

    public static WorkerHttpConfig from(ConfigProps p) {
        return new WorkerHttpConfig(p.string("worker.http.host", "127.0.0.1"), p.integer("worker.http.port", -1));
    }
}
