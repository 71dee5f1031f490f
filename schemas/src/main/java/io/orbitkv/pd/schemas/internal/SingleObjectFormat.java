package io.orbitkv.pd.schemas.internal;

import io.orbitkv.pd.schemas.EventDecodingException;
import io.orbitkv.pd.schemas.EventDecodingException.Reason;
import io.orbitkv.pd.schemas.EventSchemas;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import org.apache.avro.Schema;

/**
 * Avro single-object encoding: {@code C3 01}, the writer schema's 8-byte little-endian CRC-64-AVRO fingerprint,
 * then the binary payload. Writer schemas are resolved from {@link EventSchemas} (current and released).
 */
public final class SingleObjectFormat implements WireFormat {

    static final int HEADER = 10;
    private final EventSchemas catalog;
    private final java.util.Map<Schema, byte[]> headers = new java.util.concurrent.ConcurrentHashMap<>();

    public SingleObjectFormat(EventSchemas catalog) {
        this.catalog = catalog;
    }

    @Override
    public byte[] header(String subject, Schema writer) {
        // Computing a fingerprint means building the schema's canonical form: far too slow per record.
        return headers.computeIfAbsent(writer, w -> {
            ByteBuffer b = ByteBuffer.allocate(HEADER).order(ByteOrder.LITTLE_ENDIAN);
            b.put((byte) 0xC3).put((byte) 0x01).putLong(EventSchemas.fingerprint(w));
            return b.array();
        });
    }

    @Override
    public Located locate(String topic, String subject, byte[] data) {
        if (data.length < HEADER || (data[0] & 0xff) != 0xC3 || (data[1] & 0xff) != 0x01) {
            String hint = data.length > 0 && data[0] == 0 ? " (looks like the Confluent registry format: is serde.mode registry?)" : "";
            throw new EventDecodingException(Reason.BAD_HEADER, topic,
                    "not Avro single-object encoding: expected C3 01 and an 8-byte fingerprint" + hint);
        }
        long fp = ByteBuffer.wrap(data, 2, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
        Schema writer = catalog.byFingerprint(fp).orElseThrow(() -> new EventDecodingException(Reason.UNKNOWN_SCHEMA, topic,
                String.format("writer schema fingerprint %016x is neither a current nor a released %s schema", fp, subject)));
        return new Located(writer, fp, HEADER);
    }
}
