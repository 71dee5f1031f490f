package io.orbitkv.pd.schemas.compat;

import io.orbitkv.pd.schemas.EventSchemas;
import io.orbitkv.pd.schemas.EventSchemas.Released;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.SchemaCompatibility;
import org.apache.avro.SchemaCompatibility.Incompatibility;
import org.apache.avro.SchemaCompatibility.SchemaCompatibilityType;
import org.apache.avro.SchemaCompatibility.SchemaIncompatibilityType;

/**
 * Checks every current top-level schema against every released version of the same name, in both directions,
 * with Avro's own {@link SchemaCompatibility} rules, and reports each incompatibility by field path.
 *
 * <p>Both directions matter because producers and consumers are upgraded one at a time: a consumer on the new
 * code must read records already in the log ({@link Direction#BACKWARD}), and a consumer still on a released
 * version must read what an upgraded producer writes ({@link Direction#FORWARD}).
 *
 * <p>Avro reports an incompatibility inside a union branch only as "reader union lacking writer type: RECORD"
 * at a JSON-pointer location. Our envelopes keep every event in a union branch, so this checker re-checks a
 * branch against the reader branch of the same name and turns locations into field paths such as
 * {@code RequestEvent.payload[RequestAdmitted].prompt_tokens}: the author of the change sees which field broke.
 */
public final class CompatibilityChecker {

    /** Guards the union-branch recursion; our schemas nest a few levels, never this many. */
    private static final int MAX_DEPTH = 32;

    private CompatibilityChecker() {
    }

    /** Who reads whom. */
    public enum Direction {
        /** Current reader, released writer: the new code reads records already in the log. */
        BACKWARD,
        /** Released reader, current writer: code still on the release reads what the new code writes. */
        FORWARD
    }

    /**
     * One incompatibility between the current schema {@code schema} and its released {@code version}.
     *
     * @param schema    record name of the top-level schema
     * @param version   released version it was compared with
     * @param direction which side read; {@code null} when the current schema is missing altogether
     * @param fieldPath where it breaks, as {@code Record.field[Branch].field}
     * @param type      Avro's incompatibility type; {@code null} when the current schema is missing
     * @param detail    Avro's message and JSON-pointer location
     */
    public record Violation(String schema, String version, Direction direction, String fieldPath,
                            SchemaIncompatibilityType type, String detail) {

        /** The line printed by the build: schema, version, direction, field and reason. */
        public String message() {
            if (direction == null) {
                return schema + " " + version + ": " + detail;
            }
            String who = direction == Direction.BACKWARD
                    ? "current reader cannot read " + version + " data"
                    : version + " reader cannot read current data";
            return schema + " " + version + " " + direction + " (" + who + "): field " + fieldPath + ": " + type + ": " + detail;
        }

        @Override
        public String toString() {
            return message();
        }
    }

    /** Checks the catalog's current schemas against its released versions. */
    public static List<Violation> check(EventSchemas catalog) {
        return check(catalog.current(), catalog.released());
    }

    /**
     * Checks {@code current} (by record name) against every released schema. A released name with no current
     * schema is a violation: its topic's consumers would find nothing to read the log with.
     */
    public static List<Violation> check(Map<String, Schema> current, List<Released> released) {
        List<Violation> out = new ArrayList<>();
        for (Released r : released) {
            Schema now = current.get(r.name());
            if (now == null) {
                out.add(new Violation(r.name(), r.version(), null, r.name(), null,
                        "released schema has no current schema of that name (removed or renamed top-level type)"));
                continue;
            }
            out.addAll(compare(r.name(), r.version(), now, r.schema()));
        }
        return out;
    }

    /** Both directions between one current schema and one released schema. */
    public static List<Violation> compare(String name, String version, Schema current, Schema released) {
        List<Violation> out = new ArrayList<>();
        for (Direction d : Direction.values()) {
            Schema reader = d == Direction.BACKWARD ? current : released;
            Schema writer = d == Direction.BACKWARD ? released : current;
            for (Finding f : findings(reader, writer, reader.getName(), "", 0)) {
                out.add(new Violation(name, version, d, f.path(), f.type(), f.message() + " (at " + f.pointer() + ")"));
            }
        }
        return out;
    }

    private record Finding(String path, String pointer, SchemaIncompatibilityType type, String message) { }

