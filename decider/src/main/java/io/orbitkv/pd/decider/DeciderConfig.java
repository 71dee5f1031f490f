package io.orbitkv.pd.decider;

import static io.orbitkv.pd.schemas.config.ConfigProps.requirePort;
import static io.orbitkv.pd.schemas.config.ConfigProps.requirePositive;
import static io.orbitkv.pd.schemas.config.ConfigProps.requireRange;

import io.orbitkv.pd.schemas.SerdeConfig;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.schemas.config.Addresses;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HexFormat;
import java.util.Map;

/**
 * How the decider runs. Read from {@code --config} properties by {@link #from(ConfigProps)}; every key and its
 * default is listed in {@code docs/decider.md}.
 *
 * @param bootstrapServers Kafka bootstrap servers ({@code bootstrap.servers}, required)
 * @param applicationId    Streams application id: instances with the same id share the work
 * @param topics           topic names and sizes (must match the other components')
 * @param serde            wire format of the events
 * @param guarantee        processing guarantee; see {@code docs/decider.md} for the measured trade-off
 * @param commitInterval   Streams commit interval (under exactly-once: how often transactions commit)
 * @param stateDir         Streams state directory
 * @param store            state store kind
 * @param storeWriteBehind how long a changed request state may wait before it is written to the store (and its
 *                         changelog) between commits; 0: only when Streams commits (see docs/decider.md, Stores)
 * @param threads          stream threads of this instance
 * @param policy           what shapes decisions (timeouts, retries, limits, the token key)
 * @param tickInterval     how often this instance writes a Tick to each partition it owns, so timeouts fire
 *                         from the log even when no other fact arrives
 * @param httpHost         address the interactive-query HTTP endpoint binds ({@code decider.http.host})
 * @param httpAdvertisedHost the address other instances reach it at ({@code decider.http.advertised-host}, Streams'
 *                         {@code application.server}); the bind address if empty and that is not a wildcard
 * @param httpPort         its port; 0 picks a free one, -1 disables it
 * @param kafkaOverrides   extra Streams/client properties ({@code kafka.*} keys, prefix removed)
 */
