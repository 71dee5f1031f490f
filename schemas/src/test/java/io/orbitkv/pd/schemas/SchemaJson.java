package io.orbitkv.pd.schemas;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.function.Consumer;
import org.apache.avro.Schema;

/**
 * Edits a schema as JSON, the way a developer edits an {@code .avsc}: find a named type's definition wherever it
 * is nested, change it, parse the result. Used to build older writer schemas and incompatible mutations.
 */
public final class SchemaJson {

    private static final ObjectMapper JSON = new ObjectMapper();

    private SchemaJson() {
    }

    /** A copy of {@code schema} with {@code edit} applied to the definition of the named type {@code typeName}. */
    public static Schema edit(Schema schema, String typeName, Consumer<ObjectNode> edit) {
        try {
            JsonNode root = JSON.readTree(schema.toString());
            ObjectNode def = definition(root, typeName);
            if (def == null) {
                throw new IllegalArgumentException(typeName + " is not defined in " + schema.getName());
            }
            edit.accept(def);
            return new Schema.Parser().parse(JSON.writeValueAsString(root));
        } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
            throw new IllegalStateException(e);
        }
    }

    /** The field object {@code name} of a record definition. */
    public static ObjectNode field(ObjectNode record, String name) {
        for (JsonNode f : record.withArray("fields")) {
            if (name.equals(f.path("name").asText())) {
                return (ObjectNode) f;
            }
        }
        throw new IllegalArgumentException("no field " + name + " in " + record.path("name").asText());
    }

    public static void removeField(ObjectNode record, String name) {
        ArrayNode fields = record.withArray("fields");
        for (int i = 0; i < fields.size(); i++) {
            if (name.equals(fields.get(i).path("name").asText())) {
                fields.remove(i);
                return;
            }
        }
        throw new IllegalArgumentException("no field " + name + " in " + record.path("name").asText());
    }

    /** Appends a field given as JSON text. */
    public static void addField(ObjectNode record, String fieldJson) {
        try {
            record.withArray("fields").add(JSON.readTree(fieldJson));
        } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
            throw new IllegalArgumentException(fieldJson, e);
        }
    }

    public static JsonNode json(String text) {
        try {
            return JSON.readTree(text);
        } catch (com.fasterxml.jackson.core.JsonProcessingException e) {
            throw new IllegalArgumentException(text, e);
        }
    }

    /** The union array that is the type of {@code field} of {@code record}. */
    public static ArrayNode unionOf(ObjectNode record, String field) {
        return (ArrayNode) field(record, field).get("type");
    }

    /** Removes the branch named {@code name} from a union of named types. */
    public static void removeBranch(ArrayNode union, String name) {
        for (int i = 0; i < union.size(); i++) {
            JsonNode b = union.get(i);
            if (name.equals(b.path("name").asText()) || name.equals(b.asText())) {
                union.remove(i);
                return;
            }
        }
        throw new IllegalArgumentException("no branch " + name);
    }

    private static ObjectNode definition(JsonNode node, String name) {
        if (node instanceof ObjectNode o) {
            String type = o.path("type").asText();
            if (name.equals(o.path("name").asText()) && (type.equals("record") || type.equals("enum") || type.equals("fixed"))) {
                return o;
            }
        }
        for (JsonNode child : node) {
            ObjectNode found = definition(child, name);
            if (found != null) {
                return found;
            }
        }
        return null;
    }
}
