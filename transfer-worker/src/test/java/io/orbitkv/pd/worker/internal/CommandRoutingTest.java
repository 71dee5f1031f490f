package io.orbitkv.pd.worker.internal;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.charset.StandardCharsets;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.junit.jupiter.api.Test;

/** Which partition a worker reads, and how it decides which offsets may be committed. */
class CommandRoutingTest {

    @Test
    void aWorkerReadsThePartitionKafkasDefaultPartitionerPutsItsEngineIn() {
        for (int partitions : new int[] {1, 3, 6, 64}) {
            for (int i = 0; i < 500; i++) {
                String engine = (i % 2 == 0 ? "decode-" : "prefill-gpu") + i;
                assertThat(CommandLoop.partitionFor(engine, partitions))
                        .isEqualTo(BuiltInPartitioner.partitionForKey(engine.getBytes(StandardCharsets.UTF_8), partitions));
            }
        }
    }

    @Test
    void theCommittedOffsetNeverPassesARecordWhoseEffectIsNotDurable() {
        OffsetTracker t = new OffsetTracker();
        assertThat(t.committable()).isEqualTo(-1);
        t.track(10);
        t.track(11);
        t.track(12);
        t.done(11);
        assertThat(t.committable()).as("10 is still running").isEqualTo(10);
        t.committed(10);
        assertThat(t.committable()).as("nothing new to commit").isEqualTo(-1);
        t.done(10);
        assertThat(t.committable()).isEqualTo(12);
        t.done(12);
        assertThat(t.committable()).isEqualTo(13);
        t.committed(13);
        assertThat(t.committable()).isEqualTo(-1);
        assertThat(t.inFlight()).isZero();
    }
}
