package io.orbitkv.pd.broker;

import java.io.File;
import java.io.IOException;
import java.net.URI;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Enumeration;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.jar.Attributes;
import java.util.jar.JarEntry;
import java.util.jar.JarFile;
import java.util.jar.Manifest;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Turns the current JVM's {@code java.class.path} into an explicit list of entries a child JVM can use.
 *
 * <p>Two launch styles need care:
 * <ul>
 *   <li><b>Maven Surefire/Failsafe</b> fork with a manifest-only {@code surefirebooter*.jar}: {@code java.class.path}
 *       is that single jar and the real entries sit in its manifest {@code Class-Path} as (relative or
 *       absolute) {@code file:} URLs. The booter jar is deleted when the fork ends, so the child must not
 *       depend on it; we expand it instead.</li>
 *   <li><b>Distribution</b> launch with {@code -cp lib/*}: the launcher normally expands the wildcard before
 *       the JVM starts, but a literal {@code dir/*} entry (e.g. from an embedding launcher) is expanded here
 *       the same way the {@code java} launcher does: every {@code .jar}/{@code .JAR} directly in {@code dir}.</li>
 * </ul>
 * A jar is treated as manifest-only, and expanded, when it has a {@code Class-Path} attribute and no entries
 * outside {@code META-INF/}. Ordinary jars that also carry a {@code Class-Path} are kept as they are: the child
 * JVM follows their manifests itself, exactly as the parent did. Order is preserved, duplicates dropped.
 */
public final class ChildClasspath {

    private static final Logger LOG = LoggerFactory.getLogger(ChildClasspath.class);

    /** Guards against manifest cycles; real launchers nest at most one level. */
    private static final int MAX_DEPTH = 4;

    private ChildClasspath() {
    }

    /** Expanded entries of this JVM's {@code java.class.path}. */
    public static List<Path> current() {
        return expand(System.getProperty("java.class.path", ""));
    }

    /**
     * Expands a class path string in {@link File#pathSeparator} syntax.
     *
     * @param classPath the value of {@code java.class.path} or a {@code -cp} argument
     * @return absolute, normalized entries in class-path order
     */
    public static List<Path> expand(String classPath) {
        Set<Path> out = new LinkedHashSet<>();
        for (String raw : classPath.split(File.pathSeparator)) {
            if (raw.isBlank()) {
                continue;
            }
            addEntry(Path.of(raw), out, 0);
        }
        return List.copyOf(out);
    }

    /** Joins entries into a class path string for {@code -cp}. */
    public static String join(List<Path> entries) {
        return String.join(File.pathSeparator, entries.stream().map(Path::toString).toList());
    }

    private static void addEntry(Path entry, Set<Path> out, int depth) {
        String name = entry.getFileName() == null ? "" : entry.getFileName().toString();
        if (name.equals("*")) {
            addWildcard(entry.getParent() == null ? Path.of(".") : entry.getParent(), out);
            return;
        }
        Path abs = entry.toAbsolutePath().normalize();
        if (depth < MAX_DEPTH && isJar(abs) && Files.isRegularFile(abs)) {
            List<Path> nested = manifestOnlyClassPath(abs);
            if (nested != null) {
                for (Path p : nested) {
                    addEntry(p, out, depth + 1);
                }
                return;
            }
        }
        out.add(abs);
    }

    private static void addWildcard(Path dir, Set<Path> out) {
        List<Path> jars = new ArrayList<>();
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir)) {
            for (Path p : ds) {
                if (isJar(p) && Files.isRegularFile(p)) {
                    jars.add(p.toAbsolutePath().normalize());
                }
            }
        } catch (IOException e) {
            // Same as the java launcher: a wildcard over a missing directory contributes nothing.
            LOG.debug("Cannot list class path wildcard directory {}: {}", dir, e.toString());
            return;
        }
        jars.sort(null); // deterministic; the launcher's order is unspecified anyway
        out.addAll(jars);
    }

    private static boolean isJar(Path p) {
        Path fn = p.getFileName();
        return fn != null && fn.toString().toLowerCase(Locale.ROOT).endsWith(".jar");
    }

    /**
     * @return the resolved {@code Class-Path} of a manifest-only jar, or {@code null} if the jar is an ordinary one
     */
    static List<Path> manifestOnlyClassPath(Path jar) {
        try (JarFile jf = new JarFile(jar.toFile(), false)) {
            Manifest mf = jf.getManifest();
            String cp = mf == null ? null : mf.getMainAttributes().getValue(Attributes.Name.CLASS_PATH);
            if (cp == null || cp.isBlank()) {
                return null;
            }
            for (Enumeration<JarEntry> en = jf.entries(); en.hasMoreElements(); ) {
                if (!en.nextElement().getName().startsWith("META-INF/")) {
                    return null;
                }
            }
            // Per the JAR spec, Class-Path entries are URLs relative to the jar's own location.
            URI base = jar.toAbsolutePath().getParent().toUri();
            List<Path> result = new ArrayList<>();
            for (String token : cp.trim().split("\\s+")) {
                URI u;
                try {
                    u = base.resolve(token);
                } catch (IllegalArgumentException notAUrl) {
                    // Hand-written manifests sometimes hold plain paths with unescaped characters.
                    result.add(jar.toAbsolutePath().getParent().resolve(token));
                    continue;
                }
                if (!"file".equalsIgnoreCase(u.getScheme())) {
                    LOG.warn("Ignoring non-file Class-Path entry {} in {}", token, jar);
                    continue;
                }
                result.add(Path.of(u));
            }
            return result;
        } catch (IOException e) {
            // The JVM silently skips unreadable class path jars; pass it on unchanged and let the child do the same.
            LOG.debug("Not a readable jar, kept as is: {} ({})", jar, e.toString());
            return null;
        }
    }
}
