package io.orbitkv.pd.mooncake;

import static io.orbitkv.pd.schemas.config.ConfigProps.requirePort;
import static io.orbitkv.pd.schemas.config.ConfigProps.requirePositive;
import static io.orbitkv.pd.schemas.config.ConfigProps.requireRange;

import io.orbitkv.pd.mooncake.te.MooncakeEngine;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

/**
 * Settings of the {@code mooncake} transport ({@code transfer.mooncake.*}); validated here, an error names the
 * setting. Every key and its default is listed in {@code docs/mooncake.md}.
 *
 * @param library             path of {@code libtransfer_engine.so} ({@code library}); empty: {@value MooncakeEngine#LIBRARY_ENV}
 * @param protocol            {@code rdma} (production, default) or {@code tcp} (Mooncake's TCP transport: tests, machines
 *                            without RDMA NICs)
 * @param metadata            the engine's metadata connection string ({@code metadata}); {@value MooncakeEngine#P2P_HANDSHAKE}
 *                            (default) needs no etcd, redis or http server
 * @param host                the address this worker's engine and admission listener are reached at ({@code host},
 *                            default {@code 127.0.0.1}; set it to the node's RDMA-side IP in production)
 * @param controlPort         port of the admission listener ({@code control-port}, 0 = any free port; announced)
 * @param nicPriorityMatrix   Mooncake's NIC priority matrix (JSON) for {@code rdma}; empty: the engine discovers its NICs
 * @param location            location hint for memory registration ({@code *}: the engine finds the NUMA node)
 * @param batchRequests       WRITE requests per batch ({@code batch-requests}): one {@code submitTransfer} each
 * @param maxInflightRequests requests submitted and not yet finished, per push ({@code max-inflight-requests}); keep it
 *                            within Mooncake's per-peer queue ({@code MC_TCP_MAX_QUEUED_TRANSFERS_PER_PEER}, 1,024)
 * @param maxRequestBytes     longest single request ({@code max-request-bytes}); longer contiguous stretches are split
 * @param pollMin             first pause when a poll finds no progress ({@code poll-min}, e.g. {@code 20us})
 * @param pollMax             longest pause between polls ({@code poll-max}); pauses double from {@code poll-min}
 * @param ioTimeout           the admission connection's reply timeout ({@code io-timeout})
 * @param connectTimeout      connecting to a peer's admission listener ({@code connect-timeout})
 * @param drainTimeout        how long a stopped push waits for its submitted writes to finish ({@code drain-timeout})
 */
