package io.orbitkv.pd.logtools;

import java.util.List;
import java.util.Objects;
import java.util.Optional;

/**
 * What a log source holds: which topics, which offset range of each partition, where it came from and how its
 * values are encoded. Written into an export file's header, so a file describes itself.
 *
 * @param origin    where the records were read ("kafka 127.0.0.1:9092", "synthetic seed 1", a file name)
 * @param serdeMode wire format of the values ({@code embedded} or {@code registry})
 * @param createdMs when the slice was taken
 * @param filter    null for a complete slice; else what it was filtered to (e.g. {@code requests req-1, req-2})
 * @param topics    the topics, each with its partition ranges
 */
public record LogSlice(String origin, String serdeMode, long createdMs, String filter, List<TopicSlice> topics) {

    public LogSlice {
        Objects.requireNonNull(origin, "origin");
        Objects.requireNonNull(serdeMode, "serdeMode");
        topics = List.copyOf(topics);
    }

    /**
     * One topic of the slice.
     *
     * @param name       topic name
     * @param role       what it is
     * @param partitions offset range per partition
     */
    public record TopicSlice(String name, TopicRole role, List<PartitionRange> partitions) {
        public TopicSlice {
            Objects.requireNonNull(name, "name");
            Objects.requireNonNull(role, "role");
            partitions = List.copyOf(partitions);
        }

        public Optional<PartitionRange> partition(int p) {
            return partitions.stream().filter(r -> r.partition() == p).findFirst();
        }
    }

    /**
     * Offsets {@code [start, end)} of one partition.
     *
     * @param partition    partition
     * @param start        first offset (inclusive)
     * @param end          end offset (exclusive)
     * @param fromLogStart true when {@code start} was the first offset the log still held: the slice has the
     *                     partition's whole retained history, so a request's first facts are in it
     */
    public record PartitionRange(int partition, long start, long end, boolean fromLogStart) {
        public long count() {
            return Math.max(0, end - start);
        }
    }

    /** The topic of a role, if the slice has it. */
    public Optional<TopicSlice> topic(TopicRole role) {
        return topics.stream().filter(t -> t.role() == role).findFirst();
    }

    /** Records the slice spans by offsets (an upper bound: transaction markers take offsets too). */
    public long estimatedRecords() {
        return topics.stream().flatMap(t -> t.partitions().stream()).mapToLong(PartitionRange::count).sum();
    }

    /** Partitions of a role's topic (0 when the slice lacks it). */
    public int partitionCount(TopicRole role) {
        return topic(role).map(t -> t.partitions().stream().mapToInt(PartitionRange::partition).max().orElse(-1) + 1).orElse(0);
    }

    /** Whether partition {@code p} of the role's topic starts at its log start (unknown partitions: false). */
    public boolean fromLogStart(TopicRole role, int p) {
        return topic(role).flatMap(t -> t.partition(p)).map(PartitionRange::fromLogStart).orElse(false);
    }
}
