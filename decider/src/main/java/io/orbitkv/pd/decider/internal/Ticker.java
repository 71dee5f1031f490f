package io.orbitkv.pd.decider.internal;

import io.orbitkv.pd.schemas.config.KafkaClients;
import io.orbitkv.pd.decider.DeciderConfig;
import io.orbitkv.pd.events.EngineEpochChanged;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.Tick;
import io.orbitkv.pd.schemas.EventDecodingException;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.state.DeciderState;
import io.orbitkv.pd.state.HeldPages;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.streams.errors.InvalidStateStoreException;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Turns wall-clock observations into facts in the log, so that the decider itself stays a pure function of the
 * log: a {@link Tick} into each owned partition whose earliest timer is due by the wall clock (so timeouts fire
 * when nothing else arrives), and an {@link EngineEpochChanged} fact for each local request that holds pages on
 * an engine that re-registered with a newer instance epoch or left.
 *
 * <p>Uses its own idempotent, non-transactional producer: a fact written inside the decider's transaction would
 * hold back the last stable offset of the input partition and delay every later fact by a commit interval.
 */
public final class Ticker implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(Ticker.class);
    private static final long WATCH_MS = 10_000;
    private static final long EPOCH_SCAN_EVERY_MS = 500;

    private final DeciderConfig config;
    private final Topics topics;
    private final KafkaStreams streams;
    private final DueTimers dueTimers;
    private final ScheduledExecutorService executor;
    private final Map<String, Long> knownEpochs = new HashMap<>();
    private final Map<String, Long> watchUntil = new HashMap<>();
    private final Set<String> emitted = new HashSet<>();
    private volatile boolean running = true;
    private KafkaProducer<String, RequestEvent> producer;
    private long lastEpochScan;

    public Ticker(DeciderConfig config, Topics topics, KafkaStreams streams, DueTimers dueTimers) {
        this.dueTimers = dueTimers;
        this.config = config;
        this.topics = topics;
        this.streams = streams;
        this.executor = Executors.newSingleThreadScheduledExecutor(Thread.ofPlatform().daemon().name("orbitkv-ticker").factory());
    }

    public void start() {
        producer = new KafkaProducer<>(KafkaClients.factProducer(config.bootstrapServers(), null, KafkaClients.connection(config.kafkaOverrides())),
                topics.requestEvents().keySerde().serializer(), topics.requestEvents().valueSerde().serializer());
        long interval = config.tickInterval().toMillis();
        executor.scheduleWithFixedDelay(this::round, interval, interval, TimeUnit.MILLISECONDS);
    }

    private void round() {
        if (!running || streams.state() != KafkaStreams.State.RUNNING) {
            return;
        }
        try {
            long now = System.currentTimeMillis();
            tickDuePartitions(now);
            if (now - lastEpochScan >= EPOCH_SCAN_EVERY_MS) {
                lastEpochScan = now;
                watchEngineEpochs(now);
            }
        } catch (InvalidStateStoreException e) {
            log.atDebug().log("stores moving (rebalance); ticking again next round");
        } catch (RuntimeException e) {
            log.atWarn().setCause(e).log("ticker round failed; continuing");
        }
    }

    private Set<Integer> localPartitions() {
        Set<Integer> out = new TreeSet<>();
        streams.metadataForLocalThreads().forEach(t -> t.activeTasks().forEach(task -> {
            for (TopicPartition tp : task.topicPartitions()) {
                if (tp.topic().equals(topics.requestEvents().name())) {
                    out.add(tp.partition());
                }
            }
        }));
        return out;
    }

    private void tickDuePartitions(long now) {
        for (int p : localPartitions()) {
            if (dueTimers.due(p, now)) {
                String key = "tick/" + p;
                producer.send(new ProducerRecord<>(topics.requestEvents().name(), p, now, key, RequestEvent.newBuilder()
                        .setRequestId(key).setEventId(key + "/" + now).setSource("decider-ticker").setEventTimeMs(now)
                        .setPayload(Tick.newBuilder().setPartition(p).build()).build()));
            }
        }
    }

    private void watchEngineEpochs(long now) {
        ReadOnlyKeyValueStore<String, byte[]> engines = streams.store(StoreQueryParameters
                .fromNameAndType(DeciderNames.ENGINES_STORE, QueryableStoreTypes.<String, byte[]>keyValueStore()));
        Map<String, EngineRegistration> current = new HashMap<>();
        try (KeyValueIterator<String, byte[]> it = engines.all()) {
            while (it.hasNext()) {
                KeyValue<String, byte[]> kv = it.next();
                try {
                    EngineRegistration r = topics.engines().valueSerde().deserializer().deserialize(topics.engines().name(), kv.value);
                    if (r != null) {
                        current.put(kv.key, r);
                    }
                } catch (EventDecodingException e) {
                    log.atDebug().addKeyValue("engineId", kv.key).log("skipping undecodable registration");
                }
            }
        }
        for (EngineRegistration r : current.values()) {
            Long before = knownEpochs.put(r.getEngineId(), r.getDeregistered() ? Long.MAX_VALUE : r.getInstanceEpoch());
            if (before == null || before < (r.getDeregistered() ? Long.MAX_VALUE : r.getInstanceEpoch())) {
                watchUntil.put(r.getEngineId(), now + WATCH_MS); // recheck a while: stale facts may still be in flight
            }
        }
        watchUntil.values().removeIf(until -> until < now);
        if (watchUntil.isEmpty()) {
            return;
        }
        ReadOnlyKeyValueStore<String, DeciderState> requests = streams.store(StoreQueryParameters
                .fromNameAndType(DeciderNames.REQUESTS_STORE, QueryableStoreTypes.<String, DeciderState>keyValueStore()));
        try (KeyValueIterator<String, DeciderState> it = requests.all()) {
            while (it.hasNext()) {
                DeciderState s = it.next().value;
                check(s, s.getSource(), current, now);
                check(s, s.getDest(), current, now);
            }
        }
    }

    private void check(DeciderState s, HeldPages held, Map<String, EngineRegistration> engines, long now) {
        if (held == null || held.getReleased() || !watchUntil.containsKey(held.getEngineId())) {
            return;
        }
        EngineRegistration r = engines.get(held.getEngineId());
        if (r == null || (!r.getDeregistered() && r.getInstanceEpoch() <= held.getInstanceEpoch())) {
            return;
        }
        String eventId = s.getRequestId() + "/epoch/" + r.getEngineId() + "/" + r.getInstanceEpoch() + (r.getDeregistered() ? "/left" : "");
        if (!emitted.add(eventId)) {
            return;
        }
        if (emitted.size() > 100_000) {
            emitted.clear(); // duplicates are harmless (the decider dedupes by event id); memory is not
        }
        log.atInfo().addKeyValue("requestId", s.getRequestId()).addKeyValue("engineId", r.getEngineId())
                .addKeyValue("instanceEpoch", r.getInstanceEpoch()).log("engine epoch changed under a request");
        producer.send(new ProducerRecord<>(topics.requestEvents().name(), null, now, s.getRequestId(), RequestEvent.newBuilder()
                .setRequestId(s.getRequestId()).setEventId(eventId).setSource("decider-epoch-watch").setEventTimeMs(now)
                .setPayload(EngineEpochChanged.newBuilder().setEngineId(r.getEngineId()).setInstanceEpoch(r.getInstanceEpoch())
                        .setDeregistered(r.getDeregistered()).build()).build()));
    }

    @Override
    public void close() {
        running = false;
        executor.shutdown();
        try {
            executor.awaitTermination(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        if (producer != null) {
            producer.close(java.time.Duration.ofSeconds(5));
        }
    }
}
