package io.orbitkv.pd.worker;

import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.schemas.OrderTokens;
import io.orbitkv.pd.schemas.SerdeConfig;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.schemas.config.Addresses;
import io.orbitkv.pd.schemas.config.ConfigProps;
import io.orbitkv.pd.transport.KvTransportProvider;
import io.orbitkv.pd.transport.tcp.TcpConfig;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

/**
 * How one transfer worker runs. Read from {@code --config} properties by {@link #from(ConfigProps)}; every key and
 * its default is listed in {@code docs/worker.md}. Errors name the key.
 *
 * @param bootstrapServers Kafka ({@code bootstrap.servers}, required)
 * @param engineId         the engine this worker serves ({@code worker.engine.id}, required)
 * @param workerId         name in reports and logs
 * @param role             the engine's role, announced in its registration
 * @param model            the engine's model, announced in its registration
 * @param instanceEpoch    the engine's instance epoch; strictly increasing across restarts of the engine's memory
 * @param geometry         the pool's shape
 * @param tpRank           tensor-parallel rank of the engine
 * @param tpSize           tensor-parallel size
 * @param poolPath         shared file backing the pool (tmpfs), or null for anonymous memory owned by the worker
 * @param transports       transports this worker offers and uses, in order of preference
 * @param tcp              tcp transport settings
 * @param concurrency      orders executed at once
 * @param queueLimit       orders waiting beyond which the worker stops reading commands
 * @param dedupeCapacity   (order id, attempt) pairs remembered for dedupe and aborts
 * @param maxRuns          most destination runs a push may name
 * @param peerWait         how long an order waits for its destination's registration
 * @param commitInterval   how often consumed command offsets are committed
 * @param isolationLevel   isolation of the command consumer ({@code read_uncommitted}: low-latency mode, see docs/decider.md)
 * @param authKey          HMAC key of order tokens (the decider's {@code auth.key})
 * @param topics           topic names and sizes (must match the other components')
 * @param serde            wire format of the events
 * @param kafkaOverrides   extra client properties ({@code kafka.*}, prefix removed), for every client of the worker
 * @param transportSettings settings of transports that live in other modules ({@code transfer.<name>.*}, prefix removed),
 *                         found by name through {@link KvTransportProvider}, e.g. {@code mooncake}
 * @param engineApi        the local engine API ({@code worker.engine-api.*}); when on, the engine's hello gives the
 *                         layout, pool, role, model and instance epoch, and the {@code worker.layout.*},
 *                         {@code worker.engine.role/model/instance-epoch} keys are not used
 * @param previousAuthKey  during a key rotation, the key orders may still be signed with ({@code auth.key.previous}); null else
 * @param layerwiseMinBytes pushes of at least this many bytes go layer by layer when the engine reports its prefill's
 *                         progress ({@code worker.layerwise.min-bytes}); -1: never
 * @param holdPushPrefix   fault drills: pushes of requests whose id starts with this are held, reported started, for
 *                         {@code holdPush} or until the decider aborts them ({@code worker.fault.hold-push-prefix}; null: none)
 * @param holdPush         how long such a push is held ({@code worker.fault.hold-push})
 */