    private static List<Finding> findings(Schema reader, Schema writer, String rootPath, String rootPointer, int depth) {
        SchemaCompatibility.SchemaPairCompatibility result = SchemaCompatibility.checkReaderWriterCompatibility(reader, writer);
        List<Finding> out = new ArrayList<>();
        if (result.getType() == SchemaCompatibilityType.COMPATIBLE) {
            return out;
        }
        for (Incompatibility inc : result.getResult().getIncompatibilities()) {
            Located at = locate(reader, writer, inc.getLocation(), rootPath);
            String pointer = rootPointer + inc.getLocation();
            if (inc.getType() == SchemaIncompatibilityType.MISSING_UNION_BRANCH && depth < MAX_DEPTH
                    && at.reader() != null && at.reader().getType() == Schema.Type.UNION && at.writer() != null && isNamed(at.writer())) {
                Schema readerBranch = sameNamedBranch(at.reader(), at.writer());
                if (readerBranch != null) {
                    // The branch still exists but changed: report what changed inside it, not just "lacking RECORD".
                    List<Finding> inner = findings(readerBranch, at.writer(), at.path(), pointer, depth + 1);
                    if (!inner.isEmpty()) {
                        out.addAll(inner);
                        continue;
                    }
                }
                out.add(new Finding(at.path(), pointer, inc.getType(),
                        "reader union has no branch " + at.writer().getFullName() + " (" + inc.getMessage() + ")"));
                continue;
            }
            out.add(new Finding(at.path(), pointer, inc.getType(), inc.getMessage()));
        }
        return out;
    }

    private record Located(String path, Schema reader, Schema writer) { }

    /**
     * Follows Avro's location pointer ({@code /fields/4/type/0/fields/1/type}) through reader and writer at once:
     * field indexes are the reader's, union indexes are the writer's branches (Avro checks each writer branch).
     */
    private static Located locate(Schema reader, Schema writer, String pointer, String rootPath) {
        StringBuilder path = new StringBuilder(rootPath);
        Schema r = reader;
        Schema w = writer;
        String[] tokens = pointer.split("/");
        walk:
        for (int i = 1; i < tokens.length; i++) {
            String tok = tokens[i];
            switch (tok) {
                case "fields" -> {
                    Integer idx = i + 1 < tokens.length ? index(tokens[i + 1]) : null;
                    if (idx == null || r == null || r.getType() != Schema.Type.RECORD || idx >= r.getFields().size()) {
                        break walk;
                    }
                    i++;
                    Schema.Field rf = r.getFields().get(idx);
                    path.append('.').append(rf.name());
                    Schema.Field wf = w != null && w.getType() == Schema.Type.RECORD ? writerField(w, rf) : null;
                    r = rf.schema();
                    w = wf == null ? null : wf.schema();
                }
                case "type" -> {
                    // The field's schema: already entered with the field.
                }
                case "items" -> {
                    r = r != null && r.getType() == Schema.Type.ARRAY ? r.getElementType() : null;
                    w = w != null && w.getType() == Schema.Type.ARRAY ? w.getElementType() : null;
                    path.append("[]");
                }
                case "values" -> {
                    r = r != null && r.getType() == Schema.Type.MAP ? r.getValueType() : null;
                    w = w != null && w.getType() == Schema.Type.MAP ? w.getValueType() : null;
                    path.append("{}");
                }
                default -> {
                    Integer idx = index(tok);
                    if (idx == null) {
                        break walk; // symbols, size, name: the message says the rest
                    }
                    if (w != null && w.getType() == Schema.Type.UNION && idx < w.getTypes().size()) {
                        w = w.getTypes().get(idx);
                        path.append('[').append(branchName(w)).append(']');
                        if (r != null && r.getType() == Schema.Type.UNION) {
                            Schema same = sameNamedBranch(r, w);
                            if (same != null && !isNamed(w)) {
                                r = same;
                            }
                        }
                    } else if (r != null && r.getType() == Schema.Type.UNION && idx < r.getTypes().size()) {
                        r = r.getTypes().get(idx);
                        path.append('[').append(branchName(r)).append(']');
                    } else {
                        break walk;
                    }
                }
            }
        }
        return new Located(path.toString(), r, w);
    }

    private static Integer index(String token) {
        if (token.isEmpty() || token.length() > 9 || !token.chars().allMatch(Character::isDigit)) {
            return null;
        }
        return Integer.parseInt(token);
    }

    private static Schema.Field writerField(Schema writer, Schema.Field readerField) {
        Schema.Field f = writer.getField(readerField.name());
        if (f != null) {
            return f;
        }
        for (String alias : readerField.aliases()) {
            f = writer.getField(alias);
            if (f != null) {
                return f;
            }
        }
        return null;
    }

    private static boolean isNamed(Schema s) {
        return s.getType() == Schema.Type.RECORD || s.getType() == Schema.Type.ENUM || s.getType() == Schema.Type.FIXED;
    }

    /** The reader union's branch that Avro would resolve the writer branch to: same full name, alias, or same primitive. */
    private static Schema sameNamedBranch(Schema readerUnion, Schema writerBranch) {
        for (Schema b : readerUnion.getTypes()) {
            if (b.getType() != writerBranch.getType()) {
                continue;
            }
            if (!isNamed(b) || b.getFullName().equals(writerBranch.getFullName()) || b.getAliases().contains(writerBranch.getFullName())) {
                return b;
            }
        }
        return null;
    }

    private static String branchName(Schema s) {
        return isNamed(s) ? s.getName() : s.getType().getName();
    }
}
