package io.orbitkv.pd.schemas.internal;

import io.orbitkv.pd.schemas.EventDecodingException;
import io.orbitkv.pd.schemas.EventDecodingException.Reason;
import io.orbitkv.pd.schemas.registry.SchemaRegistryClient;
import io.orbitkv.pd.schemas.registry.SchemaRegistryClient.RegistryException;
import java.nio.ByteBuffer;
import org.apache.avro.Schema;

/**
 * The Confluent wire format: magic byte 0, the registry's 4-byte big-endian schema id, then the binary payload.
 * Subjects follow the TopicNameStrategy ({@code <topic>-value}, {@code <topic>-key}).
 */
public final class ConfluentFormat implements WireFormat {

    static final int HEADER = 5;
    private final SchemaRegistryClient client;
    private final boolean autoRegister;
    private final java.util.Map<SubjectSchema, byte[]> headers = new java.util.concurrent.ConcurrentHashMap<>();

    public ConfluentFormat(SchemaRegistryClient client, boolean autoRegister) {
        this.client = client;
        this.autoRegister = autoRegister;
    }

    @Override
    public byte[] header(String subject, Schema writer) {
        // Per (subject, schema instance): the writer schema of a serde is one object, so this is a cheap lookup.
        return headers.computeIfAbsent(new SubjectSchema(subject, writer), k -> {
            int id = autoRegister ? client.register(subject, writer) : client.idOf(subject, writer);
            return ByteBuffer.allocate(HEADER).put((byte) 0).putInt(id).array();
        });
    }

    private record SubjectSchema(String subject, Schema schema) {
        @Override
        public boolean equals(Object o) {
            return o instanceof SubjectSchema other && other.subject.equals(subject) && other.schema == schema;
        }

        @Override
        public int hashCode() {
            return subject.hashCode() * 31 + System.identityHashCode(schema);
        }
    }

    @Override
    public Located locate(String topic, String subject, byte[] data) {
        if (data.length < HEADER || data[0] != 0) {
            String hint = data.length > 1 && (data[0] & 0xff) == 0xC3 ? " (looks like single-object encoding: is serde.mode embedded?)" : "";
            throw new EventDecodingException(Reason.BAD_HEADER, topic,
                    "not the Confluent wire format: expected magic byte 0 and a 4-byte schema id" + hint);
        }
        int id = ByteBuffer.wrap(data, 1, 4).getInt();
        if (id < 0) {
            // Registry ids are non-negative: do not ask the registry about a forged one.
            throw new EventDecodingException(Reason.UNKNOWN_SCHEMA, topic, "schema id " + id + " is negative: not a registry id");
        }
        Schema writer;
        try {
            writer = client.schemaById(id);
        } catch (RegistryException e) {
            // 404: no such id. 2xx: the registry answered, but with a schema we cannot use (not Avro, does not
            // parse). Anything else (no answer, 5xx, auth) is the registry's problem, not the record's.
            int status = e.status();
            Reason r = status == 404 || status / 100 == 2 ? Reason.UNKNOWN_SCHEMA : Reason.REGISTRY_UNAVAILABLE;
            throw new EventDecodingException(r, topic, "schema id " + id + ": " + e.getMessage(), e);
        }
        return new Located(writer, id, HEADER);
    }
}
