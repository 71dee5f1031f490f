package io.orbitkv.pd.logtools;

import com.fasterxml.jackson.core.JsonGenerator;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.RequestEvent;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.util.Base64;
import java.util.Collection;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericEnumSymbol;
import org.apache.avro.generic.IndexedRecord;

/**
 * Writes any event as plain JSON for tools: a record becomes an object of its fields, the payload of an envelope
 * ({@link RequestEvent}, {@link Decision}) gets a {@code "type"} member with its record name, enums are strings,
 * bytes are base64. Generic over the schema, like {@code EventText}, so new fields appear without code changes.
 */
public final class EventJson {

    private EventJson() { }

    public static void write(JsonGenerator g, Object value) throws IOException {
        write(g, value, false);
    }

    private static void write(JsonGenerator g, Object v, boolean typed) throws IOException {
        switch (v) {
            case null -> g.writeNull();
            case IndexedRecord r -> {
                g.writeStartObject();
                if (typed) {
                    g.writeStringField("type", r.getSchema().getName());
                }
                for (Schema.Field f : r.getSchema().getFields()) {
                    g.writeFieldName(f.name());
                    boolean union = r instanceof RequestEvent || r instanceof Decision || r instanceof io.orbitkv.pd.events.KvCacheEvent;
                    write(g, r.get(f.pos()), union && f.name().equals("payload"));
                }
                g.writeEndObject();
            }
            case CharSequence s -> g.writeString(s.toString());
            case Integer i -> g.writeNumber(i);
            case Long l -> g.writeNumber(l);
            case Float f -> g.writeNumber(f);
            case Double d -> g.writeNumber(d);
            case Boolean b -> g.writeBoolean(b);
            case ByteBuffer bb -> {
                ByteBuffer dup = bb.duplicate();
                byte[] bytes = new byte[dup.remaining()];
                dup.get(bytes);
                g.writeString(Base64.getEncoder().encodeToString(bytes));
            }
            case GenericEnumSymbol<?> e -> g.writeString(e.toString());
            case Enum<?> e -> g.writeString(e.name());
            case Collection<?> c -> {
                g.writeStartArray();
                for (Object o : c) {
                    write(g, o, false);
                }
                g.writeEndArray();
            }
            case Map<?, ?> m -> {
                g.writeStartObject();
                for (Map.Entry<?, ?> e : m.entrySet()) {
                    g.writeFieldName(String.valueOf(e.getKey()));
                    write(g, e.getValue(), false);
                }
                g.writeEndObject();
            }
            default -> g.writeString(v.toString());
        }
    }
}
