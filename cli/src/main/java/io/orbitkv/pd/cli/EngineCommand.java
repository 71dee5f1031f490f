package io.orbitkv.pd.cli;

import io.orbitkv.pd.engine.sim.SimEngine;
import io.orbitkv.pd.engine.sim.SimEngineConfig;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.nio.file.Path;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/** {@code orbitkv-pd engine}: runs one simulated inference engine (OpenAI-compatible HTTP over a paged KV pool). */
@Command(name = "engine", mixinStandardHelpOptions = true,
        header = "Runs a simulated OpenAI-compatible inference engine that takes part in P/D.",
        description = {"Runs a simulated inference engine: an OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions,",
                "/v1/models, /health, /stats) with a paged KV pool and a deterministic model, taking part in P/D through the engine",
                "client (registration, facts, decisions). With engine.worker.enabled (default) it waits for its transfer worker",
                "(./orbitkv-pd worker, same pool file). Keys and defaults: docs/engine-integration.md."})
final class EngineCommand implements Callable<Integer> {

    @Option(names = "--config", description = "Properties file (engine.*, bootstrap.servers, topics.*, serde.*, kafka.*).")
    Path config;

    @Option(names = "--role", description = "prefill, decode or both (overrides engine.role).")
    String role;

    @Option(names = "--id", description = "Engine id (overrides engine.id).")
    String id;

    @Option(names = "--port", description = "HTTP port (overrides engine.http.port; 0 = any).")
    Integer port;

    @Option(names = "--bootstrap", description = "Kafka bootstrap servers (overrides bootstrap.servers; without it"
            + " and without engine.api.path, the worker's engine API socket: a standalone, colocated-only engine).")
    String bootstrap;

    @Override
    public Integer call() throws Exception {
        ConfigProps props = ConfigProps.loadOrEmpty(config);
        props.override("engine.role", role);
        props.override("engine.id", id);
        props.override("engine.http.port", port);
        props.override("bootstrap.servers", bootstrap);
        SimEngineConfig cfg = SimEngineConfig.from(props);
        props.requireAllKeysUsed("docs/engine-integration.md");
        SimEngine engine = SimEngine.start(cfg);
        io.orbitkv.pd.runtime.ShutdownBound.install("engine", engine::close);
        System.out.println("engine running: id=" + cfg.engineId() + " role=" + cfg.role().name().toLowerCase() + " url=" + engine.url() + " preset="
                + cfg.preset() + " blocks=" + cfg.geometry().numBlocks() + (engine.client() == null ? " (standalone)"
                : " instance-epoch=" + engine.client().instanceEpoch()));
        engine.awaitClose();
        return 0;
    }
}
