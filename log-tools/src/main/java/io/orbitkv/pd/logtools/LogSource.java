package io.orbitkv.pd.logtools;

import java.util.function.Consumer;

/**
 * A recorded slice of the log: a Kafka cluster ({@link KafkaLogSource}) or an export file ({@link LogFile}).
 * Records come in <em>merged order</em>: each partition in offset order, partitions interleaved by timestamp
 * (at equal timestamps in {@link TopicRole} order, so a fact comes before the decisions it caused). Every
 * record processed by the decider before a decision has a timestamp no larger than that decision's stream time,
 * so in merged order each decision comes after every fact it could depend on.
 */
public interface LogSource extends AutoCloseable {

    /** What the source holds. */
    LogSlice slice();

    /**
     * Streams the records selected by {@code filter} to {@code sink}, in merged order, reporting progress per
     * record. May be called more than once.
     */
    void read(RecordFilter filter, Consumer<LogRecord> sink, Progress progress);

    @Override
    void close();

    /**
     * Which records a read wants. Sources push it down where they can (a Kafka source assigns only the wanted
     * partitions), and always apply it.
     */
    interface RecordFilter {
        /** Everything. */
        RecordFilter ALL = new RecordFilter() { };

        /** Whether any record of this partition is wanted (false: the partition is not read at all). */
        default boolean wantsPartition(TopicRole role, int partition) {
            return true;
        }

        /** Whether this record is wanted. */
        default boolean wants(LogRecord record) {
            return true;
        }
    }
}
