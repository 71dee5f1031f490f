package io.orbitkv.pd.cli;

import io.orbitkv.pd.cli.logtools.LogSourceOptions;
import io.orbitkv.pd.logtools.LogExport;
import io.orbitkv.pd.logtools.LogFile;
import io.orbitkv.pd.logtools.LogFileException;
import io.orbitkv.pd.logtools.LogSource;
import io.orbitkv.pd.logtools.SyntheticLog;
import io.orbitkv.pd.logtools.TopicRole;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.EnumSet;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.Callable;
import org.slf4j.LoggerFactory;
import picocli.CommandLine.Command;
import picocli.CommandLine.Mixin;
import picocli.CommandLine.Option;

/** {@code orbitkv-pd export}: writes a slice of the log to a file a user can attach to a bug report. */
@Command(name = "export", mixinStandardHelpOptions = true,
        description = {"Writes a slice of the log to a file to attach to a bug report.",
                "A self-describing, versioned, checksummed file (from a cluster, or another",
                "export) that trace, audit and replay read with --file. --request keeps only",
                "those requests, with the stream-time marks their replay needs. --synthetic N",
                "writes a run of the real decider over N synthetic requests instead (to try",
                "the tools without a cluster, or to measure the audit). Format:",
                "docs/log-tools.md."})
final class ExportCommand implements Callable<Integer> {

    @Mixin
    LogSourceOptions source;

    @Option(names = "--out", required = true, description = "The file to write (replaced if it exists; nothing is left on failure).")
    Path out;

    @Option(names = "--request", description = "Keep only this request (repeatable).")
    List<String> requests;

    @Option(names = "--topics", defaultValue = "engines,request-events,decisions,dead-letters,answers", split = ",",
            description = "Topics (roles) to export; 'engine-commands' too if wanted (default: ${DEFAULT-VALUE}).")
    List<String> topics;

    @Option(names = "--all-partitions", description = "With --request: read every partition, not only the request's own.")
    boolean allPartitions;

    @Option(names = "--synthetic", paramLabel = "N", description = "Write a synthetic run of the real decider over N requests (~11 records each).")
    Integer synthetic;

    @Option(names = "--seed", defaultValue = "1", description = "With --synthetic: random seed (default: ${DEFAULT-VALUE}).")
    long seed;

    @Option(names = "--rate", defaultValue = "1000", description = "With --synthetic: requests per second of log time (default: ${DEFAULT-VALUE}).")
    int rate;

    @Override
    public Integer call() {
        try {
            if (synthetic != null) {
                return synthetic();
            }
            Set<TopicRole> roles = EnumSet.noneOf(TopicRole.class);
            topics.forEach(t -> roles.add(TopicRole.fromId(t.strip())));
            if (!roles.contains(TopicRole.REQUEST_EVENTS) || !roles.contains(TopicRole.DECISIONS)) {
                throw new IllegalArgumentException("--topics: request-events and decisions are always needed, got " + topics);
            }
            try (LogSource log = source.open(roles)) {
                long t0 = System.nanoTime();
                LogExport.Result r = LogExport.export(log, out, requests == null ? null : new LinkedHashSet<>(requests), allPartitions,
                        source.progress(false));
                LogFile check = LogFile.open(r.file());
                System.out.printf(Locale.ROOT, "wrote %s: %,d records (%s)%s, %,d bytes in %.1f s; checked: %,d blocks, SHA-256 ok%n", r.file(),
                        r.records() - r.marks(), r.byRole(), r.marks() > 0 ? " + " + r.marks() + " stream-time marks" : "",
                        Files.size(r.file()), (System.nanoTime() - t0) / 1e9, check.blockCount());
                if (requests != null && r.byRole().getOrDefault(TopicRole.REQUEST_EVENTS, 0L) == 0) {
                    System.out.println("note: no fact of " + requests + " in the slice (wrong id, or --all-partitions?)");
                    return 1;
                }
                return 0;
            }
        } catch (LogFileException e) {
            System.err.println("export: " + e.getMessage());
            return 2;
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException(e);
        } finally {
            source.close();
        }
    }

    private int synthetic() throws java.io.IOException {
        if (source.fromFile() || requests != null) {
            throw new IllegalArgumentException("--synthetic: writes a generated run; it takes no --file or --request");
        }
        for (String name : new String[] {"org.apache.kafka.streams", "io.orbitkv.pd.decider"}) {
            if (LoggerFactory.getLogger(name) instanceof ch.qos.logback.classic.Logger l) {
                l.setLevel(ch.qos.logback.classic.Level.ERROR);
            }
        }
        long t0 = System.nanoTime();
        SyntheticLog.Options o = new SyntheticLog.Options(synthetic, seed, source.deciderConfig().topics().partitions(), rate, 1_735_689_600_000L);
        SyntheticLog.Summary s = SyntheticLog.write(out, o, source.deciderConfig().policy(), source.topics(), source.progress(false));
        System.out.printf(Locale.ROOT, "wrote %s: a run of the decider over %,d synthetic requests: %,d records (%,d facts, %,d decisions),"
                        + " %,d bytes in %.1f s%n", out.toAbsolutePath(), s.requests(), s.records(), s.facts(), s.decisions(), Files.size(out),
                (System.nanoTime() - t0) / 1e9);
        return 0;
    }
}
