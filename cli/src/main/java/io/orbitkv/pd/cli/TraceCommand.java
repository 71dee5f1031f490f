package io.orbitkv.pd.cli;

import io.orbitkv.pd.cli.logtools.LogSourceOptions;
import io.orbitkv.pd.logtools.LogFileException;
import io.orbitkv.pd.logtools.LogSource;
import io.orbitkv.pd.logtools.TopicRole;
import io.orbitkv.pd.logtools.trace.RequestTrace;
import java.util.EnumSet;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;
import picocli.CommandLine.Parameters;

/** {@code orbitkv-pd trace <request-id>}: one request's whole story from the log. */
@Command(name = "trace", mixinStandardHelpOptions = true,
        description = {"Prints one request's whole story from the log.",
                "Every fact about it (with the component that reported it), every decision,",
                "every dead letter of its records, where each sits (topic-partition@offset),",
                "the engines it used, and the time spent in each phase. Reads only the",
                "request's partition of each topic. Exit 1 when the log has no record of the",
                "request. See docs/log-tools.md."})
final class TraceCommand implements Callable<Integer> {

    @Parameters(index = "0", paramLabel = "REQUEST-ID", description = "The request id (the key of its facts and decisions).")
    String requestId;

    @Mixin
    LogSourceOptions source;

    @Option(names = "--json", description = "One JSON document instead of text (for tools).")
    boolean json;

    @Option(names = "--full", description = "Print every event in full (default: cut to the terminal's width).")
    boolean full;

    @Option(names = "--all-partitions", description = "Read every partition, for producers that do not use Kafka's default partitioner.")
    boolean allPartitions;

    @Override
    public Integer call() {
        try (LogSource log = source.open(EnumSet.of(TopicRole.ENGINES, TopicRole.REQUEST_EVENTS, TopicRole.DECISIONS, TopicRole.DEAD_LETTERS,
                TopicRole.ANSWERS))) {
            RequestTrace trace = RequestTrace.collect(log, requestId, source.serdes(), allPartitions, source.progress(json));
            if (json) {
                trace.writeJson(System.out);
            } else {
                trace.writeText(System.out, full, width());
            }
            System.out.flush();
            return trace.found() ? 0 : 1;
        } catch (LogFileException e) {
            System.err.println("trace: " + e.getMessage());
            return 2;
        } finally {
            source.close();
        }
    }

    private static int width() {
        String cols = System.getenv("COLUMNS");
        int w = cols != null && cols.matches("\\d+") ? Integer.parseInt(cols) : 200;
        return Math.max(60, w - 76);
    }
}
