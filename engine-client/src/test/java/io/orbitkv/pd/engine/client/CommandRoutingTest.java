package io.orbitkv.pd.engine.client;

import static org.assertj.core.api.Assertions.assertThat;

import java.nio.charset.StandardCharsets;
import org.apache.kafka.clients.producer.internals.BuiltInPartitioner;
import org.junit.jupiter.api.Test;

/** Which partition of engine-commands an engine's worker and command reader read. */
class CommandRoutingTest {

    @Test
    void anEnginesRecordsAreOnThePartitionKafkasDefaultPartitionerPutsItsIdIn() {
        for (int partitions : new int[] {1, 3, 6, 64}) {
            for (int i = 0; i < 500; i++) {
                String engine = (i % 2 == 0 ? "decode-" : "prefill-gpu") + i;
                assertThat(CommandRouting.partitionFor(engine, partitions))
                        .isEqualTo(BuiltInPartitioner.partitionForKey(engine.getBytes(StandardCharsets.UTF_8), partitions));
            }
        }
    }
}
