package io.orbitkv.pd.schemas.internal;

import io.orbitkv.pd.schemas.EventDecodingException;
import org.apache.avro.Schema;

/**
 * How the writer schema is named in front of the Avro payload. Implementations turn every framing problem into
 * an {@link EventDecodingException} and never allocate more than the record's own size.
 */
public interface WireFormat {

    /** The bytes that precede the payload for this writer schema on this subject. */
    byte[] header(String subject, Schema writer);

    /** Parses the header of {@code data} and returns the writer schema plus where the payload starts. */
    Located locate(String topic, String subject, byte[] data);

    /** A writer schema and the payload offset. */
    record Located(Schema writer, Object writerKey, int payloadStart) { }
}
