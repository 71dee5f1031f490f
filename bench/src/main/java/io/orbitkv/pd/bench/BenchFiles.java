package io.orbitkv.pd.bench;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Locale;

/** Where a benchmark's machine-readable results go, beside its markdown. */
final class BenchFiles {

    private BenchFiles() { }

    /**
     * The JSON file of a run written to {@code md}: the committed {@code bench/results/<name>.json} when {@code md} is
     * the committed {@code docs/bench/<name>.md}, else beside {@code md} (a run written elsewhere keeps its JSON with
     * its markdown). Its folder is created.
     */
    static Path jsonFor(Path md, String name) throws IOException {
        Path json = md.equals(Path.of("docs", "bench", name + ".md")) ? Path.of("bench", "results", name + ".json")
                : md.resolveSibling(md.getFileName().toString().replaceFirst("\\.md$", "") + ".json");
        Files.createDirectories(json.toAbsolutePath().getParent());
        return json;
    }

    /** {@code [1.234,5.678]}: repeated measurements in a result's JSON (3 decimals). */
    static String jsonNumbers(List<Double> v) {
        return "[" + String.join(",", v.stream().map(x -> String.format(Locale.ROOT, "%.3f", x)).toList()) + "]";
    }

    /** {@code 1.23 / 5.68}: repeated measurements in a result's table cell (2 decimals). */
    static String slashed(List<Double> v) {
        return String.join(" / ", v.stream().map(x -> String.format(Locale.ROOT, "%.2f", x)).toList());
    }
}
