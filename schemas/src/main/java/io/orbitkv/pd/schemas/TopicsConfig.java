package io.orbitkv.pd.schemas;

import static io.orbitkv.pd.schemas.config.ConfigProps.requirePositive;
import static io.orbitkv.pd.schemas.config.ConfigProps.requireRange;

import java.time.Duration;

/**
 * Topic naming and sizing.
 *
 * @param prefix            prepended to every topic name, so several deployments can share a cluster
 * @param partitions        partitions of the per-request topics (request events, decisions) and engine commands
 * @param replicationFactor replicas of every topic (3 in production, 1 on a development broker)
 * @param retention         retention of the event log topics (the log is the product's memory: keep it)
 * @param brokerTime        facts ({@code request-events}) carry the broker's append time, not their writer's
 *                          ({@code topics.facts.timestamp=broker}, the default; {@code producer} keeps each writer's time:
 *                          only for importing a recorded log whose times must stay as they were; docs/decider.md, "Clocks")
 */
public record TopicsConfig(String prefix, int partitions, short replicationFactor, Duration retention, boolean brokerTime) {

    /** Facts stamped by the broker (the default). */
    public TopicsConfig(String prefix, int partitions, short replicationFactor, Duration retention) {
        this(prefix, partitions, replicationFactor, retention, true);
    }

    /** The same topics with facts stamped by the broker ({@code true}) or by their writers. */
    public TopicsConfig withBrokerTime(boolean on) {
        return new TopicsConfig(prefix, partitions, replicationFactor, retention, on);
    }

    public static final String DEFAULT_PREFIX = "orbitkv.";

    /** Partitions per topic unless {@code topics.partitions} says otherwise. */

    public static final int DEFAULT_PARTITIONS = 6;

    public TopicsConfig {
        if (prefix == null || !prefix.matches("[A-Za-z0-9._-]*")) {
            throw new IllegalArgumentException("topics.prefix: only letters, digits, '.', '_' and '-' allowed, got " + prefix);
        }
        requireRange("topics.partitions", partitions, 1, 10_000);
        if (replicationFactor < 1) {
            throw new IllegalArgumentException("topics.replication.factor: must be >= 1, got " + replicationFactor);
        }
        requirePositive("topics.retention", retention);
    }

    /** Development defaults: 6 partitions, replication 1, 7 days of log. */
    public static TopicsConfig defaults() {
        return new TopicsConfig(DEFAULT_PREFIX, DEFAULT_PARTITIONS, (short) 1, Duration.ofDays(7));
    }
}