public record WorkerConfig(String bootstrapServers, String engineId, String workerId, EngineRole role, String model, long instanceEpoch,
                           KvGeometry geometry, int tpRank, int tpSize, Path poolPath, List<String> transports, TcpConfig tcp,
                           int concurrency, int queueLimit, int dedupeCapacity, int maxRuns, Duration peerWait, Duration commitInterval,
                           String isolationLevel, byte[] authKey, TopicsConfig topics, SerdeConfig serde,
                           Map<String, Object> kafkaOverrides, Map<String, Map<String, String>> transportSettings, EngineApiConfig engineApi,
                           byte[] previousAuthKey, long layerwiseMinBytes, String holdPushPrefix, Duration holdPush) {

    /**
     * Below this a push waits for the prefill's end and goes whole: the last layer's own stripe and the waits between
     * pieces cost more than the overlap saves on short prompts (SGLang #23515 measured +18 % TTFT at 256 tokens).
     */
    public static final long DEFAULT_LAYERWISE_MIN_BYTES = 8L << 20;

    /** Transports this build can run. */
    public static final List<String> AVAILABLE_TRANSPORTS = List.of("tcp", "local");
    /** Transports that live in modules of their own, and those modules (found through {@link KvTransportProvider}). */
    public static final Map<String, String> MODULE_TRANSPORTS = Map.of("cuda", "orbitkv-gpu", "mooncake", "orbitkv-mooncake");

    public WorkerConfig {
        if (bootstrapServers == null || bootstrapServers.isBlank()) {
            throw new IllegalArgumentException("bootstrap.servers: required");
        }
        if (engineId == null || !engineId.matches("[A-Za-z0-9._:-]+")) {
            throw new IllegalArgumentException("worker.engine.id: required; letters, digits, '.', '_', ':' and '-' only, got " + engineId);
        }
        if (workerId == null || workerId.isBlank()) {
            throw new IllegalArgumentException("worker.id: must not be empty");
        }
        if (role == null || role == EngineRole.UNKNOWN) {
            throw new IllegalArgumentException("worker.engine.role: must be prefill, decode or both, got " + role);
        }
        if (instanceEpoch < 1) {
            throw new IllegalArgumentException("worker.engine.instance-epoch: must be >= 1, got " + instanceEpoch);
        }
        if (tpSize < 1 || tpRank < 0 || tpRank >= tpSize) {
            throw new IllegalArgumentException("worker.layout.tp-rank / tp-size: need 0 <= tp-rank < tp-size, got " + tpRank + " / " + tpSize);
        }
        if (transports == null || transports.isEmpty()) {
            throw new IllegalArgumentException("worker.transports: at least one transport, e.g. tcp");
        }
        for (String t : transports) {
            if (!AVAILABLE_TRANSPORTS.contains(t) && KvTransportProvider.find(t).isPresent()) {
                continue; // a transport module on the class path (mooncake, cuda): it says at start whether it can run here
            }
            if (MODULE_TRANSPORTS.containsKey(t)) {
                // The distribution ships every module; only an embedding without it lands here.
                throw new IllegalArgumentException("worker.transports: '" + t + "' comes with the " + MODULE_TRANSPORTS.get(t)
                        + " module, which is not on this class path; available: " + AVAILABLE_TRANSPORTS);
            }
            if (!AVAILABLE_TRANSPORTS.contains(t)) {
                throw new IllegalArgumentException("worker.transports: unknown transport '" + t + "'; available: " + AVAILABLE_TRANSPORTS);
            }
        }
        transports = List.copyOf(transports);
        if (transports.contains("tcp")) {
            // Peers on other hosts push to what this worker advertises: loopback there is refused at start (docs/deploy.md).
            Addresses.requireReachable("transfer.tcp.host", tcp.bindHost(), "transfer.tcp.advertised-host", tcp.advertisedHost(), bootstrapServers);
        }
        ConfigProps.requireRange("worker.concurrency", concurrency, 1, 1024);
        ConfigProps.requireRange("worker.queue.limit", queueLimit, 1, 1_000_000);
        ConfigProps.requireRange("worker.dedupe.capacity", dedupeCapacity, 16, 10_000_000);
        ConfigProps.requireRange("worker.max-runs", maxRuns, 1, 65_536);
        ConfigProps.requirePositive("worker.peer.wait", peerWait);
        ConfigProps.requirePositive("worker.commit.interval", commitInterval);
        if (holdPushPrefix != null && holdPushPrefix.isBlank()) {
            holdPushPrefix = null;
        }
        ConfigProps.requirePositive("worker.fault.hold-push", holdPush);
        if (layerwiseMinBytes < -1) {
            throw new IllegalArgumentException("worker.layerwise.min-bytes: bytes >= 0, or -1 for never, got " + layerwiseMinBytes);
        }
        if (!"read_uncommitted".equals(isolationLevel) && !"read_committed".equals(isolationLevel)) {
            throw new IllegalArgumentException("worker.isolation.level: must be read_uncommitted or read_committed, got " + isolationLevel);
        }
        if (authKey == null || authKey.length < 16) {
            throw new IllegalArgumentException("auth.key: must be at least 16 bytes, got " + (authKey == null ? 0 : authKey.length));
        }
        authKey = authKey.clone();
        kafkaOverrides = Map.copyOf(kafkaOverrides);
        transportSettings = transportSettings == null ? Map.of() : Map.copyOf(transportSettings);
        engineApi = engineApi == null ? EngineApiConfig.OFF : engineApi;
    }

    public static WorkerConfig from(ConfigProps p) {
        String engine = p.string("worker.engine.id", null);
        KvSplit split = p.enumValue("worker.layout.kv-split", KvSplit.class, KvSplit.SEPARATE);
        int block = p.integer("worker.layout.block-size-tokens", 16);
        int heads = p.integer("worker.layout.num-kv-heads", 8);
        int headDim = p.integer("worker.layout.head-dim", 128);
        Dtype dtype = p.enumValue("worker.layout.dtype", Dtype.class, Dtype.BF16);
        int defaultPage = (int) Math.min(Integer.MAX_VALUE, (long) block * heads * headDim * Math.max(1, KvGeometry.dtypeBytes(dtype))
                * (split == KvSplit.FUSED ? 2 : 1));
        KvGeometry geometry;
        int layers = p.integer("worker.layout.num-layers", 32);
        int pageBytes = p.integer("worker.layout.page-bytes", defaultPage);
        int blocks = p.integer("worker.layout.num-blocks", 256);
        try {
            geometry = new KvGeometry(layers, split, block, heads, headDim, dtype, pageBytes, blocks);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("worker.layout.*: " + e.getMessage());
        }
        String pool = p.string("worker.pool.path", "");
        String key = p.string("auth.key", OrderTokens.DEV_KEY);
        String previous = p.string("auth.key.previous", "");
        return new WorkerConfig(
                p.required("bootstrap.servers"),
                engine,
                p.string("worker.id", "worker-" + engine),
                p.enumValue("worker.engine.role", EngineRole.class, EngineRole.BOTH),
                p.string("worker.engine.model", "unknown"),
                p.longValue("worker.engine.instance-epoch", System.currentTimeMillis()),
                geometry,
                p.integer("worker.layout.tp-rank", 0),
                p.integer("worker.layout.tp-size", 1),
                pool.isEmpty() ? null : Path.of(pool),
                Arrays.stream(p.string("worker.transports", "tcp").split(",")).map(String::strip).filter(s -> !s.isEmpty()).toList(),
                TcpConfig.from(p),
                p.integer("worker.concurrency", 4),
                p.integer("worker.queue.limit", 1000),
                p.integer("worker.dedupe.capacity", 100_000),
                p.integer("worker.max-runs", 65_536),
                p.duration("worker.peer.wait", Duration.ofSeconds(5)),
                p.duration("worker.commit.interval", Duration.ofSeconds(1)),
                p.string("worker.isolation.level", "read_uncommitted"),
                OrderTokens.parseKey(key),
                p.topics(),
                p.serde(),
                p.withPrefix("kafka."),
                providerSettings(p),
                EngineApiConfig.from(p),
                previous.isEmpty() ? null : OrderTokens.parseKey(previous),
                p.longValue("worker.layerwise.min-bytes", DEFAULT_LAYERWISE_MIN_BYTES),
                p.string("worker.fault.hold-push-prefix", null),
                p.duration("worker.fault.hold-push", Duration.ofSeconds(10)));
    }

    /** {@code transfer.<name>.*} of every transport that is neither tcp nor local, prefix removed. */
    private static Map<String, Map<String, String>> providerSettings(ConfigProps p) {
        Map<String, Map<String, String>> out = new java.util.HashMap<>();
        for (String t : Arrays.stream(p.string("worker.transports", "tcp").split(",")).map(String::strip).filter(s -> !s.isEmpty()).toList()) {
            if (!AVAILABLE_TRANSPORTS.contains(t)) {
                Map<String, String> m = new java.util.HashMap<>();
                p.withPrefix("transfer." + t + ".").forEach((k, v) -> m.put(k, String.valueOf(v)));
                out.put(t, m);
            }
        }
        return out;
    }

    public boolean usesDevAuthKey() {
        return Arrays.equals(authKey, OrderTokens.DEV_KEY.getBytes(StandardCharsets.UTF_8));
    }

    @Override
    public byte[] authKey() {
        return authKey.clone();
    }

    /** The order tokens this worker accepts: signed with {@code auth.key}, or during a rotation with {@code auth.key.previous}. */
    public OrderTokens orderTokens() {
        return new OrderTokens(authKey, previousAuthKey);
    }

    @Override
    public byte[] previousAuthKey() {
        return previousAuthKey == null ? null : previousAuthKey.clone();
    }

    /** Consumer group holding this worker's command offsets. */
    public String groupId() {
        return "orbitkv-worker-" + engineId;
    }
}
