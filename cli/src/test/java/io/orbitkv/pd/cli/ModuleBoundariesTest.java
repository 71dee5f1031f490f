package io.orbitkv.pd.cli;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * A module's {@code internal} packages are its own: no other module imports them (docs/architecture.md, "Modules").
 * What another module needs is public API of the module that owns it. Reads the sources of every module of the build.
 */
class ModuleBoundariesTest {

    private static final Pattern PACKAGE = Pattern.compile("(?m)^package ([\\w.]+);");
    private static final Pattern IMPORT = Pattern.compile("(?m)^import (?:static )?([\\w.]+\\.internal)\\.[\\w.*]+;");

    @Test
    void noModuleImportsAnotherModulesInternalPackage() throws IOException {
        Path root = Path.of("..");
        List<Path> modules;
        try (Stream<Path> s = Files.list(root)) {
            modules = s.filter(d -> Files.isRegularFile(d.resolve("pom.xml")) && Files.isDirectory(d.resolve("src"))).sorted().toList();
        }
        assertThat(modules).as("modules found from %s", root.toAbsolutePath()).hasSizeGreaterThan(10);
        Map<Path, Set<String>> own = new HashMap<>();
        Map<Path, List<Path>> sources = new HashMap<>();
        for (Path m : modules) {
            List<Path> files = javaFiles(m.resolve("src"));
            sources.put(m, files);
            Set<String> pkgs = new HashSet<>();
            for (Path f : files) {
                Matcher p = PACKAGE.matcher(read(f));
                if (p.find()) {
                    pkgs.add(p.group(1));
                }
            }
            own.put(m, pkgs);
        }
        List<String> violations = new ArrayList<>();
        for (Path m : modules) {
            for (Path f : sources.get(m)) {
                Matcher i = IMPORT.matcher(read(f));
                while (i.find()) {
                    if (!own.get(m).contains(i.group(1))) {
                        violations.add(root.relativize(f) + " imports " + i.group(1));
                    }
                }
            }
        }
        assertThat(violations).as("imports of other modules' internal packages").isEmpty();
    }

    /**
     * Long-running components log; only command-line output writes to stdout: the CLI, the benchmarks (their tables), and
     * two tools' own mains (the schema release tool, and the broker child whose stdout is its node's log file).
     */
    @Test
    void onlyCommandLineOutputGoesToStdout() throws IOException {
        Path root = Path.of("..");
        Set<String> tools = Set.of("SchemaRelease.java", "KraftBrokerMain.java");
        List<String> writers = new ArrayList<>();
        try (Stream<Path> s = Files.list(root)) {
            for (Path m : s.filter(d -> Files.isDirectory(d.resolve("src/main/java"))).toList()) {
                String module = m.getFileName().toString();
                if (module.equals("cli") || module.equals("bench")) {
                    continue;
                }
                for (Path f : javaFiles(m.resolve("src/main/java"))) {
                    if (read(f).contains("System.out") && !tools.contains(f.getFileName().toString())) {
                        writers.add(root.relativize(f).toString());
                    }
                }
            }
        }
        assertThat(writers).as("production classes outside the CLI writing to System.out").isEmpty();
    }

    private static List<Path> javaFiles(Path dir) throws IOException {
        try (Stream<Path> s = Files.walk(dir)) {
            return s.filter(f -> f.toString().endsWith(".java")).toList();
        }
    }

    private static String read(Path f) {
        try {
            return Files.readString(f);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }
}
