package io.orbitkv.pd.schemas;

import io.orbitkv.pd.schemas.EventDecodingException.Reason;
import io.orbitkv.pd.schemas.internal.BinaryValidator;
import io.orbitkv.pd.schemas.internal.WireFormat;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.avro.AvroRuntimeException;
import org.apache.avro.Schema;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.EncoderFactory;
import org.apache.avro.specific.SpecificData;
import org.apache.avro.specific.SpecificDatumReader;
import org.apache.avro.specific.SpecificDatumWriter;
import org.apache.avro.specific.SpecificRecord;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serializer;

/**
 * Kafka serde for one generated Avro record type, in either wire format. Decoding checks size, header and every
 * length in the payload before the Avro decoder runs, so hostile bytes end in an {@link EventDecodingException}
 * and never in a crash, a hang or a huge allocation. {@code null} stays {@code null} (compaction tombstones).
 *
 * <p>Thread-safe: readers are cached per writer schema; decoders are per call, encoders per thread (reused).
 *
 * <p>Records are written and read through the generated classes' own coders ({@code customEncode} /
 * {@code customDecode}, Avro's "custom coders"): the same bytes as the generic datum walk, without its per-field
 * dispatch — the decider serializes every decision and request state on its one stream thread, where CPU per fact
 * is latency (docs/decider.md, Performance).
 */
public final class AvroEventSerde<T extends SpecificRecord> implements Serde<T>, Serializer<T>, Deserializer<T> {

    private final Class<T> type;
    private final Schema readerSchema;
    private final WireFormat format;
    private final int maxRecordBytes;
    private final boolean isKey;
    private final SpecificDatumWriter<T> writer;
    private final Map<Object, SpecificDatumReader<T>> readers = new ConcurrentHashMap<>();
    /** The data model of every serde: generated classes, their custom coders on (no logical types in our schemas). */
    private static final SpecificData MODEL = customCoders();
    /** A buffered encoder per thread, re-pointed at each call's output stream. */
    private static final ThreadLocal<BinaryEncoder> ENCODER = new ThreadLocal<>();

    private static SpecificData customCoders() {
        SpecificData model = new SpecificData(AvroEventSerde.class.getClassLoader());
        model.setCustomCoders(true);
        return model;
    }

    AvroEventSerde(Class<T> type, WireFormat format, int maxRecordBytes, boolean isKey) {
        this.type = type;
        this.readerSchema = EventSchemas.schemaOf(type);
        this.format = format;
        this.maxRecordBytes = maxRecordBytes;
        this.isKey = isKey;
        this.writer = new SpecificDatumWriter<>(readerSchema, MODEL);
    }

    public Class<T> type() {
        return type;
    }

    @Override
    public byte[] serialize(String topic, T data) {
        if (data == null) {
            return null;
        }
        ByteArrayOutputStream out = new ByteArrayOutputStream(256);
        try {
            out.write(format.header(subject(topic), readerSchema));
            BinaryEncoder enc = EncoderFactory.get().binaryEncoder(out, ENCODER.get());
            ENCODER.set(enc);
            writer.write(data, enc);
            enc.flush();
        } catch (IOException e) {
            throw new UncheckedIOException("serializing " + type.getSimpleName() + " for " + topic, e);
        }
        byte[] bytes = out.toByteArray();
        if (bytes.length > maxRecordBytes) {
            throw new IllegalArgumentException(type.getSimpleName() + " for " + topic + " is " + bytes.length
                    + " bytes, over serde.max.record.bytes=" + maxRecordBytes);
        }
        return bytes;
    }

    @Override
    public T deserialize(String topic, byte[] data) {
        if (data == null) {
            return null;
        }
        return read(topic, data, readerSchema, loc -> readers.computeIfAbsent(loc.writerKey(),
                k -> new SpecificDatumReader<>(loc.writer(), readerSchema, MODEL)));
    }

    /** Projections' readers, by (writer, projection). */
    private final Map<Object, org.apache.avro.generic.GenericDatumReader<org.apache.avro.generic.GenericRecord>> projections = new ConcurrentHashMap<>();

