package io.orbitkv.pd.kvbridge;

import io.orbitkv.pd.schemas.SerdeConfig;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.time.Duration;
import java.util.Map;

/**
 * How {@code orbitkv-pd kv-events-bridge} runs: one vLLM engine's KV-cache event publisher into {@code orbitkv.kv-events}.
 * Read from {@code --config} properties by {@link #from(ConfigProps)}; every key is in docs/vllm.md ("KV-cache events").
 *
 * @param bootstrapServers Kafka bootstrap servers ({@code bootstrap.servers}, required)
 * @param engineId         the engine the events are written for ({@code bridge.engine-id}, required): the id it registered
 *                         with (its connector's), so a router joins the events to the engine
 * @param endpoint         the engine's publisher ({@code bridge.endpoint}, required: vLLM's {@code endpoint} with the host
 *                         it binds, e.g. {@code tcp://10.0.0.5:5557})
 * @param replayEndpoint   its replay socket ({@code bridge.replay-endpoint}; empty: none, a gap is then lost)
 * @param zmqTopic         the publisher's topic ({@code bridge.zmq-topic}, vLLM's {@code topic}, default empty)
 * @param instanceEpoch    the epoch the events are written under ({@code bridge.instance-epoch}; 0: the bridge's start time
 *                         in ms, and a new one when the publisher restarts)
 * @param replayTimeout    how long a replay may take before the gap counts as lost ({@code bridge.replay-timeout})
 * @param topics           topic names (must match the other components')
 * @param serde            wire format of the events
 * @param kafkaOverrides   extra producer properties ({@code kafka.*} keys, prefix removed)
 */
public record BridgeConfig(String bootstrapServers, String engineId, String endpoint, String replayEndpoint, String zmqTopic,
                           long instanceEpoch, Duration replayTimeout, TopicsConfig topics, SerdeConfig serde, Map<String, Object> kafkaOverrides) {

    public BridgeConfig {
        if (bootstrapServers == null || bootstrapServers.isBlank()) {
            throw new IllegalArgumentException("bootstrap.servers: required");
        }
        if (engineId == null || !engineId.matches("[A-Za-z0-9._:-]{1,128}")) {
            throw new IllegalArgumentException("bridge.engine-id: required, letters, digits and . _ : - (the engine's registered id), got "
                    + engineId);
        }
        requireEndpoint("bridge.endpoint", endpoint, true);
        requireEndpoint("bridge.replay-endpoint", replayEndpoint, false);
        if (instanceEpoch < 0) {
            throw new IllegalArgumentException("bridge.instance-epoch: must be >= 0, got " + instanceEpoch);
        }
        ConfigProps.requirePositive("bridge.replay-timeout", replayTimeout);
        zmqTopic = zmqTopic == null ? "" : zmqTopic;
        replayEndpoint = replayEndpoint == null ? "" : replayEndpoint;
        kafkaOverrides = Map.copyOf(kafkaOverrides);
    }

    private static void requireEndpoint(String key, String v, boolean required) {
        if (v == null || v.isBlank()) {
            if (required) {
                throw new IllegalArgumentException(key + ": required (a ZMQ endpoint such as tcp://10.0.0.5:5557)");
            }
            return;
        }
        if (!v.matches("(tcp://[^\\s*]+:\\d{1,5}|ipc://\\S+|inproc://\\S+)")) {
            throw new IllegalArgumentException(key + ": a ZMQ endpoint to connect to (tcp://HOST:PORT, ipc://PATH), got '" + v + "'"
                    + (v.contains("*") ? " — '*' is the publisher's bind address; give the host it is reached at" : ""));
        }
    }

    public static BridgeConfig from(ConfigProps p) {
        return new BridgeConfig(p.required("bootstrap.servers"), p.string("bridge.engine-id", null), p.string("bridge.endpoint", null),
                p.string("bridge.replay-endpoint", ""), p.string("bridge.zmq-topic", ""), p.longValue("bridge.instance-epoch", 0),
                p.duration("bridge.replay-timeout", Duration.ofSeconds(2)), p.topics(), p.serde(), p.withPrefix("kafka."));
    }
}
