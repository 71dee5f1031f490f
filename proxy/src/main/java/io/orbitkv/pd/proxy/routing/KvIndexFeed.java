package io.orbitkv.pd.proxy.routing;

import io.orbitkv.pd.events.KvCacheEvent;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.config.KafkaClients;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Keeps a {@link KvIndex} of {@code orbitkv.kv-events}: reads every partition from its start (no consumer group: every
 * proxy holds the whole index, and a restarted one rebuilds it by replaying the log), applies each event in order, and
 * says when it has caught up with the end it found at start. A record it cannot decode is counted and skipped (it never
 * stops the feed). Readers ask under the index's lock ({@link #matches}, {@link #snapshot}).
 */
public final class KvIndexFeed implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(KvIndexFeed.class);

    private final KvIndex index = new KvIndex();
    private final KafkaConsumer<String, byte[]> consumer;
    private final Topics topics;
    private final Thread thread;
    private final AtomicLong undecodable = new AtomicLong();
    private volatile boolean closed;
    private volatile boolean caughtUp;
    private Map<TopicPartition, Long> endAtStart;

    public KvIndexFeed(String bootstrapServers, Map<String, Object> overrides, Topics topics, String clientId) {
        this.topics = topics;
        this.consumer = new KafkaConsumer<>(KafkaClients.consumer(bootstrapServers, clientId, null, "read_uncommitted", "earliest", overrides),
                new StringDeserializer(), new ByteArrayDeserializer());
        this.thread = Thread.ofPlatform().daemon().name("kv-index-feed").unstarted(this::run);
    }

    public KvIndexFeed start() {
        thread.start();
        return this;
    }

    private void run() {
        try {
            String topic = topics.kvEvents().name();
            List<TopicPartition> parts = new ArrayList<>();
            for (PartitionInfo p : consumer.partitionsFor(topic, Duration.ofSeconds(30))) {
                parts.add(new TopicPartition(topic, p.partition()));
            }
            consumer.assign(parts);
            consumer.seekToBeginning(parts);
            endAtStart = consumer.endOffsets(parts, Duration.ofSeconds(30));
            while (!closed) {
                var records = consumer.poll(Duration.ofMillis(200));
                synchronized (index) {
                    for (ConsumerRecord<String, byte[]> r : records) {
                        KvCacheEvent e;
                        try {
                            e = topics.kvEvents().valueSerde().deserializer().deserialize(r.topic(), r.value());
                            index.apply(e);
                        } catch (RuntimeException bad) {
                            undecodable.incrementAndGet();
                            log.atWarn().addKeyValue("partition", r.partition()).addKeyValue("offset", r.offset())
                                    .log("KV cache event skipped: " + bad.getMessage());
                        }
                    }
                }
                if (!caughtUp && endAtStart.entrySet().stream().allMatch(en -> consumer.position(en.getKey()) >= en.getValue())) {
                    caughtUp = true;
                    log.atInfo().addKeyValue("entries", index.entries()).log("KV index caught up with the log");
                }
            }
        } catch (org.apache.kafka.common.errors.WakeupException | org.apache.kafka.common.errors.InterruptException e) {
            // closing
        } catch (RuntimeException e) {
            if (!closed) {
                log.atError().setCause(e).log("the KV index feed stopped: prefix-aware routing sees no cache from now on");
            }
        } finally {
            consumer.close(Duration.ofSeconds(2));
        }
    }

    /** Whether the index holds everything the log held when the feed started. */
    public boolean caughtUp() {
        return caughtUp;
    }

    /** Per engine, the longest cached prefix of {@code promptHashes} in blocks. */
    public Map<String, Integer> matches(List<byte[]> promptHashes) {
        synchronized (index) {
            return index.matches(promptHashes);
        }
    }

    /** Blocks the index holds for {@code engineId}. */
    public int blocks(String engineId) {
        synchronized (index) {
            return index.blocks(engineId);
        }
    }

    /** What {@code /kv-index} shows: per engine its blocks and lost events, and the feed's counts. */
    public Map<String, Object> snapshot() {
        synchronized (index) {
            Map<String, Object> engines = new java.util.TreeMap<>();
            for (String id : index.engineIds()) {
                engines.put(id, Map.of("blocks", index.blocks(id), "lost_events", index.gaps(id)));
            }
            return Map.of("caught_up", caughtUp, "applied", index.applied(), "dropped", index.dropped(), "undecodable", undecodable.get(),
                    "entries", index.entries(), "bytes", index.bytes(), "engines", engines);
        }
    }

    @Override
    public void close() {
        closed = true;
        consumer.wakeup();
        try {
            thread.join(5000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
