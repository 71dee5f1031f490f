package io.orbitkv.pd.engine.client;

import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.utils.Utils;

/**
 * Where an engine's decisions are: {@code engine-commands} is keyed by engine id, so every record for one engine is
 * on the partition Kafka's default partitioner picks for that key. The transfer worker reads exactly that partition
 * (its orders), and so does an engine's own command reader (its decisions); both must agree with the producer, the
 * decider, which partitions by key.
 */
public final class CommandRouting {

    private CommandRouting() {
    }

    /** The partition of {@code engine-commands} that carries {@code engineId}'s records (Kafka's default partitioner). */
    public static int partitionFor(String engineId, int partitions) {
        return Utils.toPositive(Utils.murmur2(engineId.getBytes(StandardCharsets.UTF_8))) % partitions;
    }
}