public record MooncakeConfig(String library, String protocol, String metadata, String host, int controlPort, String nicPriorityMatrix,
                             String location, int batchRequests, int maxInflightRequests, long maxRequestBytes, Duration pollMin,
                             Duration pollMax, Duration ioTimeout, Duration connectTimeout, Duration drainTimeout) {

    public static final String PREFIX = "transfer.mooncake.";
    private static final Set<String> KEYS = Set.of("library", "protocol", "metadata", "host", "control-port", "nic-priority-matrix", "location",
            "batch-requests", "max-inflight-requests", "max-request-bytes", "poll-min", "poll-max", "io-timeout", "connect-timeout",
            "drain-timeout");

    public MooncakeConfig {
        library = library == null ? "" : library.strip();
        if (!"rdma".equals(protocol) && !"tcp".equals(protocol)) {
            throw new IllegalArgumentException(PREFIX + "protocol: must be rdma or tcp, got '" + protocol + "'");
        }
        if (metadata == null || metadata.isBlank()) {
            throw new IllegalArgumentException(PREFIX + "metadata: must not be blank (use " + MooncakeEngine.P2P_HANDSHAKE + ")");
        }
        if (host == null || host.isBlank() || host.contains(" ")) {
            throw new IllegalArgumentException(PREFIX + "host: must be a host name or IP address, got '" + host + "'");
        }
        if (io.orbitkv.pd.schemas.config.Addresses.isWildcard(host)) {
            // Mooncake's engine binds and announces one address (its local server name): a wildcard would be announced.
            throw new IllegalArgumentException(PREFIX + "host: " + host + " is a wildcard, but Mooncake announces this address to its peers:"
                    + " set the address they reach this host at");
        }
        requirePort(PREFIX + "control-port", controlPort, false);
        nicPriorityMatrix = nicPriorityMatrix == null ? "" : nicPriorityMatrix.strip();
        if (location == null || location.isBlank()) {
            throw new IllegalArgumentException(PREFIX + "location: must not be blank (use * to let the engine decide)");
        }
        requireRange(PREFIX + "batch-requests", batchRequests, 1, 65_536);
        requireRange(PREFIX + "max-inflight-requests", maxInflightRequests, 1, 65_536);
        if (maxInflightRequests < batchRequests) {
            throw new IllegalArgumentException(PREFIX + "max-inflight-requests: " + maxInflightRequests + " is less than " + PREFIX
                    + "batch-requests " + batchRequests + " (not one batch could be in flight)");
        }
        if (maxRequestBytes < 4096 || maxRequestBytes > (1L << 30)) {
            throw new IllegalArgumentException(PREFIX + "max-request-bytes: must be 4096..1073741824, got " + maxRequestBytes);
        }
        requirePositive(PREFIX + "poll-min", pollMin);
        requirePositive(PREFIX + "poll-max", pollMax);
        if (pollMax.compareTo(pollMin) < 0) {
            throw new IllegalArgumentException(PREFIX + "poll-max: " + pollMax + " is shorter than " + PREFIX + "poll-min " + pollMin);
        }
        requirePositive(PREFIX + "io-timeout", ioTimeout);
        requirePositive(PREFIX + "connect-timeout", connectTimeout);
        requirePositive(PREFIX + "drain-timeout", drainTimeout);
    }

    /** Every setting at its default (the library from {@value MooncakeEngine#LIBRARY_ENV}, protocol {@code rdma}). */
    public static MooncakeConfig defaults() {
        return parse(Map.of());
    }

    /** From settings without the {@value #PREFIX} prefix; unknown keys are refused. */
    public static MooncakeConfig parse(Map<String, String> settings) {
        for (String k : settings.keySet()) {
            if (!KEYS.contains(k)) {
                throw new IllegalArgumentException(PREFIX + k + ": unknown setting; known: " + new TreeSet<>(KEYS));
            }
        }
        return new MooncakeConfig(settings.getOrDefault("library", ""), settings.getOrDefault("protocol", "rdma").strip(),
                settings.getOrDefault("metadata", MooncakeEngine.P2P_HANDSHAKE).strip(), settings.getOrDefault("host", "127.0.0.1").strip(),
                (int) longValue(settings, "control-port", 0), settings.getOrDefault("nic-priority-matrix", ""),
                settings.getOrDefault("location", "*").strip(), (int) longValue(settings, "batch-requests", 32),
                (int) longValue(settings, "max-inflight-requests", 256), longValue(settings, "max-request-bytes", 1L << 20),
                duration(settings, "poll-min", Duration.ofNanos(20_000)), duration(settings, "poll-max", Duration.ofMillis(1)),
                duration(settings, "io-timeout", Duration.ofSeconds(10)), duration(settings, "connect-timeout", Duration.ofSeconds(3)),
                duration(settings, "drain-timeout", Duration.ofSeconds(30)));
    }

    /** The settings that reproduce this config (without the prefix). */
    public Map<String, String> toSettings() {
        Map<String, String> m = new LinkedHashMap<>();
        m.put("library", library);
        m.put("protocol", protocol);
        m.put("metadata", metadata);
        m.put("host", host);
        m.put("control-port", Integer.toString(controlPort));
        m.put("nic-priority-matrix", nicPriorityMatrix);
        m.put("location", location);
        m.put("batch-requests", Integer.toString(batchRequests));
        m.put("max-inflight-requests", Integer.toString(maxInflightRequests));
        m.put("max-request-bytes", Long.toString(maxRequestBytes));
        m.put("poll-min", pollMin.toNanos() / 1000 + "us");
        m.put("poll-max", pollMax.toNanos() / 1000 + "us");
        m.put("io-timeout", ioTimeout.toMillis() + "ms");
        m.put("connect-timeout", connectTimeout.toMillis() + "ms");
        m.put("drain-timeout", drainTimeout.toMillis() + "ms");
        return m;
    }

    public MooncakeConfig withProtocol(String p) {
        Map<String, String> m = toSettings();
        m.put("protocol", p);
        return parse(m);
    }

    public MooncakeConfig withLibrary(String path) {
        Map<String, String> m = toSettings();
        m.put("library", path);
        return parse(m);
    }

    public MooncakeConfig withBatching(int requestsPerBatch, int inflight, long requestBytes) {
        Map<String, String> m = toSettings();
        m.put("batch-requests", Integer.toString(requestsPerBatch));
        m.put("max-inflight-requests", Integer.toString(inflight));
        m.put("max-request-bytes", Long.toString(requestBytes));
        return parse(m);
    }

    public MooncakeConfig withTimeouts(Duration io, Duration drain) {
        Map<String, String> m = toSettings();
        m.put("io-timeout", io.toMillis() + "ms");
        m.put("drain-timeout", drain.toMillis() + "ms");
        return parse(m);
    }

    private static long longValue(Map<String, String> s, String key, long dflt) {
        String v = s.get(key);
        if (v == null || v.isBlank()) {
            return dflt;
        }
        try {
            return Long.parseLong(v.strip());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(PREFIX + key + ": not a number: '" + v + "'");
        }
    }

    /** {@code 20us}, {@code 250ms}, {@code 10s}, {@code 2m}. */
    static Duration duration(Map<String, String> s, String key, Duration dflt) {
        String v = s.get(key);
        if (v == null || v.isBlank()) {
            return dflt;
        }
        String t = v.strip();
        try {
            if (t.endsWith("us")) {
                return Duration.ofNanos(Long.parseLong(t.substring(0, t.length() - 2)) * 1000);
            }
            if (t.endsWith("ms")) {
                return Duration.ofMillis(Long.parseLong(t.substring(0, t.length() - 2)));
            }
            if (t.endsWith("s")) {
                return Duration.ofSeconds(Long.parseLong(t.substring(0, t.length() - 1)));
            }
            if (t.endsWith("m")) {
                return Duration.ofMinutes(Long.parseLong(t.substring(0, t.length() - 1)));
            }
        } catch (NumberFormatException e) {
            // fall through to the message below
        }
        throw new IllegalArgumentException(PREFIX + key + ": must be a duration like 20us, 250ms, 10s or 2m, got '" + v + "'");
    }


}