public record DeciderConfig(String bootstrapServers, String applicationId, TopicsConfig topics, SerdeConfig serde, Guarantee guarantee,
                            Duration commitInterval, Path stateDir, StoreKind store, Duration storeWriteBehind, int threads, DeciderPolicy policy,
                            Duration tickInterval, String httpHost, String httpAdvertisedHost, int httpPort, Map<String, Object> kafkaOverrides) {

    /** Processing guarantee of the decider itself. */
    public enum Guarantee { EXACTLY_ONCE_V2, AT_LEAST_ONCE }

    /** The default {@code decider.commit.interval}; see docs/decider.md, "Exactly-once effect". */
    public static final Duration DEFAULT_COMMIT_INTERVAL = Duration.ofMillis(500);

    /** The default {@code decider.store.write-behind}; see docs/decider.md, "Stores". */
    public static final Duration DEFAULT_STORE_WRITE_BEHIND = Duration.ofMillis(100);

    /** State store implementation. */
    public enum StoreKind { ROCKSDB, IN_MEMORY }

    /** The key used when {@code auth.key} is not set: fine for a laptop, logged loudly, never for production. */
    public static final String DEV_AUTH_KEY = "orbitkv-dev-insecure-auth-key";

    public DeciderConfig {
        if (bootstrapServers == null || bootstrapServers.isBlank()) {
            throw new IllegalArgumentException("bootstrap.servers: required");
        }
        if (applicationId == null || !applicationId.matches("[A-Za-z0-9._-]+")) {
            throw new IllegalArgumentException("decider.application.id: letters, digits, '.', '_' and '-' only, got " + applicationId);
        }
        requirePositive("decider.commit.interval", commitInterval);
        if (storeWriteBehind == null || storeWriteBehind.isNegative()) {
            throw new IllegalArgumentException("decider.store.write-behind: must be 0 (at commits only) or positive, got " + storeWriteBehind);
        }
        requireRange("decider.threads", threads, 1, 64);
        if (tickInterval == null || tickInterval.toMillis() < 1) {
            throw new IllegalArgumentException("decider.tick.interval: must be >= 1ms, got " + tickInterval);
        }
        requirePort("decider.http.port", httpPort, true);
        if (httpPort >= 0) {
            // Every instance answers queries for the keys it owns and forwards the rest to the owner's application.server:
            // a wildcard there makes every instance think every key is its own.
            httpAdvertisedHost = Addresses.listener("decider.http.host", httpHost, "decider.http.advertised-host", httpAdvertisedHost,
                    bootstrapServers);
        }
        kafkaOverrides = Map.copyOf(kafkaOverrides);
        requireHeartbeatInsideSession(kafkaOverrides);
    }

    /**
     * The consumer refuses a heartbeat interval that is not shorter than its session timeout, but only when Streams
     * starts, deep in a stack trace; a shortened {@code kafka.session.timeout.ms} (failover in seconds) needs a shorter
     * {@code kafka.heartbeat.interval.ms} than the default 3 s, so say so here, naming the keys.
     */
    private static void requireHeartbeatInsideSession(Map<String, Object> overrides) {
        long session = millis(overrides, "session.timeout.ms", 45_000);
        long heartbeat = millis(overrides, "heartbeat.interval.ms", 3_000);
        if (heartbeat >= session) {
            throw new IllegalArgumentException("kafka.heartbeat.interval.ms: " + heartbeat + " ms must be shorter than kafka.session.timeout.ms ("
                    + session + " ms; a third of it is usual)");
        }
    }

    private static long millis(Map<String, Object> overrides, String key, long def) {
        Object v = overrides.containsKey("main.consumer." + key) ? overrides.get("main.consumer." + key)
                : overrides.containsKey("consumer." + key) ? overrides.get("consumer." + key) : overrides.get(key);
        if (v == null) {
            return def;
        }
        try {
            return Long.parseLong(v.toString().strip());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("kafka." + key + ": a number of milliseconds, got " + v);
        }
    }

    public static DeciderConfig from(ConfigProps p) {
        String key = p.string("auth.key", DEV_AUTH_KEY);
        byte[] keyBytes = key.startsWith("hex:") ? HexFormat.of().parseHex(key.substring(4)) : key.getBytes(StandardCharsets.UTF_8);
        DeciderPolicy d = DeciderPolicy.defaults(keyBytes);
        DeciderPolicy policy = new DeciderPolicy(
                p.duration("decider.timeout.prefill", d.prefillTimeout()),
                p.duration("decider.timeout.decode-ready", d.decodeReadyTimeout()),
                p.duration("decider.timeout.transfer", d.transferTimeout()),
                p.duration("decider.lease.duration", d.leaseDuration()),
                p.duration("decider.admission.grace", d.admissionGrace()),
                p.duration("decider.drain.grace", d.drainGrace()),
                p.duration("decider.retention", d.retention()),
                p.integer("decider.retry.max-attempts", d.maxAttempts()),
                p.duration("decider.retry.backoff.base", d.backoffBase()),
                p.duration("decider.retry.backoff.max", d.backoffMax()),
                p.integer("decider.max-runs", d.maxRuns()),
                p.integer("decider.history.limit", d.historyLimit()),
                keyBytes,
                p.bool("decider.order-ahead", d.orderAhead()),
                p.longValue("decider.transfer.min-rate", d.transferMinRate()));
        return new DeciderConfig(
                p.required("bootstrap.servers"),
                p.string("decider.application.id", "orbitkv-decider"),
                p.topics(),
                p.serde(),
                p.enumValue("decider.guarantee", Guarantee.class, Guarantee.EXACTLY_ONCE_V2),
                // 500 ms suits the default low-latency mode (actors read uncommitted): fewer transaction commits stall
                // the stream thread less often (bench decider, 1,000 handoffs/s: p50 3.78 -> 2.84 ms, p90 11.6 -> 6.1 ms,
                // +10 % throughput). Actors that read committed should set 20-100 ms: it is their latency.
                p.duration("decider.commit.interval", DEFAULT_COMMIT_INTERVAL),
                Path.of(p.string("decider.state.dir", ".orbitkv/decider-state")),
                p.enumValue("decider.store", StoreKind.class, StoreKind.ROCKSDB),
                p.duration("decider.store.write-behind", DEFAULT_STORE_WRITE_BEHIND),
                p.integer("decider.threads", 1),
                policy,
                p.duration("decider.tick.interval", Duration.ofMillis(200)),
                p.string("decider.http.host", "127.0.0.1"),
                p.string("decider.http.advertised-host", ""),
                p.integer("decider.http.port", 7070),
                withInstanceId(p.withPrefix("kafka."), p.string("decider.instance.id", "")));
    }

    /**
     * {@code decider.instance.id}: Kafka's static membership for this instance's stream threads. A member that comes
     * back under the same id within the session timeout takes its partitions again at once, with no rebalance;
     * without it the group waits out the dead member's session first (45 s by default: measured 39 s of a restarted
     * decider's 41 s before RUNNING, docs/chaos.md). Each instance needs its own id, stable across restarts.
     */
    private static Map<String, Object> withInstanceId(Map<String, Object> overrides, String instanceId) {
        if (instanceId.isEmpty()) {
            return overrides;
        }
        if (!instanceId.matches("[A-Za-z0-9._-]+")) {
            throw new IllegalArgumentException("decider.instance.id: letters, digits, '.', '_' and '-' only, got " + instanceId);
        }
        Map<String, Object> m = new java.util.LinkedHashMap<>(overrides);
        m.putIfAbsent("main.consumer.group.instance.id", instanceId);
        return m;
    }

    public boolean usesDevAuthKey() {
        return java.util.Arrays.equals(policy.authKey(), DEV_AUTH_KEY.getBytes(StandardCharsets.UTF_8));
    }
}
