package io.orbitkv.pd.schemas.compat;

import io.orbitkv.pd.schemas.EventSchemas;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;
import java.util.regex.Pattern;
import org.apache.avro.Schema;
import org.apache.avro.specific.SpecificRecord;

/**
 * Cuts a release of the public contracts: writes the fully resolved JSON of every current top-level schema to
 * {@code <root>/<version>/<Name>.avsc} and lists it in {@code <root>/index.txt}, which
 * {@link EventSchemas#loadReleased} reads. From then on the embedded serde resolves that version's fingerprints
 * and {@link CompatibilityChecker} holds every later change to it.
 *
 * <pre>
 * java -cp "cli/target/orbitkv-pd.jar:cli/target/lib/*" io.orbitkv.pd.schemas.compat.SchemaRelease \
 *     v2 schemas/src/main/resources/io/orbitkv/pd/schemas/released
 * </pre>
 *
 * <p>Released files are immutable: cutting an existing version again is a no-op when nothing changed and an
 * error when a schema differs, because data in the log was written with the released text's fingerprint.
 */
public final class SchemaRelease {

    /** Version names become folder names and index entries; keep them plain. */
    private static final Pattern VERSION = Pattern.compile("[A-Za-z0-9][A-Za-z0-9._-]{0,63}");
    private static final String INDEX_HEADER = """
            # Released versions of the public event schemas, one <version>/<Name>.avsc per line.
            # Written by io.orbitkv.pd.schemas.compat.SchemaRelease; never edit a released file (see docs/schemas.md).
            """;

    private SchemaRelease() {
    }

    /**
     * {@code SchemaRelease <version> <released-root>}: exit code 0 when written (or already identical), 1 when
     * the release was refused, 2 on bad arguments.
     */
    public static void main(String[] args) {
        if (args.length != 2) {
            System.err.println("usage: SchemaRelease <version> <released-root>   (for example: v2 "
                    + "schemas/src/main/resources/io/orbitkv/pd/schemas/released)");
            System.exit(2);
            return;
        }
        try {
            List<Path> written = release(args[0], Path.of(args[1]));
            if (written.isEmpty()) {
                System.out.println("release " + args[0] + " already present and identical; nothing written");
            }
            for (Path p : written) {
                System.out.println("wrote " + p);
            }
        } catch (IllegalArgumentException | IllegalStateException | UncheckedIOException e) {
            System.err.println("schema release " + args[0] + " refused: " + e.getMessage());
            System.exit(1);
        }
    }

    /**
     * Writes release {@code version} of every current top-level schema under {@code root}.
     *
     * @return the files written; empty when the release already existed with the same content
     * @throws IllegalArgumentException when the version name is not a plain folder name
     * @throws IllegalStateException    when the version exists and one of its schemas differs from the current one
     */
    public static List<Path> release(String version, Path root) {
        if (version == null || !VERSION.matcher(version).matches()) {
            throw new IllegalArgumentException("version must match " + VERSION + ", got " + version);
        }
        Path dir = root.resolve(version);
        List<String> entries = new ArrayList<>();
        List<Path> written = new ArrayList<>();
        try {
            // Check every file before writing any, so a refused release leaves nothing half-written.
            List<Path> targets = new ArrayList<>();
            List<String> texts = new ArrayList<>();
            for (Class<? extends SpecificRecord> type : EventSchemas.topLevelTypes()) {
                Schema schema = EventSchemas.schemaOf(type);
                Path target = dir.resolve(schema.getName() + ".avsc");
                String text = schema.toString(true) + "\n";
                if (Files.exists(target) && !Files.readString(target, StandardCharsets.UTF_8).equals(text)) {
                    throw new IllegalStateException(target + " is released and differs from the current "
                            + schema.getName() + " schema; released files never change, cut a new version");
                }
                targets.add(target);
                texts.add(text);
                entries.add(version + "/" + schema.getName() + ".avsc");
            }
            Files.createDirectories(dir);
            for (int i = 0; i < targets.size(); i++) {
                if (!Files.exists(targets.get(i))) {
                    Files.writeString(targets.get(i), texts.get(i), StandardCharsets.UTF_8);
                    written.add(targets.get(i));
                }
            }
            Path index = root.resolve("index.txt");
            List<String> lines = Files.exists(index) ? Files.readAllLines(index, StandardCharsets.UTF_8) : List.of();
            Set<String> listed = new LinkedHashSet<>();
            lines.forEach(l -> listed.add(l.strip()));
            StringBuilder text = new StringBuilder(lines.isEmpty() ? INDEX_HEADER : String.join("\n", lines) + "\n");
            boolean changed = false;
            for (String e : entries) {
                if (!listed.contains(e)) {
                    text.append(e).append('\n');
                    changed = true;
                }
            }
            if (changed) {
                Files.writeString(index, text.toString(), StandardCharsets.UTF_8);
                written.add(index);
            }
        } catch (IOException e) {
            throw new UncheckedIOException("writing release " + version + " under " + root, e);
        }
        return written;
    }
}