    /**
     * Reads {@code data} (checked as {@link #deserialize} checks it) into {@code projection}, a reader schema of the same
     * record that leaves fields out: Avro skips what the projection lacks without building it (a consumer that needs a few
     * fields of a large record pays for those). A generic record of {@code projection}.
     */
    public org.apache.avro.generic.GenericRecord project(String topic, byte[] data, Schema projection) {
        if (data == null) {
            throw new EventDecodingException(Reason.EMPTY, topic, "no value where a " + type.getSimpleName() + " was expected");
        }
        return read(topic, data, projection, loc -> projections.computeIfAbsent(java.util.List.of(loc.writerKey(), projection),
                k -> new org.apache.avro.generic.GenericDatumReader<>(loc.writer(), projection)));
    }

    /** Most items one collection of a record may declare; a reader of its own refuses more, as {@link #deserialize} does. */
    public static final long MAX_COLLECTION_ITEMS = BinaryValidator.MAX_COLLECTION_ITEMS;

    /** Where a record's Avro payload starts in its bytes, and the schema it was written with. */
    public record Payload(Schema writer, int start) { }

    /**
     * The checks {@link #deserialize} makes before it decodes — not empty, within {@code serde.max.record.bytes}, a writer
     * schema of this serde's record — and where the payload is: for a reader of its own that knows {@code writer}'s layout.
     * Such a reader checks every length it meets itself (the binary walk has not run).
     */
    public Payload payload(String topic, byte[] data) {
        if (data == null) {
            throw new EventDecodingException(Reason.EMPTY, topic, "no value where a " + type.getSimpleName() + " was expected");
        }
        WireFormat.Located loc = locate(topic, data, readerSchema);
        return new Payload(loc.writer(), loc.payloadStart());
    }

    private WireFormat.Located locate(String topic, byte[] data, Schema reader) {
        if (data.length == 0) {
            throw new EventDecodingException(Reason.EMPTY, topic, "zero-length value where a " + type.getSimpleName() + " was expected");
        }
        if (data.length > maxRecordBytes) {
            throw new EventDecodingException(Reason.OVERSIZED, topic,
                    data.length + " bytes, over serde.max.record.bytes=" + maxRecordBytes);
        }
        WireFormat.Located loc = format.locate(topic, subject(topic), data);
        if (!loc.writer().getFullName().equals(reader.getFullName())) {
            throw new EventDecodingException(Reason.UNKNOWN_SCHEMA, topic,
                    "record was written as " + loc.writer().getFullName() + ", expected " + reader.getFullName());
        }
        return loc;
    }

    /**
     * The checks every read makes — not empty, within {@code serde.max.record.bytes}, a writer schema of {@code reader}'s
     * record, a binary that walks whole — then {@code readerFor}'s reader over the payload.
     */
    private <R> R read(String topic, byte[] data, Schema reader, java.util.function.Function<WireFormat.Located, org.apache.avro.io.DatumReader<R>> readerFor) {
        WireFormat.Located loc = locate(topic, data, reader);
        Schema writerSchema = loc.writer();
        BinaryValidator.validate(topic, writerSchema, data, loc.payloadStart(), data.length);
        org.apache.avro.io.DatumReader<R> datumReader = readerFor.apply(loc);
        try {
            BinaryDecoder dec = DecoderFactory.get().binaryDecoder(data, loc.payloadStart(), data.length - loc.payloadStart(), null);
            return datumReader.read(null, dec);
        } catch (IOException | AvroRuntimeException | ClassCastException | IndexOutOfBoundsException e) {
            throw new EventDecodingException(Reason.MALFORMED, topic, type.getSimpleName() + ": " + e.getMessage(), e);
        }
    }

    private String subject(String topic) {
        return topic + (isKey ? "-key" : "-value");
    }

    @Override
    public Serializer<T> serializer() {
        return this;
    }

    @Override
    public Deserializer<T> deserializer() {
        return this;
    }

    @Override
    public void configure(Map<String, ?> configs, boolean isKey) {
        // Configured at construction: the same instance serves producers, consumers and Streams.
    }

    @Override
    public void close() {
        // Nothing to release per serde; the registry client is owned by EventSerdes.
    }
}
