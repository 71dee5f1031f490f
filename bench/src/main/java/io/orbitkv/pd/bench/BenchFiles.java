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
     * The JSON file of a run written to {@code md}: {@code bench/results/<name>.json} when {@code md} is
     * {@code docs/bench/<name>.md}, else beside {@code md} (a run written elsewhere keeps its JSON with its markdown).
     * Its folder is created.
     */
    static Path jsonFor(Path md) throws IOException {
        String stem = md.getFileName().toString().replaceFirst("\\.md$", "");
        // docs/bench/X.md (the default, or another run of the same bench beside it) -> bench/results/X.json
        Path json = Path.of("docs", "bench").equals(md.getParent()) ? Path.of("bench", "results", stem + ".json")
                : md.resolveSibling(stem + ".json");
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
