package io.orbitkv.pd.cli.logtools;

import io.orbitkv.pd.broker.DevBroker;
import io.orbitkv.pd.decider.DeciderConfig;
import io.orbitkv.pd.logtools.KafkaLogSource;
import io.orbitkv.pd.logtools.LogFile;
import io.orbitkv.pd.logtools.LogRecord;
import io.orbitkv.pd.logtools.LogSlice;
import io.orbitkv.pd.logtools.LogSource;
import io.orbitkv.pd.logtools.Progress;
import io.orbitkv.pd.logtools.TopicRole;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.Set;
import java.util.function.Consumer;
import picocli.CommandLine.Option;

/**
 * Where the log tools read from, shared by {@code trace}, {@code audit}, {@code replay} and {@code export}: a
 * cluster ({@code --bootstrap}, default {@code bootstrap.servers} of {@code --config}, else the dev broker's
 * 127.0.0.1:9092) or an export file ({@code --file}). {@code --config} is the decider's properties file, read by
 * {@link DeciderConfig} exactly as {@code orbitkv-pd decider} reads it: topic prefix, wire format, the policy
 * (timeouts, retries, auth.key) the audit and the replay need, and {@code kafka.*} client settings.
 */
public final class LogSourceOptions {

    @Option(names = "--bootstrap", description = "Kafka bootstrap servers (default: bootstrap.servers of --config, else 127.0.0.1:9092,"
            + " where './orbitkv-pd broker' listens).")
    String bootstrap;

    @Option(names = "--config", description = "The decider's properties file (topics.*, serde.*, decider.* timeouts and retries, auth.key,"
            + " kafka.*): the audit and the replay judge the log by the policy it was made under.")
    Path config;

    @Option(names = "--prefix", description = "Topic name prefix (overrides topics.prefix; default orbitkv.).")
    String prefix;

    @Option(names = "--file", description = "Read an export file (./orbitkv-pd export) instead of a cluster.")
    Path file;

    @Option(names = "--from", description = "First record time: ISO-8601 (2025-01-01T10:00:00Z), epoch ms, or a time ago (15m, 2h).")
    String from;

    @Option(names = "--to", description = "Last record time, same forms as --from.")
    String to;

    @Option(names = "--progress", description = "Show the progress bar on stderr even when it is not a terminal.")
    boolean progress;

    @Option(names = "--timeout", defaultValue = "15s", description = "How long to wait for the cluster (default: ${DEFAULT-VALUE}).")
    String timeout;

    private DeciderConfig deciderConfig;
    private EventSerdes serdes;
    private Topics topics;

    /** The decider's config from --config, with --bootstrap and --prefix applied; unknown keys are refused. */
    public DeciderConfig deciderConfig() {
        if (deciderConfig == null) {
            ConfigProps props = ConfigProps.loadOrEmpty(config);
            if (bootstrap != null) {
                props.with("bootstrap.servers", bootstrap);
            } else if (props.string("bootstrap.servers", null) == null) {
                props.with("bootstrap.servers", "127.0.0.1:" + DevBroker.DEFAULT_PORT);
            }
            props.override("topics.prefix", prefix);
            deciderConfig = DeciderConfig.from(props);
            props.requireAllKeysUsed("docs/decider.md");
        }
        return deciderConfig;
    }

    public EventSerdes serdes() {
        if (serdes == null) {
            serdes = EventSerdes.create(deciderConfig().serde());
        }
        return serdes;
    }

    public Topics topics() {
        if (topics == null) {
            topics = new Topics(deciderConfig().topics(), serdes());
        }
        return topics;
    }

    public boolean fromFile() {
        return file != null;
    }

    /** Opens the source: the export file, or the cluster's topics of {@code roles}. */
    public LogSource open(Set<TopicRole> roles) {
        long now = System.currentTimeMillis();
        Long fromMs = TimeArg.parse("--from", from, now);
        Long toMs = TimeArg.parse("--to", to, now);
        if (fromMs != null && toMs != null && toMs < fromMs) {
            throw new IllegalArgumentException("--to: " + to + " is before --from " + from);
        }
        if (file != null) {
            LogFile f = LogFile.open(file);
            return fromMs == null && toMs == null ? f : new TimeWindow(f, fromMs, toMs);
        }
        DeciderConfig c = deciderConfig();
        Duration t = ConfigProps.empty().with("timeout", timeout).duration("timeout", Duration.ofSeconds(15));
        return KafkaLogSource.open(new KafkaLogSource.Options(c.bootstrapServers(), c.kafkaOverrides(), topics(), c.serde().mode().name()
                .toLowerCase(java.util.Locale.ROOT), roles, fromMs, toMs, t));
    }

    public Progress progress(boolean json) {
        return ProgressBar.forTerminal(progress, json);
    }

    public void close() {
        if (serdes != null) {
            serdes.close();
        }
    }

    /** An export file read between two times (the file itself is checked whole). */
    private record TimeWindow(LogFile file, Long fromMs, Long toMs) implements LogSource {
        @Override
        public LogSlice slice() {
            LogSlice s = file.slice();
            if (fromMs == null) {
                return s;
            }
            // from a later start, requests begun before it are partial, as with a cluster read from --from
            List<LogSlice.TopicSlice> topics = s.topics().stream().map(t -> new LogSlice.TopicSlice(t.name(), t.role(), t.partitions().stream()
                    .map(p -> new LogSlice.PartitionRange(p.partition(), p.start(), p.end(), false)).toList())).toList();
            return new LogSlice(s.origin() + " from " + java.time.Instant.ofEpochMilli(fromMs), s.serdeMode(), s.createdMs(), s.filter(), topics);
        }

        @Override
        public void read(RecordFilter filter, Consumer<LogRecord> sink, Progress progress) {
            file.read(new RecordFilter() {
                @Override
                public boolean wantsPartition(TopicRole role, int partition) {
                    return filter.wantsPartition(role, partition);
                }

                @Override
                public boolean wants(LogRecord r) {
                    return (fromMs == null || r.timestamp() >= fromMs) && (toMs == null || r.timestamp() <= toMs) && filter.wants(r);
                }
            }, sink, progress);
        }

        @Override
        public void close() {
            file.close();
        }
    }
}
