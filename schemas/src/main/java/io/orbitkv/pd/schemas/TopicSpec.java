package io.orbitkv.pd.schemas;

import java.util.Map;

/**
 * How a topic is created: partitions, replication and topic-level configs (cleanup policy, retention).
 *
 * @param partitions        number of partitions, >= 1
 * @param replicationFactor replicas per partition, >= 1
 * @param configs           topic configs such as {@code cleanup.policy} and {@code retention.ms}
 */
public record TopicSpec(int partitions, short replicationFactor, Map<String, String> configs) {

    public TopicSpec {
        if (partitions < 1) {
            throw new IllegalArgumentException("partitions: must be >= 1, got " + partitions);
        }
        if (replicationFactor < 1) {
            throw new IllegalArgumentException("replication.factor: must be >= 1, got " + replicationFactor);
        }
        configs = Map.copyOf(configs);
    }

    /** Human-readable retention or compaction, for docs and the CLI. */
    public String retentionDescription() {
        String policy = configs.getOrDefault("cleanup.policy", "delete");
        if (policy.contains("compact")) {
            return "compacted";
        }
        String ms = configs.get("retention.ms");
        return ms == null ? "broker default" : "delete after " + (Long.parseLong(ms) / 3_600_000L) + " h";
    }
}
