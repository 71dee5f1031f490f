package io.orbitkv.pd.decider;

import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.schemas.Topics;
import java.time.Instant;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyTestDriver;

/**
 * Feeds a recorded slice of the request-events log into a fresh decider, offline, and returns the decisions it
 * makes. Decisions are a pure function of each partition's records in offset order, so one partition is replayed
 * at a time, each in its own fresh decider: the result must equal the recorded decisions of that partition.
 */
public final class DeciderReplay {

    private DeciderReplay() { }

    /**
     * @param records one partition's request-events records, in offset order, as raw bytes with their timestamps
     * @return the decisions a fresh decider makes from them, in order
     */
    public static List<Decision> replayPartition(DeciderPolicy policy, Topics topics, List<ConsumerRecord<byte[], byte[]>> records) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, "orbitkv-replay");
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "replay:0");
        try (TopologyTestDriver driver = new TopologyTestDriver(DeciderTopology.build(policy, DeciderConfig.StoreKind.IN_MEMORY, topics), p)) {
            TestInputTopic<byte[], byte[]> in = driver.createInputTopic(topics.requestEvents().name(), Serdes.ByteArray().serializer(),
                    Serdes.ByteArray().serializer());
            TestOutputTopic<String, Decision> out = driver.createOutputTopic(topics.decisions().name(), Serdes.String().deserializer(),
                    topics.decisions().valueSerde().deserializer());
            for (ConsumerRecord<byte[], byte[]> r : records) {
                in.pipeInput(r.key(), r.value(), Instant.ofEpochMilli(r.timestamp()));
            }
            return out.readValuesToList();
        }
    }
}
