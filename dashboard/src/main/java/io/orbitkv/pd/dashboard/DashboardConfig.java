package io.orbitkv.pd.dashboard;

import static io.orbitkv.pd.schemas.config.ConfigProps.requirePort;
import static io.orbitkv.pd.schemas.config.ConfigProps.requirePositive;
import static io.orbitkv.pd.schemas.config.ConfigProps.requireRange;

import io.orbitkv.pd.schemas.SerdeConfig;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.schemas.config.Addresses;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;

/**
 * How the dashboard runs. Read from {@code --config} properties by {@link #from(ConfigProps)}; every key and its
 * default is listed in {@code docs/dashboard.md}.
 *
 * @param bootstrapServers  Kafka bootstrap servers ({@code bootstrap.servers}, required)
 * @param applicationId     Streams application id: instances with the same id share the partitions and answer
 *                          queries together
 * @param topics            topic names and sizes (must match the other components')
 * @param serde             wire format of the events
 * @param stateDir          Streams state directory
 * @param threads           stream threads of this instance
 * @param commitInterval    Streams commit interval (at-least-once: how much may be counted twice after a crash)
 * @param grace             how long after a window's end its records are still accepted (stream time)
 * @param retentionSeconds  how long 1 s windows are kept
 * @param retentionMinutes  how long 1 min windows are kept
 * @param orderTtl          how long a transfer order waits for its worker's first report (decision latency)
 * @param inflightTtl       an admitted request without an outcome stops counting as in flight after this
 * @param failuresKept      recent failures kept per task (newest first)
 * @param httpHost          address the HTTP endpoint (page, API, metrics) binds ({@code dashboard.http.host})
 * @param httpAdvertisedHost the address other instances and browsers reach it at ({@code dashboard.http.advertised-host},
 *                          Streams' {@code application.server}); the bind address if empty and that is not a wildcard
 * @param httpPort          its port; 0 picks a free one
 * @param pollInterval      how often the page polls the API
 * @param traceCommand      the command a failure links to, {@code {id}} replaced by the request id
 * @param kafkaOverrides    extra Streams/client properties ({@code kafka.*} keys, prefix removed)
 */
public record DashboardConfig(String bootstrapServers, String applicationId, TopicsConfig topics, SerdeConfig serde, Path stateDir,
                              int threads, Duration commitInterval, Duration grace, Duration retentionSeconds, Duration retentionMinutes,
                              Duration orderTtl, Duration inflightTtl, int failuresKept, String httpHost, String httpAdvertisedHost, int httpPort,
                              Duration pollInterval, String traceCommand, Map<String, Object> kafkaOverrides) {

    public static final String DEFAULT_TRACE_COMMAND = "./orbitkv-pd trace {id}";

    public DashboardConfig {
        if (bootstrapServers == null || bootstrapServers.isBlank()) {
            throw new IllegalArgumentException("bootstrap.servers: required");
        }
        if (applicationId == null || !applicationId.matches("[A-Za-z0-9._-]+")) {
            throw new IllegalArgumentException("dashboard.application.id: letters, digits, '.', '_' and '-' only, got " + applicationId);
        }
        requireRange("dashboard.threads", threads, 1, 64);
        requirePositive("dashboard.commit.interval", commitInterval);
        if (grace == null || grace.isNegative()) {
            throw new IllegalArgumentException("dashboard.grace: must be >= 0, got " + grace);
        }
        if (retentionSeconds == null || retentionSeconds.toMillis() < 60_000) {
            throw new IllegalArgumentException("dashboard.retention.1s: must be >= 1m, got " + retentionSeconds);
        }
        if (retentionMinutes == null || retentionMinutes.toMillis() < 3_600_000) {
            throw new IllegalArgumentException("dashboard.retention.1m: must be >= 1h, got " + retentionMinutes);
        }
        if (grace.toMillis() >= retentionSeconds.toMillis()) {
            throw new IllegalArgumentException("dashboard.grace: must be shorter than dashboard.retention.1s, got " + grace);
        }
        requirePositive("dashboard.order.ttl", orderTtl);
        requirePositive("dashboard.inflight.ttl", inflightTtl);
        requireRange("dashboard.failures.kept", failuresKept, 1, 10_000);
        if (httpHost == null || httpHost.isBlank()) {
            throw new IllegalArgumentException("dashboard.http.host: required");
        }
        requirePort("dashboard.http.port", httpPort, false);
        httpAdvertisedHost = Addresses.listener("dashboard.http.host", httpHost, "dashboard.http.advertised-host", httpAdvertisedHost,
                bootstrapServers);
        if (pollInterval == null || pollInterval.toMillis() < 100) {
            throw new IllegalArgumentException("dashboard.poll.interval: must be >= 100ms, got " + pollInterval);
        }
        if (traceCommand == null || !traceCommand.contains("{id}")) {
            throw new IllegalArgumentException("dashboard.trace.command: must contain {id}, got " + traceCommand);
        }
        kafkaOverrides = Map.copyOf(kafkaOverrides);
    }


    public static DashboardConfig from(ConfigProps p) {
        return new DashboardConfig(
                p.required("bootstrap.servers"),
                p.string("dashboard.application.id", "orbitkv-dashboard"),
                p.topics(),
                p.serde(),
                Path.of(p.string("dashboard.state.dir", ".orbitkv/dashboard-state")),
                p.integer("dashboard.threads", 1),
                p.duration("dashboard.commit.interval", Duration.ofSeconds(1)),
                p.duration("dashboard.grace", Duration.ofSeconds(5)),
                p.duration("dashboard.retention.1s", Duration.ofMinutes(15)),
                p.duration("dashboard.retention.1m", Duration.ofHours(6)),
                p.duration("dashboard.order.ttl", Duration.ofMinutes(10)),
                p.duration("dashboard.inflight.ttl", Duration.ofHours(1)),
                p.integer("dashboard.failures.kept", 200),
                p.string("dashboard.http.host", "127.0.0.1"),
                p.string("dashboard.http.advertised-host", ""),
                p.integer("dashboard.http.port", 7080),
                p.duration("dashboard.poll.interval", Duration.ofSeconds(1)),
                p.string("dashboard.trace.command", DEFAULT_TRACE_COMMAND),
                p.withPrefix("kafka."));
    }

    /** Development defaults against {@code bootstrap}: tests and the demo start from here. */
    public static DashboardConfig defaults(String bootstrap) {
        return from(ConfigProps.empty().with("bootstrap.servers", bootstrap));
    }

    /** The same config with another HTTP port, state directory and application id (tests, the demo). */
    public DashboardConfig with(String applicationId, TopicsConfig topics, Path stateDir, int httpPort) {
        return new DashboardConfig(bootstrapServers, applicationId, topics, serde, stateDir, threads, commitInterval, grace, retentionSeconds,
                retentionMinutes, orderTtl, inflightTtl, failuresKept, httpHost, httpAdvertisedHost, httpPort, pollInterval, traceCommand, kafkaOverrides);
    }
}
