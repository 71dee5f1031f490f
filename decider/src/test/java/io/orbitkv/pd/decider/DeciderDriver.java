package io.orbitkv.pd.decider;

import io.orbitkv.pd.events.DeadLetter;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import java.time.Instant;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyTestDriver;

/** The decider topology in a {@link TopologyTestDriver}: pipe facts at given stream times, read decisions back. */
public final class DeciderDriver implements AutoCloseable {

    public final Topics topics = new Topics(TopicsConfig.defaults(), EventSerdes.embedded());
    private final TopologyTestDriver driver;
    private final TestInputTopic<String, RequestEvent> in;
    private final TestInputTopic<byte[], byte[]> raw;
    private final TestOutputTopic<String, Decision> decisions;
    private final TestOutputTopic<String, Decision> commands;
    private final TestOutputTopic<String, DeadLetter> deadLetters;

    public DeciderDriver(DeciderPolicy policy) {
        this(policy, DeciderMetrics.noop());
    }

    /** As {@link #DeciderDriver(DeciderPolicy)}, counting into {@code metrics}. */
    public DeciderDriver(DeciderPolicy policy, DeciderMetrics metrics) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, "decider-test");
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "unused:9092");
        driver = new TopologyTestDriver(DeciderTopology.build(policy, DeciderConfig.StoreKind.IN_MEMORY, topics, false, metrics), p);
        in = driver.createInputTopic(topics.requestEvents().name(), Serdes.String().serializer(), topics.requestEvents().valueSerde().serializer());
        raw = driver.createInputTopic(topics.requestEvents().name(), Serdes.ByteArray().serializer(), Serdes.ByteArray().serializer());
        decisions = driver.createOutputTopic(topics.decisions().name(), Serdes.String().deserializer(), topics.decisions().valueSerde().deserializer());
        commands = driver.createOutputTopic(topics.engineCommands().name(), Serdes.String().deserializer(),
                topics.engineCommands().valueSerde().deserializer());
        deadLetters = driver.createOutputTopic(topics.deadLetters().name(), Serdes.String().deserializer(),
                topics.deadLetters().valueSerde().deserializer());
    }

    /** Pipes {@code event} keyed by its request id at stream time {@code atMs}. */
    public DeciderDriver pipe(long atMs, RequestEvent event) {
        in.pipeInput(event.getRequestId(), event, Instant.ofEpochMilli(atMs));
        return this;
    }

    public DeciderDriver pipeRaw(long atMs, byte[] key, byte[] value) {
        raw.pipeInput(key, value, Instant.ofEpochMilli(atMs));
        return this;
    }

    public DeciderDriver pipeKeyed(long atMs, String key, RequestEvent event) {
        in.pipeInput(key, event, Instant.ofEpochMilli(atMs));
        return this;
    }

    /** Decisions emitted since the last call, in order. */
    public List<Decision> decisions() {
        return decisions.readValuesToList();
    }

    /** (engine id, decision) pairs routed to engines since the last call. */
    public List<KeyValue<String, Decision>> commands() {
        return commands.readKeyValuesToList();
    }

    public List<DeadLetter> deadLetters() {
        return deadLetters.readValuesToList();
    }

    public TopologyTestDriver driver() {
        return driver;
    }

    @Override
    public void close() {
        driver.close();
    }
}
