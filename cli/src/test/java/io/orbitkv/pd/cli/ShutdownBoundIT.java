package io.orbitkv.pd.cli;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.runtime.ShutdownBound;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;
import org.junit.jupiter.api.Test;

/**
 * {@link ShutdownBound} in a real child JVM: SIGTERM runs the component's close; a close that returns is the normal
 * exit, one that hangs (a peer gone, a client waiting out its timeout) is cut at the bound with a line saying where it
 * was stuck.
 */
class ShutdownBoundIT {

    /** The child: installs the bound around a close that returns or hangs, says it is ready, then waits to be stopped. */
    public static final class Probe {
        public static void main(String[] args) throws Exception {
            boolean hang = args[0].equals("hang");
            ShutdownBound.install("probe", () -> {
                if (hang) {
                    try {
                        Thread.sleep(600_000); // a close that never returns
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                }
            }, Duration.ofSeconds(1));
            System.out.println("ready");
            System.out.flush();
            Thread.sleep(600_000);
        }
    }

    @Test
    void aCloseThatReturnsEndsTheProcessAtOnce() throws Exception {
        Run r = run("return");
        assertThat(r.seconds).isLessThan(1.0);
        assertThat(r.output).contains("probe: stopped in");
    }

    @Test
    void aCloseThatHangsIsCutAtTheBound() throws Exception {
        Run r = run("hang");
        assertThat(r.exit).isEqualTo(143);
        assertThat(r.seconds).isBetween(0.9, 5.0);
        assertThat(r.output).contains("probe: did not stop within 1 s of SIGTERM; halting").contains("Thread.sleep");
    }

    private record Run(int exit, double seconds, String output) { }

    private static Run run(String mode) throws Exception {
        Path out = Files.createTempFile("shutdown-bound-", ".log");
        Process p = new ProcessBuilder(Path.of(System.getProperty("java.home"), "bin", "java").toString(), "-cp", System.getProperty("java.class.path"),
                Probe.class.getName(), mode).redirectErrorStream(true).redirectOutput(out.toFile()).start();
        org.awaitility.Awaitility.await().atMost(Duration.ofSeconds(30)).pollInterval(Duration.ofMillis(20)).until(() -> {
            assertThat(p.isAlive()).as("probe alive; output: %s", Files.readString(out)).isTrue();
            return Files.readString(out, StandardCharsets.UTF_8).contains("ready");
        });
        long t0 = System.nanoTime();
        p.destroy(); // SIGTERM
        assertThat(p.waitFor(20, TimeUnit.SECONDS)).as("stopped within 20 s").isTrue();
        double secs = (System.nanoTime() - t0) / 1e9;
        String text = Files.readString(out, StandardCharsets.UTF_8);
        Files.deleteIfExists(out);
        return new Run(p.exitValue(), secs, text);
    }
}
