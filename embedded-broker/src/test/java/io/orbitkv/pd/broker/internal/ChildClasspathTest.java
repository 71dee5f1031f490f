package io.orbitkv.pd.broker.internal;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.File;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.jar.Attributes;
import java.util.jar.JarOutputStream;
import java.util.jar.Manifest;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** The child broker JVM must get the real class path, also when Surefire hides it in a manifest-only jar. */
class ChildClasspathTest {

    @Test
    void manifestOnlyBooterJarIsExpandedToItsClassPathEntries(@TempDir Path dir) throws Exception {
        Path a = emptyJar(dir.resolve("a.jar"));
        Path classes = Files.createDirectories(dir.resolve("classes"));
        Manifest m = new Manifest();
        m.getMainAttributes().put(Attributes.Name.MANIFEST_VERSION, "1.0");
        m.getMainAttributes().put(Attributes.Name.CLASS_PATH, a.toUri() + " " + classes.toUri());
        Path booter = dir.resolve("surefirebooter123.jar");
        try (OutputStream out = Files.newOutputStream(booter); JarOutputStream jar = new JarOutputStream(out, m)) {
            jar.flush();
        }

        List<Path> entries = ChildClasspath.expand(booter.toString());

        assertThat(entries).contains(a.toAbsolutePath().normalize(), classes.toAbsolutePath().normalize());
        assertThat(entries).doesNotContain(booter.toAbsolutePath().normalize());
    }

    private static Path emptyJar(Path p) throws Exception {
        try (OutputStream out = Files.newOutputStream(p); JarOutputStream jar = new JarOutputStream(out)) {
            jar.flush();
        }
        return p;
    }

    @Test
    void plainClassPathKeepsItsOrder(@TempDir Path dir) throws Exception {
        Path x = emptyJar(dir.resolve("x.jar"));
        Path y = emptyJar(dir.resolve("y.jar"));
        assertThat(ChildClasspath.expand(x + File.pathSeparator + y)).containsExactly(x.toAbsolutePath().normalize(), y.toAbsolutePath().normalize());
    }
}
