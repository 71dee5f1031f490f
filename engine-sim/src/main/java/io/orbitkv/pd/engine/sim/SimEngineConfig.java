package io.orbitkv.pd.engine.sim;

import static io.orbitkv.pd.schemas.config.ConfigProps.requirePort;
import static io.orbitkv.pd.schemas.config.ConfigProps.requirePositive;
import static io.orbitkv.pd.schemas.config.ConfigProps.requireRange;

import io.orbitkv.pd.engine.client.EngineClientConfig;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.schemas.config.Addresses;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.nio.file.Path;
import java.time.Duration;

/**
 * How one simulated engine runs ({@code ./orbitkv-pd engine --config FILE}); every key and its default is in
 * {@code docs/engine-integration.md}. Errors name the key.
 *
 * @param engineId       the engine's id ({@code engine.id}, required)
 * @param role           prefill, decode or both ({@code engine.role})
 * @param model          the served model name ({@code engine.model})
 * @param preset         the KV layout's shape ({@code engine.preset}: 8b, 70b, tiny)
 * @param geometry       the pool: the preset with {@code engine.pool.blocks} blocks, KV heads split over {@code engine.layout.tp-size}
 * @param tpSize         tensor-parallel size the layout is sharded for
 * @param poolPath       shared file of the pool (tmpfs, mapped by the transfer worker too), or null for private memory
 * @param httpHost       bind address ({@code engine.http.host})
 * @param httpPort       port, 0 for any ({@code engine.http.port})
 * @param advertisedUrl  the URL announced to the proxy, or null for {@code http://host:port}
 * @param seed           the model seed: engines that must agree share it ({@code engine.model.seed})
 * @param compute        how the model computes: the step model's cost model and limits, the prefix cache ({@code engine.cost},
 *                       {@code engine.max-batched-tokens}, {@code engine.max-num-seqs}, {@code engine.prefix-cache.*})
 * @param maxPromptTokens longest prompt accepted ({@code engine.max-prompt-tokens})
 * @param maxBodyBytes   largest request body ({@code engine.http.max-body-bytes})
 * @param leaseDuration  lease asked for on decode-ready / heartbeat ({@code engine.lease.duration})
 * @param heartbeat      heartbeat period while a lease is held and the request is served ({@code engine.lease.heartbeat})
 * @param leaseMargin    self-fencing: a decode stops using its pages this long before its lease could run out at the decider
 *                       ({@code engine.lease.margin}; a tenth of the lease, at least 1 s)
 * @param kvTimeout      how long a decode waits for its KV before answering 504 ({@code engine.kv.timeout})
 * @param kvConfirm      while a decode waits for its KV, the longest its decode-ready fact or a heartbeat may go
 *                       unacknowledged before the request is given back (503, the proxy tries other engines): an engine cut
 *                       off from Kafka ({@code engine.kv.confirm-timeout}, 6 s; heartbeats go every quarter of it meanwhile)
 * @param verify         verify every received page beside the decode; the answer ends only on verified KV ({@code engine.kv.verify})
 * @param kvNice         CPU niceness of the simulated KV work (materialising a prompt's KV, checking received KV):
 *                       it stands for GPU work, so it yields the cores to the control plane ({@code engine.kv.nice},
 *                       0..19, 0 = as the rest of the engine)
 * @param corruptKvPrefix fault injection for tests ({@code engine.fault.corrupt-kv-prefix}): a prefill engine flips one
 *                       bit of the KV it computed for requests whose id starts with this (null: never), so a test can
 *                       show that the decode side refuses what does not verify
 * @param control        Kafka settings, or null when {@code bootstrap.servers} is unset (then the engine joins through
 *                       {@code api}, or runs standalone: colocated requests only)
 * @param api            the transfer worker's engine API ({@code engine.api.path}), or null: the engine reports its facts
 *                       and reads its decisions over the worker's local socket instead of Kafka, as an engine in another
 *                       language does (docs/engine-api.md)
 */
