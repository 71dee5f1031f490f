package io.orbitkv.pd.logtools;

import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.utils.Utils;

/**
 * Where Kafka's default partitioner puts a key: every component keys request facts and decisions by request id
 * with the default partitioner, so a request's story is in one partition of each topic and a tool can read just
 * that partition.
 */
public final class Partitioning {

    private Partitioning() { }

    /** The partition of {@code key} among {@code partitions}, as the producer's default partitioner picks it. */
    public static int partitionOf(String key, int partitions) {
        return partitionOf(key.getBytes(StandardCharsets.UTF_8), partitions);
    }

    public static int partitionOf(byte[] key, int partitions) {
        if (partitions < 1) {
            throw new IllegalArgumentException("partitions: must be >= 1, got " + partitions);
        }
        return Utils.toPositive(Utils.murmur2(key)) % partitions;
    }
}
