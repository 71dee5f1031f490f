package io.orbitkv.pd.engine.client;

import static io.orbitkv.pd.schemas.config.ConfigProps.requirePositive;

import io.orbitkv.pd.schemas.SerdeConfig;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.time.Duration;
import java.util.Map;

/**
 * How an engine talks to the control plane. Read by {@link #from(ConfigProps)} from the engine's {@code --config}
 * properties; every key is documented in {@code docs/engine-integration.md}.
 *
 * @param bootstrapServers Kafka ({@code bootstrap.servers}, required)
 * @param engineId         the engine's id, the key of its registration and of its commands ({@code engine.id})
 * @param instanceEpoch    the engine's instance epoch, or null to adopt the one its transfer worker announces
 *                         ({@code engine.instance-epoch}); strictly increasing across restarts of the engine's memory
 * @param expectWorker     whether a transfer worker serves this engine ({@code engine.worker.enabled}): the engine
 *                         then waits for the worker's announcement and re-announces it with its own fields (HTTP URL,
 *                         role, model), so the registration carries both the worker's endpoints and the engine's URL
 * @param workerWait       how long to wait for the worker's announcement ({@code engine.worker.wait})
 * @param isolationLevel   isolation of the command consumer ({@code read_uncommitted}: low-latency mode, see docs/decider.md)
 * @param topics           topic names and sizes (must match the other components')
 * @param serde            wire format of the events
 * @param kafkaOverrides   extra client properties ({@code kafka.*}, prefix removed)
 */
public record EngineClientConfig(String bootstrapServers, String engineId, Long instanceEpoch, boolean expectWorker, Duration workerWait,
                                 String isolationLevel, TopicsConfig topics, SerdeConfig serde, Map<String, Object> kafkaOverrides) {

    public EngineClientConfig {
        if (bootstrapServers == null || bootstrapServers.isBlank()) {
            throw new IllegalArgumentException("bootstrap.servers: required");
        }
        if (engineId == null || !engineId.matches("[A-Za-z0-9._:-]+")) {
            throw new IllegalArgumentException("engine.id: required; letters, digits, '.', '_', ':' and '-' only, got " + engineId);
        }
        if (instanceEpoch != null && instanceEpoch < 1) {
            throw new IllegalArgumentException("engine.instance-epoch: must be >= 1, got " + instanceEpoch);
        }
        requirePositive("engine.worker.wait", workerWait);
        if (!"read_uncommitted".equals(isolationLevel) && !"read_committed".equals(isolationLevel)) {
            throw new IllegalArgumentException("engine.isolation.level: must be read_uncommitted or read_committed, got " + isolationLevel);
        }
        kafkaOverrides = Map.copyOf(kafkaOverrides);
    }

    /** Reads the client's keys; {@code engine.id} may be given as {@code defaultEngineId}. */
    public static EngineClientConfig from(ConfigProps p) {
        String epoch = p.string("engine.instance-epoch", null);
        Long e;
        try {
            e = epoch == null || epoch.isEmpty() ? null : Long.parseLong(epoch);
        } catch (NumberFormatException ex) {
            throw new IllegalArgumentException("engine.instance-epoch: must be an integer, got '" + epoch + "'");
        }
        return new EngineClientConfig(p.required("bootstrap.servers"), p.string("engine.id", null), e, p.bool("engine.worker.enabled", true),
                p.duration("engine.worker.wait", Duration.ofSeconds(60)), p.string("engine.isolation.level", "read_uncommitted"), p.topics(),
                p.serde(), p.withPrefix("kafka."));
    }
}