public record SimEngineConfig(String engineId, EngineRole role, String model, ModelPreset preset, KvGeometry geometry, int tpSize, Path poolPath,
                              String httpHost, int httpPort, String advertisedUrl, long seed, ComputeModel compute,
                              int maxPromptTokens, int maxBodyBytes, Duration leaseDuration, Duration heartbeat, Duration leaseMargin, Duration kvTimeout, Duration kvConfirm,
                              boolean verify, int kvNice, String corruptKvPrefix, EngineClientConfig control,
                              ApiJoin api) {

    /**
     * The default {@code engine.kv.nice}: measured at 4 requests in flight on 2 cores, the engines' KV passes at normal
     * priority made every Kafka hop of the handoff 2.4–3.3× a raw hop; at 10 they are 1.2–1.8× (docs/bench/e2e.md).
     */
    public static final int DEFAULT_KV_NICE = 10;

    /**
     * Joining through the worker's engine API.
     *
     * @param socket        the worker's socket ({@code engine.api.path}, its {@code worker.engine-api.path})
     * @param instanceEpoch this engine memory's instance epoch ({@code engine.instance-epoch}; default: the start time in ms)
     * @param connectWait   how long to wait for the worker's socket ({@code engine.worker.wait})
     */
    public record ApiJoin(Path socket, long instanceEpoch, Duration connectWait) {
        public ApiJoin {
            if (instanceEpoch < 1) {
                throw new IllegalArgumentException("engine.instance-epoch: must be >= 1, got " + instanceEpoch);
            }
            requirePositive("engine.worker.wait", connectWait);
        }
    }

    public SimEngineConfig {
        if (engineId == null || !engineId.matches("[A-Za-z0-9._:-]+")) {
            throw new IllegalArgumentException("engine.id: required; letters, digits, '.', '_', ':' and '-' only, got " + engineId);
        }
        if (role == null || role == EngineRole.UNKNOWN) {
            throw new IllegalArgumentException("engine.role: must be prefill, decode or both, got " + role);
        }
        requirePort("engine.http.port", httpPort, false);
        if (advertisedUrl == null && Addresses.isWildcard(httpHost)) {
            throw new IllegalArgumentException("engine.http.advertised-url: required when engine.http.host is a wildcard (" + httpHost
                    + "): set the URL the proxy reaches this engine at (nothing is guessed from the host name or a route)");
        }
        if (control != null) {
            // On Kafka itself the engine announces its URL; its worker checks it on the engine API.
            Addresses.requireReachable(advertisedUrl != null ? "engine.http.advertised-url" : "engine.http.host",
                    advertisedUrl != null ? Addresses.urlHost(advertisedUrl) : httpHost, control.bootstrapServers());
        }
        requireRange("engine.max-prompt-tokens", maxPromptTokens, 1, 10_000_000);
        requireRange("engine.http.max-body-bytes", maxBodyBytes, 1024, 1 << 30);
        requirePositive("engine.lease.duration", leaseDuration);
        requirePositive("engine.lease.heartbeat", heartbeat);
        requirePositive("engine.kv.timeout", kvTimeout);
        requirePositive("engine.kv.confirm-timeout", kvConfirm);
        requireRange("engine.kv.nice", kvNice, 0, 19);
        requirePositive("engine.lease.margin", leaseMargin);
        if (heartbeat.plus(leaseMargin).compareTo(leaseDuration) >= 0) {
            throw new IllegalArgumentException("engine.lease.margin: heartbeat (" + heartbeat + ") + margin (" + leaseMargin
                    + ") must be shorter than engine.lease.duration (" + leaseDuration + "), or every lease is given up before it is renewed");
        }
        if (heartbeat.compareTo(leaseDuration) >= 0) {
            throw new IllegalArgumentException("engine.lease.heartbeat: must be shorter than engine.lease.duration (" + leaseDuration + "), got "
                    + heartbeat);
        }
        SimModel.tokenBytes(geometry);
        if (control != null && !control.engineId().equals(engineId)) {
            throw new IllegalArgumentException("engine.id: differs between the engine and its client");
        }
        if (api != null && control != null) {
            throw new IllegalArgumentException("engine.api.path: an engine joins through its worker's engine API or through Kafka"
                    + " (bootstrap.servers), not both; unset one of them");
        }
        if (api != null && poolPath == null) {
            throw new IllegalArgumentException("engine.pool.path: required with engine.api.path (the pool file the engine and its worker share)");
        }
        if (control != null && control.expectWorker() && poolPath == null) {
            throw new IllegalArgumentException("engine.pool.path: required when a transfer worker serves the engine (engine.worker.enabled=true):"
                    + " the worker maps the same file, e.g. /dev/shm/orbitkv-" + engineId + ".kv");
        }
    }

    public static SimEngineConfig from(ConfigProps p) {
        String id = p.string("engine.id", null);
        ModelPreset preset = ModelPreset.of(p.string("engine.preset", "8b"));
        int tp = p.integer("engine.layout.tp-size", 1);
        int blocks = p.integer("engine.pool.blocks", 512);
        KvGeometry g;
        try {
            g = preset.geometry(blocks, tp);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("engine.pool.blocks / engine.layout.*: " + e.getMessage());
        }
        String pool = p.string("engine.pool.path", "");
        String url = p.string("engine.http.advertised-url", "");
        String bootstrap = p.string("bootstrap.servers", "");
        String apiPath = p.string("engine.api.path", "");
        EngineClientConfig control = null;
        ApiJoin api = null;
        if (!bootstrap.isEmpty()) {
            control = EngineClientConfig.from(p);
        }
        if (!apiPath.isEmpty()) {
            String epoch = p.string("engine.instance-epoch", null);
            long e;
            try {
                e = epoch == null ? System.currentTimeMillis() : Long.parseLong(epoch.trim());
            } catch (NumberFormatException ex) {
                throw new IllegalArgumentException("engine.instance-epoch: must be an integer, got '" + epoch + "'");
            }
            api = new ApiJoin(Path.of(apiPath), e, p.duration("engine.worker.wait", Duration.ofSeconds(60)));
        }
        if (control == null) {
            // Read so that the keys are not reported as unknown; a standalone engine has no use for them.
            p.string("engine.instance-epoch", null);
            p.string("engine.worker.enabled", null);
            p.string("engine.worker.wait", null);
            p.string("engine.isolation.level", null);
            p.topics();
            p.serde();
            p.withPrefix("kafka.");
        }
        Duration lease = p.duration("engine.lease.duration", Duration.ofSeconds(30));
        return new SimEngineConfig(id, p.enumValue("engine.role", EngineRole.class, EngineRole.BOTH),
                p.string("engine.model", "orbitkv-sim-" + preset.key()), preset, g, tp, pool.isEmpty() ? null : Path.of(pool),
                p.string("engine.http.host", "127.0.0.1"), p.integer("engine.http.port", 8100), url.isEmpty() ? null : url,
                Long.parseLong(p.string("engine.model.seed", "42")),
                ComputeModel.from(p, preset), p.integer("engine.max-prompt-tokens", 32_768), p.integer("engine.http.max-body-bytes", 4 << 20),
                lease, p.duration("engine.lease.heartbeat", Duration.ofSeconds(10)),
                p.duration("engine.lease.margin", Duration.ofMillis(Math.max(1000, lease.toMillis() / 10))),
                p.duration("engine.kv.timeout", Duration.ofSeconds(60)), p.duration("engine.kv.confirm-timeout", Duration.ofSeconds(6)), p.bool("engine.kv.verify", true),
                p.integer("engine.kv.nice", DEFAULT_KV_NICE), p.string("engine.fault.corrupt-kv-prefix", null), control, api);
    }
}
