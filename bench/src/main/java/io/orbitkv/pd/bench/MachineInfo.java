package io.orbitkv.pd.bench;

import java.nio.file.Files;
import java.nio.file.Path;

/** What a result says about the machine it was measured on. */
final class MachineInfo {

    private MachineInfo() { }

    /** The 1-minute load average: a benchmark on a busy machine measures the other work too, so the result says. */
    static String loadAverage() {
        try {
            return Files.readString(Path.of("/proc/loadavg")).split(" ")[0];
        } catch (Exception e) {
            return "?";
        }
    }

    /** The CPU's model name, or {@code ?}. */
    static String cpuModel() {
        try (var lines = Files.lines(Path.of("/proc/cpuinfo"))) {
            return lines.filter(l -> l.startsWith("model name")).findFirst().map(l -> l.substring(l.indexOf(':') + 1).strip()).orElse("?");
        } catch (Exception e) {
            return "?";
        }
    }
}
