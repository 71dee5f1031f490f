package io.orbitkv.pd.schemas;

import io.orbitkv.pd.events.DeadLetter;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.RequestAnswered;
import io.orbitkv.pd.events.RequestEvent;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.specific.SpecificRecord;

/**
 * The catalog of top-level event schemas: the current ones (compiled from {@code schemas/src/main/avro}) and
 * every released version kept in {@code schemas/src/main/resources/io/orbitkv/pd/schemas/released/}. The
 * embedded serde resolves writer schemas by fingerprint from here, so data written by any released version
 * stays readable without a registry.
 */
public final class EventSchemas {

    /** Classpath folder of released schema versions; {@code index.txt} lists {@code <version>/<Name>.avsc}. */
    public static final String RELEASED_ROOT = "io/orbitkv/pd/schemas/released/";

    private static final List<Class<? extends SpecificRecord>> TOP_LEVEL =
            List.of(EngineRegistration.class, RequestEvent.class, Decision.class, DeadLetter.class, RequestAnswered.class,
                    io.orbitkv.pd.events.KvCacheEvent.class);

    /** Durable internal records (state stores): resolvable by fingerprint, not part of the public contract. */
    private static final List<Class<? extends SpecificRecord>> INTERNAL = List.of(io.orbitkv.pd.state.DeciderState.class);

    private static final EventSchemas INSTANCE = load();

    private final Map<String, Schema> current;
    private final List<Released> released;
    private final Map<Long, Schema> byFingerprint;

    /** One schema of one released version. */
    public record Released(String version, String name, Schema schema) { }

    private EventSchemas(Map<String, Schema> current, List<Released> released) {
        this.current = Collections.unmodifiableMap(current);
        this.released = List.copyOf(released);
        Map<Long, Schema> fp = new HashMap<>();
        current.values().forEach(s -> fp.put(fingerprint(s), s));
        released.forEach(r -> fp.putIfAbsent(fingerprint(r.schema()), r.schema()));
        INTERNAL.forEach(t -> fp.putIfAbsent(fingerprint(schemaOf(t)), schemaOf(t)));
        this.byFingerprint = Collections.unmodifiableMap(fp);
    }

    public static EventSchemas get() {
        return INSTANCE;
    }

    /** The top-level record classes that travel on topics. */
    public static List<Class<? extends SpecificRecord>> topLevelTypes() {
        return TOP_LEVEL;
    }

    /** Current schemas by record name. */
    public Map<String, Schema> current() {
        return current;
    }

    /** Every released schema, in index order. */
    public List<Released> released() {
        return released;
    }

    /** A writer schema, current or released, by its CRC-64-AVRO fingerprint. */
    public Optional<Schema> byFingerprint(long fingerprint) {
        return Optional.ofNullable(byFingerprint.get(fingerprint));
    }

    /** The CRC-64-AVRO fingerprint of the schema's parsing canonical form, as single-object encoding uses. */
    public static long fingerprint(Schema schema) {
        return SchemaNormalization.parsingFingerprint64(schema);
    }

    private static EventSchemas load() {
        Map<String, Schema> current = new HashMap<>();
        for (Class<? extends SpecificRecord> type : TOP_LEVEL) {
            Schema s = schemaOf(type);
            current.put(s.getName(), s);
        }
        return new EventSchemas(current, loadReleased(EventSchemas.class.getClassLoader(), RELEASED_ROOT));
    }

    /** Reads the released versions listed in {@code root + "index.txt"} from a class loader. */
    public static List<Released> loadReleased(ClassLoader loader, String root) {
        List<Released> out = new ArrayList<>();
        String index = readResource(loader, root + "index.txt");
        if (index == null) {
            return out;
        }
        for (String line : index.split("\n")) {
            String entry = line.strip();
            if (entry.isEmpty() || entry.startsWith("#")) {
                continue;
            }
            String text = readResource(loader, root + entry);
            if (text == null) {
                throw new IllegalStateException("released schema index names " + entry + " but " + root + entry + " is missing");
            }
            int slash = entry.indexOf('/');
            String version = slash < 0 ? "" : entry.substring(0, slash);
            Schema schema = new Schema.Parser().parse(text);
            out.add(new Released(version, schema.getName(), schema));
        }
        return out;
    }

    public static Schema schemaOf(Class<? extends SpecificRecord> type) {
        try {
            return (Schema) type.getField("SCHEMA$").get(null);
        } catch (ReflectiveOperationException e) {
            throw new IllegalArgumentException(type.getName() + " is not a generated Avro record", e);
        }
    }

    private static String readResource(ClassLoader loader, String path) {
        try (InputStream in = loader.getResourceAsStream(path)) {
            return in == null ? null : new String(in.readAllBytes(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            throw new UncheckedIOException("reading " + path, e);
        }
    }
}
