package io.orbitkv.pd.cli;

import io.orbitkv.pd.kvbridge.BridgeConfig;
import io.orbitkv.pd.kvbridge.KvEventsBridge;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/** {@code orbitkv-pd kv-events-bridge}: one vLLM engine's ZMQ KV-cache events into {@code orbitkv.kv-events}. */
@Command(name = "kv-events-bridge", mixinStandardHelpOptions = true,
        header = "Writes a vLLM engine's KV-cache events (its --kv-events-config ZMQ publisher) to orbitkv.kv-events.",
        description = {"Subscribes to a vLLM engine's KV-cache event publisher (PUB frames [topic, 8-byte sequence, msgpack batch]; both",
                "the positional and the named-field encodings of vLLM's events), and writes each event as a KvCacheEvent keyed by the",
                "engine id, as engines on the engine API report theirs, for the proxy's KV-aware routing. A batch missed is asked for on",
                "the replay socket; one lost for good, or a restarted publisher, starts a new instance epoch with a clear. Batches that",
                "do not decode go to the dead-letter topic. One bridge per engine (per data-parallel rank). Keys: docs/vllm.md."})
final class KvEventsBridgeCommand implements Callable<Integer> {

    @Option(names = "--config", description = "Properties file (bootstrap.servers, bridge.*, topics.*, serde.*, kafka.*).")
    Path config;

    @Option(names = "--bootstrap", description = "Kafka bootstrap servers (overrides bootstrap.servers).")
    String bootstrap;

    @Option(names = "--engine-id", description = "The engine's registered id (overrides bridge.engine-id).")
    String engineId;

    @Option(names = "--endpoint", description = "The engine's publisher, e.g. tcp://10.0.0.5:5557 (overrides bridge.endpoint).")
    String endpoint;

    @Option(names = "--replay-endpoint", description = "Its replay socket, e.g. tcp://10.0.0.5:5558 (overrides bridge.replay-endpoint).")
    String replayEndpoint;

    @Override
    public Integer call() throws Exception {
        ConfigProps props = ConfigProps.loadOrEmpty(config);
        props.override("bootstrap.servers", bootstrap);
        props.override("bridge.engine-id", engineId);
        props.override("bridge.endpoint", endpoint);
        props.override("bridge.replay-endpoint", replayEndpoint);
        BridgeConfig cfg = BridgeConfig.from(props);
        props.requireAllKeysUsed("docs/vllm.md");
        KvEventsBridge bridge = KvEventsBridge.open(cfg).start();
        io.orbitkv.pd.runtime.ShutdownBound.install("kv-events-bridge", bridge::close);
        System.out.println("kv-events-bridge for " + cfg.engineId() + ": " + cfg.endpoint() + (cfg.replayEndpoint().isEmpty() ? ""
                : " (replay " + cfg.replayEndpoint() + ")") + " -> " + cfg.topics().prefix() + "kv-events");
        try {
            bridge.stopped().join();
            return 0;
        } catch (java.util.concurrent.CompletionException e) {
            System.err.println("kv-events-bridge stopped: " + e.getCause()); // a supervisor restarts it; the log says why
            return 1;
        }
    }
}
