package io.orbitkv.pd.cli;

import io.orbitkv.pd.cli.logtools.LogSourceOptions;
import io.orbitkv.pd.logtools.LogFileException;
import io.orbitkv.pd.logtools.LogSource;
import io.orbitkv.pd.logtools.TopicRole;
import io.orbitkv.pd.logtools.audit.AuditReport;
import io.orbitkv.pd.logtools.audit.Auditor;
import java.util.EnumSet;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/** {@code orbitkv-pd audit}: checks the decider's invariants over the log. */
@Command(name = "audit", mixinStandardHelpOptions = true,
        description = {"Checks the decider's invariants over the log.",
                "One outcome per admitted request; every held page released exactly once and",
                "never while a push may land; no transfer order after a cancel, the outcome or",
                "the end of the lease; no stale epoch in an order and no push acknowledged",
                "after its lease was released; retries within bounds and after their backoff;",
                "consistent timings; a gapless decision log. Prints counts and every violation",
                "with its request id; exit 1 on any violation. Pass the decider's --config so",
                "the audit uses its timeouts and limits. See docs/log-tools.md."})
final class AuditCommand implements Callable<Integer> {

    @Mixin
    LogSourceOptions source;

    @Option(names = "--json", description = "One JSON document instead of text (for tools).")
    boolean json;

    @Option(names = "--max-violations", defaultValue = "50", description = "Violations listed (all are counted; default: ${DEFAULT-VALUE}).")
    int maxViolations;

    @Override
    public Integer call() {
        if (maxViolations < 0) {
            throw new IllegalArgumentException("--max-violations: must be >= 0, got " + maxViolations);
        }
        try (LogSource log = source.open(EnumSet.of(TopicRole.REQUEST_EVENTS, TopicRole.DECISIONS, TopicRole.DEAD_LETTERS))) {
            AuditReport report = Auditor.audit(log, source.serdes(), source.deciderConfig().policy(), maxViolations, source.progress(json));
            if (json) {
                report.writeJson(System.out);
            } else {
                report.writeText(System.out);
            }
            System.out.flush();
            return report.clean() ? 0 : 1;
        } catch (LogFileException e) {
            System.err.println("audit: " + e.getMessage());
            return 2;
        } finally {
            source.close();
        }
    }
}
