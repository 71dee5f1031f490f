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
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Keeps a {@link KvIndex} of {@code orbitkv.kv-events}: reads every partition from its start (no consumer group: every
 * proxy holds the whole index, and a restarted one rebuilds it by replaying the log), applies each event in order, and
 * says when it has caught up with the end it found at start. A record it cannot use — undecodable, of an engine that
 * never registered, with a malformed hash or a block size other than the engine's registered layout ({@link #problem}) —
 * goes to the dead-letter topic with the reason, is counted and skipped: it never stops the feed and never changes the
 * index. Readers ask under the index's lock ({@link #matches}, {@link #snapshot}).
 */
public final class KvIndexFeed implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(KvIndexFeed.class);

    private final KvIndex index = new KvIndex();
    private final KafkaConsumer<byte[], byte[]> consumer;
    private final Topics topics;
    private final Thread thread;
    private final AtomicLong undecodable = new AtomicLong();
    private final AtomicLong refused = new AtomicLong();
    /** Every engine registered (deregistered ones too: their old events are no one's mistake) by id, with its block size (0: unknown); null: not known yet. */
    private final java.util.function.Supplier<Map<String, Integer>> registered;
    private final java.util.function.Consumer<io.orbitkv.pd.events.DeadLetter> deadLetters;
    private final String component;
    /** Decodes only what the index keys by (the serde's full decode when the topic's serde is not Avro's). */
    private final java.util.function.BiFunction<String, byte[], KvCacheEvent> decode;
    private volatile boolean closed;
    private volatile boolean caughtUp;
    private Map<TopicPartition, Long> endAtStart;

    public KvIndexFeed(String bootstrapServers, Map<String, Object> overrides, Topics topics, String clientId) {
        this(bootstrapServers, overrides, topics, clientId, () -> null, dl -> { }, "proxy");
    }

    /**
     * @param registered  the engines registered now with their block sizes (null until known: nothing is judged unknown)
     * @param deadLetters where refused records go
     * @param component   who refuses them ({@code proxy:<id>})
     */
    public KvIndexFeed(String bootstrapServers, Map<String, Object> overrides, Topics topics, String clientId,
                       java.util.function.Supplier<Map<String, Integer>> registered, java.util.function.Consumer<io.orbitkv.pd.events.DeadLetter> deadLetters,
                       String component) {
        this.registered = registered;
        this.deadLetters = deadLetters;
        this.component = component;
        this.topics = topics;
        this.decode = topics.kvEvents().valueSerde() instanceof io.orbitkv.pd.schemas.AvroEventSerde<KvCacheEvent> avro
                ? new KvEventDecoder(avro)::decode : topics.kvEvents().valueSerde().deserializer()::deserialize;
        this.consumer = new KafkaConsumer<>(KafkaClients.consumer(bootstrapServers, clientId, null, "read_uncommitted", "earliest", overrides),
                new ByteArrayDeserializer(), new ByteArrayDeserializer());
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
                    for (ConsumerRecord<byte[], byte[]> r : records) {
                        KvCacheEvent e;
                        try {
                            e = r.value() == null ? null : decode.apply(r.topic(), r.value());
                        } catch (RuntimeException bad) {
                            undecodable.incrementAndGet();
                            refuse(r, "UNDECODABLE", bad.getMessage());
                            continue;
                        }
                        String[] why = e == null ? new String[] {"UNDECODABLE", "null value (a tombstone): not a KV cache event"}
                                : problem(e, registered.get());
                        if (why != null) {
                            refused.incrementAndGet();
                            refuse(r, why[0], why[1]);
                            continue;
                        }
                        index.apply(e);
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

    private void refuse(ConsumerRecord<byte[], byte[]> r, String type, String reason) {
        log.atWarn().addKeyValue("partition", r.partition()).addKeyValue("offset", r.offset()).log("KV cache event refused (" + type + "): " + reason);
        deadLetters.accept(io.orbitkv.pd.schemas.RecordDecoding.deadLetter(component, r, type, reason, System.currentTimeMillis()));
    }

    /**
     * Why the index cannot use {@code e} as {@code [error type, reason]}, or null: an engine not in {@code registered} (when
     * known; {@code UNKNOWN_ENGINE}), a block hash shorter than the 8 bytes the index keys by ({@code MALFORMED_HASH}), a
     * block size other than the engine's registered layout's or token ids that are not {@code block_size} per hash
     * ({@code BLOCK_SIZE_MISMATCH}, {@code OUT_OF_BOUNDS}).
     */
    static String[] problem(KvCacheEvent e, Map<String, Integer> registered) {
        Integer blockSize = registered == null ? null : registered.get(e.getEngineId());
        if (registered != null && blockSize == null) {
            return new String[] {"UNKNOWN_ENGINE", "engine_id: '" + e.getEngineId() + "' never registered (orbitkv.engines): its cache is no engine's"};
        }
        List<java.nio.ByteBuffer> hashes = switch (e.getPayload()) {
            case io.orbitkv.pd.events.BlockStored s -> s.getBlockHashes();
            case io.orbitkv.pd.events.BlockRemoved rm -> rm.getBlockHashes();
            default -> List.of();
        };
        for (int i = 0; i < hashes.size(); i++) {
            if (hashes.get(i).remaining() < 8) {
                return new String[] {"MALFORMED_HASH", "block_hashes[" + i + "]: " + hashes.get(i).remaining() + " bytes; a block hash has at least 8"};
            }
        }
        if (e.getPayload() instanceof io.orbitkv.pd.events.BlockStored s) {
            if (blockSize != null && blockSize > 0 && s.getBlockSize() != blockSize) {
                return new String[] {"BLOCK_SIZE_MISMATCH", "block_size: " + s.getBlockSize() + " tokens, engine " + e.getEngineId()
                        + "'s registered layout has " + blockSize + "-token blocks"};
            }
            // token ids are left undecoded by the feed (KvEventDecoder): checked when present
            if (s.getBlockSize() < 1 || (!s.getTokenIds().isEmpty() && (long) s.getBlockSize() * hashes.size() != s.getTokenIds().size())) {
                return new String[] {"OUT_OF_BOUNDS", "token_ids: " + s.getTokenIds().size() + " for " + hashes.size() + " blocks of " + s.getBlockSize()
                        + " tokens"};
            }
        }
        return null;
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
                    "refused", refused.get(), "entries", index.entries(), "bytes", index.bytes(), "engines", engines);
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
