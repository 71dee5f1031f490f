package io.orbitkv.pd.logtools.internal;

import io.orbitkv.pd.logtools.LogRecord;
import java.util.Comparator;

/**
 * The merged read order of records from several partitions: by timestamp, then by topic role (facts before
 * decisions before dead letters), then topic, partition and offset. Only ever used to choose between the heads
 * of partitions: within a partition, offset order is kept whatever the timestamps say.
 */
public final class MergeOrder {

    public static final Comparator<LogRecord> COMPARATOR = Comparator.comparingLong(LogRecord::timestamp)
            .thenComparing(LogRecord::role)
            .thenComparing(LogRecord::topic)
            .thenComparingInt(LogRecord::partition)
            .thenComparingLong(LogRecord::offset);

    private MergeOrder() { }
}
