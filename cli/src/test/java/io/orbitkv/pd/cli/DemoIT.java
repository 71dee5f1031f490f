package io.orbitkv.pd.cli;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import picocli.CommandLine;

/** The foundation demo ({@code demo --events}) against a real broker: every event type goes out and comes back unchanged. */
class DemoIT {

    @Test
    void demoPrintsTheTimelineOfEveryEventType(@TempDir Path dir) {
        ByteArrayOutputStream buf = new ByteArrayOutputStream();
        PrintStream original = System.out;
        int exit;
        try {
            System.setOut(new PrintStream(buf, true, StandardCharsets.UTF_8));
            exit = new CommandLine(new Main()).execute("demo", "--events", "--work-dir", dir.toString());
        } finally {
            System.setOut(original);
        }
        String out = buf.toString(StandardCharsets.UTF_8);

        assertThat(exit).as(out).isZero();
        assertThat(out).contains("OK: ").contains("Timeline:");
        for (String type : new String[] {"EngineRegistration", "RequestAdmitted", "PrefillCompleted", "PrefillFailed", "DecodeReady",
                "DecodeRejected", "LeaseHeartbeat", "TransferStarted", "TransferCompleted", "TransferFailed", "DecodeCompleted",
                "CancelRequested", "EngineEpochChanged", "Tick", "TransferOrder", "AbortTransfer", "ReleaseDecided", "KvReady", "RecomputeDecided",
                "RequestOutcome", "InputRejected", "DeadLetter"}) {
            assertThat(out).as("timeline shows %s", type).containsPattern("(?m)\\s" + type + "( |$)");
        }
    }
}
