package io.orbitkv.pd.schemas.compat;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.schemas.EventSchemas;
import io.orbitkv.pd.schemas.EventSchemas.Released;
import java.io.IOException;
import java.io.InputStream;
import java.net.MalformedURLException;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.stream.Stream;
import org.apache.avro.Schema;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Cutting a release, and the shape of the releases kept in the repository. */
class SchemaReleaseTest {

    /** Surefire runs in the module folder. */
    private static final Path RELEASED = Path.of("src/main/resources", EventSchemas.RELEASED_ROOT);

    @Test
    void releaseWritesEveryTopLevelSchemaAndAnIndexTheLoaderReads(@TempDir Path root) throws IOException {
        // when
        List<Path> written = SchemaRelease.release("v7", root);
        // then one file per top-level type plus the index
        assertThat(written).hasSize(EventSchemas.topLevelTypes().size() + 1);
        List<Released> loaded = loadFrom(root);
        assertThat(loaded).extracting(Released::name)
                .containsExactlyElementsOf(EventSchemas.topLevelTypes().stream().map(Class::getSimpleName).toList());
        for (Released r : loaded) {
            assertThat(r.version()).isEqualTo("v7");
            assertThat(r.schema()).isEqualTo(EventSchemas.get().current().get(r.name()));
            assertThat(CompatibilityChecker.compare(r.name(), "v7", EventSchemas.get().current().get(r.name()), r.schema())).isEmpty();
        }
    }

    @Test
    void releasingTheSameVersionAgainIsANoOpAndANextVersionAppendsToTheIndex(@TempDir Path root) throws IOException {
        // given
        SchemaRelease.release("v1", root);
        // when
        List<Path> again = SchemaRelease.release("v1", root);
        SchemaRelease.release("v2", root);
        // then
        assertThat(again).isEmpty();
        List<Released> loaded = loadFrom(root);
        assertThat(loaded).extracting(Released::version).containsOnly("v1", "v2");
        assertThat(loaded).hasSize(2 * EventSchemas.topLevelTypes().size());
    }

    @Test
    void aReleasedFileIsNeverOverwritten(@TempDir Path root) throws IOException {
        // given a released Decision that differs from the current one
        SchemaRelease.release("v1", root);
        Path decision = root.resolve("v1/Decision.avsc");
        Files.writeString(decision, Files.readString(decision).replace("\"seq\"", "\"sequence\""));
        String before = Files.readString(decision);
        // when / then
        assertThatThrownBy(() -> SchemaRelease.release("v1", root)).isInstanceOf(IllegalStateException.class)
                .hasMessageContaining("Decision.avsc").hasMessageContaining("cut a new version");
        assertThat(Files.readString(decision)).isEqualTo(before);
    }

    @Test
    void versionMustBeAPlainFolderName(@TempDir Path root) {
        assertThatThrownBy(() -> SchemaRelease.release("../v2", root)).isInstanceOf(IllegalArgumentException.class);
        assertThatThrownBy(() -> SchemaRelease.release("", root)).isInstanceOf(IllegalArgumentException.class);
    }

    @Test
    void everyReleasedFileInTheRepositoryIsIndexedAndNamedAfterItsSchema() throws IOException {
        // given the released folder as committed
        List<String> indexed = Files.readAllLines(RELEASED.resolve("index.txt")).stream()
                .map(String::strip).filter(l -> !l.isEmpty() && !l.startsWith("#")).toList();
        List<String> files;
        try (Stream<Path> walk = Files.walk(RELEASED)) {
            files = walk.filter(p -> p.toString().endsWith(".avsc")).map(p -> RELEASED.relativize(p).toString().replace('\\', '/')).toList();
        }
        // then no released file escapes the index (it would escape the compatibility check), and names match
        assertThat(indexed).containsExactlyInAnyOrderElementsOf(files);
        for (String entry : indexed) {
            Schema s = new Schema.Parser().parse(RELEASED.resolve(entry).toFile());
            assertThat(entry).endsWith("/" + s.getName() + ".avsc");
        }
    }

    private static List<Released> loadFrom(Path root) throws MalformedURLException, IOException {
        // The loader reads a class path; a folder URL makes the temp release one.
        try (URLClassLoader loader = new URLClassLoader(new URL[] {root.toUri().toURL()}, null)) {
            try (InputStream in = loader.getResourceAsStream("index.txt")) {
                assertThat(in).isNotNull();
            }
            return EventSchemas.loadReleased(loader, "");
        }
    }
}
