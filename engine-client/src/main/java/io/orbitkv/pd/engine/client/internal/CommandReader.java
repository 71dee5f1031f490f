package io.orbitkv.pd.engine.client.internal;

import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.schemas.EventDecodingException;
import io.orbitkv.pd.schemas.RecordDecoding;
import io.orbitkv.pd.schemas.Topic;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.engine.client.CommandRouting;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Reads the decisions routed to one engine: the partition of {@code engine-commands} its id hashes to (the same
 * partition its transfer worker reads, {@link CommandRouting#partitionFor}), from the end at start — an engine's
 * requests never outlive its instance — skipping other engines' records. Each decision id is delivered once
 * (a bounded memory of recent ids drops the duplicates a restarted decider may re-send). No consumer group: an
 * engine restart is a new instance epoch, so nothing needs committing.
 */
public final class CommandReader implements Runnable, AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(CommandReader.class);
    private static final int DEDUPE = 200_000;

    private final KafkaConsumer<byte[], byte[]> consumer;
    private final Topic<String, Decision> topic;
    private final String engineId;
    private final Sink sink;
    private final Map<String, Boolean> seen = new LinkedHashMap<>(4096, 0.75f, false) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, Boolean> eldest) {
            return size() > DEDUPE;
        }
    };
    private volatile boolean running = true;
    private volatile long delivered;

    /** Where decisions go, with when this engine read them ({@link Marks#nowMicros()} after the poll) and the marks they carry. */
    @FunctionalInterface
    public interface Sink {
        void accept(Decision decision, long receivedMicros, Marks marks);
    }

    /** Where the records of decisions the engine refused go (the dead-letter topic), with why. */
    @FunctionalInterface
    public interface Refusals {
        void refused(ConsumerRecord<byte[], byte[]> record, io.orbitkv.pd.engine.client.RefusedDecision why);
    }

    private final Refusals refusals;

    public CommandReader(KafkaConsumer<byte[], byte[]> consumer, Topic<String, Decision> topic, String engineId, Sink sink, Refusals refusals) {
        this.refusals = refusals;
        this.consumer = consumer;
        this.topic = topic;
        this.engineId = engineId;
        this.sink = sink;
    }

    /** Assigns the engine's partition and fixes the start at its current end. Call before announcing the engine. */
    public TopicPartition position() {
        int n = consumer.partitionsFor(topic.name(), Duration.ofSeconds(30)).size();
        TopicPartition p = new TopicPartition(topic.name(), CommandRouting.partitionFor(engineId, n));
        consumer.assign(List.of(p));
        consumer.seekToEnd(List.of(p));
        long pos = consumer.position(p, Duration.ofSeconds(30));
        log.atInfo().addKeyValue("partition", p).addKeyValue("offset", pos).addKeyValue("engineId", engineId).log("reading engine commands");
        return p;
    }

    @Override
    public void run() {
        try {
            while (running) {
                var records = consumer.poll(Duration.ofMillis(200));
                long received = Marks.nowMicros();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    handle(r, received);
                }
            }
        } catch (WakeupException e) {
            // closing
        } catch (RuntimeException e) {
            log.atError().setCause(e).log("engine command reader stopped: this engine learns no more decisions");
        } finally {
            consumer.close(Duration.ofSeconds(5));
        }
    }

    private void handle(ConsumerRecord<byte[], byte[]> r, long receivedMicros) {
        String key = r.key() == null ? null : new String(r.key(), StandardCharsets.UTF_8);
        if (!engineId.equals(key)) {
            return; // another engine whose id hashes to this partition (its worker dead-letters what is malformed)
        }
        Decision d;
        try {
            d = RecordDecoding.decodeValue(r, topic.valueSerde().deserializer());
        } catch (EventDecodingException e) {
            log.atWarn().addKeyValue("offset", r.offset()).log("skipping an engine command that does not decode (the worker dead-letters it): "
                    + e.getMessage());
            return;
        }
        if (d == null || seen.put(d.getDecisionId(), Boolean.TRUE) != null) {
            return;
        }
        delivered++;
        try {
            sink.accept(d, receivedMicros, Marks.read(r.headers()));
        } catch (io.orbitkv.pd.engine.client.RefusedDecision e) {
            log.atWarn().addKeyValue("requestId", d.getRequestId()).addKeyValue("decisionId", d.getDecisionId()).addKeyValue("offset", r.offset())
                    .log("refused a decision (" + e.code() + "): " + e.getMessage());
            refusals.refused(r, e);
        } catch (RuntimeException e) {
            log.atError().setCause(e).addKeyValue("requestId", d.getRequestId()).addKeyValue("decisionId", d.getDecisionId())
                    .log("acting on a decision failed");
        }
    }

    public long delivered() {
        return delivered;
    }

    @Override
    public void close() {
        running = false;
        consumer.wakeup();
    }
}
