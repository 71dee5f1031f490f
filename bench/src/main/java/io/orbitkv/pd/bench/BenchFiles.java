package io.orbitkv.pd.bench;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;

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
}
