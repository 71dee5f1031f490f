package io.orbitkv.pd.cli;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** {@code worker} with several {@code --config} files (a node's workers in one process) refuses what cannot work, before any starts. */
class WorkerCommandTest {

    @TempDir
    Path dir;

    private Path config(String name, String engine) throws Exception {
        Path p = dir.resolve(name);
        Files.writeString(p, "bootstrap.servers=127.0.0.1:1\nworker.engine.id=" + engine + "\n");
        return p;
    }

    private int run(StringWriter err, String... args) {
        var cli = Main.commandLine();
        cli.setErr(new PrintWriter(err, true));
        return cli.execute(args);
    }

    @Test
    void twoFilesForOneEngineAreRefused() throws Exception {
        StringWriter err = new StringWriter();
        int exit = run(err, "worker", "--config", config("a.properties", "decode-0").toString(), "--config", config("b.properties", "decode-0").toString());
        assertThat(exit).isEqualTo(2);
        assertThat(err.toString()).contains("--config: two files name the same engine");
    }

    @Test
    void engineOverridesOnlyOneWorker() throws Exception {
        StringWriter err = new StringWriter();
        int exit = run(err, "worker", "--engine", "x", "--config", config("a.properties", "prefill-0").toString(), "--config",
                config("b.properties", "decode-0").toString());
        assertThat(exit).isEqualTo(2);
        assertThat(err.toString()).contains("--engine: names the engine of one worker");
    }

    @Test
    void aTypoInTheSecondFileStopsBothBeforeEitherStarts() throws Exception {
        Path bad = dir.resolve("bad.properties");
        Files.writeString(bad, "bootstrap.servers=127.0.0.1:1\nworker.engine.id=decode-0\nworker.concurency=4\n");
        StringWriter err = new StringWriter();
        int exit = run(err, "worker", "--config", config("a.properties", "prefill-0").toString(), "--config", bad.toString());
        assertThat(exit).isNotZero();
        assertThat(err.toString()).contains("worker.concurency");
    }
}
