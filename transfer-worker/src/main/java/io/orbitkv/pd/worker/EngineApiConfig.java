package io.orbitkv.pd.worker;

import io.orbitkv.pd.engine.client.api.ApiFrames;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.nio.file.Path;

/**
 * The worker's local engine API (docs/engine-api.md): on when {@code worker.engine-api.path} names a Unix domain
 * socket. With it on, the engine registers itself through the socket (layout, pool, instance epoch): the worker maps
 * the engine's pool, starts its transports and announces the engine only then, and streams the engine's decisions to
 * it.
 *
 * @param path           the socket ({@code worker.engine-api.path}); null: off
 * @param maxFrameBytes  the largest frame a client may send ({@code worker.engine-api.max-frame-bytes})
 * @param decisionBuffer decisions kept for an engine that reconnects ({@code worker.engine-api.decision-buffer})
 * @param ioTimeout      a client stalled this long inside a frame, or silent this long before its hello, is disconnected
 *                       ({@code worker.engine-api.io-timeout}); an engine idle between frames is never
 */
public record EngineApiConfig(Path path, int maxFrameBytes, int decisionBuffer, java.time.Duration ioTimeout) {

    public static final java.time.Duration DEFAULT_IO_TIMEOUT = java.time.Duration.ofSeconds(10);
    public static final EngineApiConfig OFF = new EngineApiConfig(null, ApiFrames.DEFAULT_MAX_BYTES, 65_536, DEFAULT_IO_TIMEOUT);

    public EngineApiConfig {
        ConfigProps.requireRange("worker.engine-api.max-frame-bytes", maxFrameBytes, 1024, 64 << 20);
        ConfigProps.requireRange("worker.engine-api.decision-buffer", decisionBuffer, 16, 10_000_000);
        ConfigProps.requirePositive("worker.engine-api.io-timeout", ioTimeout);
        if (path != null && path.toString().getBytes(java.nio.charset.StandardCharsets.UTF_8).length > 100) {
            // sockaddr_un.sun_path is 108 bytes on Linux, with its terminating NUL
            throw new IllegalArgumentException("worker.engine-api.path: at most 100 bytes (a Unix socket path limit), got " + path);
        }
    }

    public boolean enabled() {
        return path != null;
    }

    public static EngineApiConfig from(ConfigProps p) {
        String path = p.string("worker.engine-api.path", "");
        return new EngineApiConfig(path.isEmpty() ? null : Path.of(path), p.integer("worker.engine-api.max-frame-bytes", ApiFrames.DEFAULT_MAX_BYTES),
                p.integer("worker.engine-api.decision-buffer", 65_536), p.duration("worker.engine-api.io-timeout", DEFAULT_IO_TIMEOUT));
    }
}
