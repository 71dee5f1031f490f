package io.orbitkv.pd.schemas;

import java.net.URI;
import java.time.Duration;

/**
 * How events are serialized.
 *
 * @param mode            wire format; {@link SerdeMode#EMBEDDED} needs nothing else
 * @param registryUrl     base URL of a Confluent-compatible registry API (for Apicurio:
 *                        {@code http://host:port/apis/ccompat/v7}); required in registry mode
 * @param autoRegister    register the writer schema on first use (registry mode); otherwise look it up
 * @param maxRecordBytes  records larger than this are refused before any parsing
 * @param registryTimeout per-call timeout of registry REST calls
 */
public record SerdeConfig(SerdeMode mode, URI registryUrl, boolean autoRegister, int maxRecordBytes, Duration registryTimeout) {

    /** Default maximum record size: a transfer order for ~100k scattered pages still fits. */
    public static final int DEFAULT_MAX_RECORD_BYTES = 4 * 1024 * 1024;

    public SerdeConfig {
        if (mode == null) {
            throw new IllegalArgumentException("serde.mode: must be embedded or registry, got null");
        }
        if (mode == SerdeMode.REGISTRY && registryUrl == null) {
            throw new IllegalArgumentException("serde.registry.url: required when serde.mode is registry");
        }
        if (registryUrl != null && !("http".equals(registryUrl.getScheme()) || "https".equals(registryUrl.getScheme()))) {
            throw new IllegalArgumentException("serde.registry.url: must be an http(s) URL, got " + registryUrl);
        }
        if (maxRecordBytes < 64) {
            throw new IllegalArgumentException("serde.max.record.bytes: must be >= 64, got " + maxRecordBytes);
        }
        if (registryTimeout == null || registryTimeout.isNegative() || registryTimeout.isZero()) {
            throw new IllegalArgumentException("serde.registry.timeout: must be positive, got " + registryTimeout);
        }
    }

    /** The embedded default: no server. */
    public static SerdeConfig embedded() {
        return new SerdeConfig(SerdeMode.EMBEDDED, null, false, DEFAULT_MAX_RECORD_BYTES, Duration.ofSeconds(10));
    }

    /** Registry mode against a Confluent-compatible REST API, auto-registering writer schemas. */
    public static SerdeConfig registry(URI registryUrl) {
        return new SerdeConfig(SerdeMode.REGISTRY, registryUrl, true, DEFAULT_MAX_RECORD_BYTES, Duration.ofSeconds(10));
    }
}
