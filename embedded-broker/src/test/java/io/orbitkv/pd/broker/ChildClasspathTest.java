package io.orbitkv.pd.broker;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.File;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.jar.Attributes;
import java.util.jar.JarEntry;
import java.util.jar.JarOutputStream;
import java.util.jar.Manifest;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class ChildClasspathTest {

    @TempDir
    Path tmp;

    @Test
    void expandsSurefireStyleManifestOnlyJar() throws IOException {
        Path lib = Files.createDirectories(tmp.resolve("repo dir/lib"));
        Path a = Files.createFile(lib.resolve("a.jar"));
        Path b = Files.createFile(tmp.resolve("b.jar"));
        Path classes = Files.createDirectories(tmp.resolve("target/test-classes"));
        Path booter = Files.createDirectories(tmp.resolve("target/surefire")).resolve("surefirebooter-1.jar");
        // Surefire writes absolute file: URLs (percent-encoded) and, in some versions, relative ones.
        writeJar(booter, a.toUri() + " ../../b.jar " + classes.toUri(), false);

        List<Path> cp = ChildClasspath.expand(booter.toString());

        assertThat(cp).containsExactly(a, b, classes);
        assertThat(cp).noneMatch(p -> p.getFileName().toString().startsWith("surefirebooter"));
    }

    @Test
    void keepsOrdinaryJarsEvenWithClassPathManifest() throws IOException {
        Path app = tmp.resolve("app.jar");
        writeJar(app, "other.jar", true); // has classes: the child JVM follows its manifest itself
        Path plain = Files.createFile(tmp.resolve("plain.jar"));

        assertThat(ChildClasspath.expand(app + File.pathSeparator + plain + File.pathSeparator + app))
                .containsExactly(app, plain);
    }

    @Test
    void plainClassPathKeepsItsOrder() throws IOException {
        Path y = Files.createFile(tmp.resolve("y.jar"));
        Path x = Files.createFile(tmp.resolve("x.jar"));
        assertThat(ChildClasspath.expand(y + File.pathSeparator + x)).containsExactly(y, x);
    }

    @Test
    void expandsDistributionWildcard() throws IOException {
        Path lib = Files.createDirectories(tmp.resolve("lib"));
        Path z = Files.createFile(lib.resolve("z.jar"));
        Path a = Files.createFile(lib.resolve("a.JAR"));
        Files.createFile(lib.resolve("readme.txt"));
        Path conf = Files.createDirectories(tmp.resolve("conf"));

        assertThat(ChildClasspath.expand(conf + File.pathSeparator + lib.resolve("*")))
                .containsExactly(conf, a, z);
    }

    @Test
    void currentClassPathUnderSurefireIsExpandedAndComplete() {
        List<Path> cp = ChildClasspath.current();

        assertThat(cp).noneMatch(p -> p.getFileName().toString().startsWith("surefirebooter"));
        assertThat(cp).anyMatch(p -> p.endsWith(Path.of("target", "test-classes")));
        assertThat(cp).anyMatch(p -> p.getFileName().toString().startsWith("kafka_2.13-"));
        assertThat(cp).anyMatch(p -> p.getFileName().toString().startsWith("junit-jupiter-api-"));
        assertThat(cp).allMatch(Files::exists);
    }

    private static void writeJar(Path jar, String classPath, boolean withClass) throws IOException {
        Manifest mf = new Manifest();
        mf.getMainAttributes().put(Attributes.Name.MANIFEST_VERSION, "1.0");
        mf.getMainAttributes().put(Attributes.Name.CLASS_PATH, classPath);
        try (OutputStream out = Files.newOutputStream(jar); JarOutputStream jos = new JarOutputStream(out, mf)) {
            if (withClass) {
                jos.putNextEntry(new JarEntry("com/example/Main.class"));
                jos.write(new byte[] {(byte) 0xCA, (byte) 0xFE});
                jos.closeEntry();
            }
        }
    }
}
