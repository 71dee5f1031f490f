package io.orbitkv.pd.schemas;

import java.util.Objects;
import org.apache.kafka.common.serialization.Serde;

/**
 * A typed topic: its name, the serdes of its key and value, and how it is created. Every component reaches a
 * topic through {@link Topics}; no topic name appears as a string literal anywhere else.
 *
 * @param name        topic name (prefix included)
 * @param keyName     what the key is ("request id", "engine id"), for docs and tools
 * @param keySerde    serde of the key (request id or engine id: plain strings)
 * @param valueSerde  serde of the value
 * @param spec        partitions, replication, cleanup policy
 * @param description one line for docs and the CLI
 */
public record Topic<K, V>(String name, String keyName, Serde<K> keySerde, Serde<V> valueSerde, TopicSpec spec, String description) {
    public Topic {
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(keySerde, "keySerde");
        Objects.requireNonNull(valueSerde, "valueSerde");
        Objects.requireNonNull(spec, "spec");
    }

    /** Simple name of the value type (the Avro record name for event serdes). */
    public String valueTypeName() {
        return valueSerde instanceof AvroEventSerde<?> s ? s.type().getSimpleName() : valueSerde.getClass().getSimpleName();
    }
}
