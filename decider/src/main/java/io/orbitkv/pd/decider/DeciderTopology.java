package io.orbitkv.pd.decider;

import io.orbitkv.pd.decider.internal.DeciderNames;
import io.orbitkv.pd.decider.internal.DeciderProcessor;
import io.orbitkv.pd.decider.internal.DueTimers;
import io.orbitkv.pd.decider.internal.EngineTableProcessor;
import io.orbitkv.pd.decider.internal.RequestStore;
import io.orbitkv.pd.decider.internal.Ticker;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.state.DeciderState;
import java.time.Duration;
import java.util.Map;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.state.KeyValueBytesStoreSupplier;
import org.apache.kafka.streams.state.Stores;

/**
 * The decider's topology, built by a pure function: one co-partitioned input (request events, read as bytes so a
 * bad record is dead-lettered instead of stopping the app), one processor that runs {@link RequestStateMachine}
 * per request, and three sinks (decisions by request, the same decisions by engine, dead letters). Engines are
 * a global table used for interactive queries and the engine-epoch watch.
 *
 * <p>Why the Processor API and not the DSL: the decider needs per-request state, a timer index advanced by
 * stream time and several outputs per input in one step; a DSL join would buffer in windows and add a
 * repartition, and expresses neither timers nor the dead-letter path. Names of every node and store are fixed
 * here so changelog topics survive refactors.
 */
public final class DeciderTopology {

    public static final String SOURCE = DeciderNames.SOURCE;
    public static final String PROCESSOR = DeciderNames.PROCESSOR;
    public static final String DECISIONS_SINK = DeciderNames.DECISIONS_SINK;
    public static final String COMMANDS_SINK = DeciderNames.COMMANDS_SINK;
    public static final String DEAD_LETTER_SINK = DeciderNames.DEAD_LETTER_SINK;
    public static final String REQUESTS_STORE = DeciderNames.REQUESTS_STORE;
    public static final String LOAD_STORE = DeciderNames.LOAD_STORE;
    public static final String ENGINES_STORE = DeciderNames.ENGINES_STORE;

    private DeciderTopology() { }

    /**
     * Streams' record cache in front of the request store, when states are written only at commits
     * ({@code decider.store.write-behind=0}): it folds a request's several writes within a commit into one. With
     * write-behind on (the default) there is no cache unless {@code kafka.statestore.cache.max.bytes} asks for one: it
     * would hold the written states until the commit and make the commit do all the writing again. Measurements:
     * docs/decider.md, "Stores".
     */
    public static final long DEFAULT_STORE_CACHE_BYTES = 16L << 20;

    public static Topology build(DeciderConfig config, Topics topics) {
        return build(config, topics, DeciderMetrics.noop());
    }

    /** As {@link #build(DeciderConfig, Topics)}, counting into {@code metrics} (the process's registry). */
    public static Topology build(DeciderConfig config, Topics topics, DeciderMetrics metrics) {
        return build(config, topics, metrics, new DueTimers());
    }

    /** As {@link #build(DeciderConfig, Topics, DeciderMetrics)}, publishing due timers for the {@link Ticker}. */
    public static Topology build(DeciderConfig config, Topics topics, DeciderMetrics metrics, DueTimers dueTimers) {
        return build(config.policy(), config.store(), topics, storeCacheBytes(config) > 0, metrics, dueTimers, config.storeWriteBehind());
    }

    /**
     * The record cache size for this config: {@code kafka.statestore.cache.max.bytes}, else none with write-behind
     * on and the default with it off.
     */
    public static long storeCacheBytes(DeciderConfig config) {
        Object cache = config.kafkaOverrides().get(org.apache.kafka.streams.StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG);
        try {
            if (cache == null) {
                return config.storeWriteBehind().isZero() ? DEFAULT_STORE_CACHE_BYTES : 0;
            }
            return Long.parseLong(cache.toString().strip());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException("kafka.statestore.cache.max.bytes: must be a number of bytes, got '" + cache + "'");
        }
    }

    public static Topology build(DeciderPolicy policy, DeciderConfig.StoreKind store, Topics topics) {
        return build(policy, store, topics, false);
    }

    /**
     * @param storeCache put Streams' record cache in front of the request store: the changelog and RocksDB then get
     *                   one write per request per commit instead of one per fact (off by default; the cache size is
     *                   {@code kafka.statestore.cache.max.bytes})
     */
    public static Topology build(DeciderPolicy policy, DeciderConfig.StoreKind store, Topics topics, boolean storeCache) {
        return build(policy, store, topics, storeCache, DeciderMetrics.noop());
    }

    /** As {@link #build(DeciderPolicy, DeciderConfig.StoreKind, Topics, boolean)}, counting into {@code metrics}. */
    public static Topology build(DeciderPolicy policy, DeciderConfig.StoreKind store, Topics topics, boolean storeCache,
                                 DeciderMetrics metrics) {
        return build(policy, store, topics, storeCache, metrics, new DueTimers(), Duration.ZERO);
    }

    /**
     * As above, publishing each partition's earliest timer to {@code dueTimers} (for the {@link Ticker}) and writing
     * changed request states to the store once they are {@code writeBehind} old (0: at commits only; see
     * {@link RequestStore#writeBehind(long)}).
     */
    public static Topology build(DeciderPolicy policy, DeciderConfig.StoreKind store, Topics topics, boolean storeCache,
                                 DeciderMetrics metrics, DueTimers dueTimers, Duration writeBehind) {
        Serde<DeciderState> stateSerde = EventSerdes.embedded().forType(DeciderState.class);
        Topology t = new Topology();
        t.addSource(SOURCE, Serdes.ByteArray().deserializer(), Serdes.ByteArray().deserializer(), topics.requestEvents().name());
        t.addProcessor(PROCESSOR, () -> new DeciderProcessor(policy, topics, metrics, dueTimers), SOURCE);
        var requests = Stores.keyValueStoreBuilder(supplier(store, REQUESTS_STORE), Serdes.String(), stateSerde).withLoggingEnabled(Map.of());
        // Live state objects in front of the store, written behind and at commits (RequestStore), then the record cache
        // when there is one.
        t.addStateStore(RequestStore.builder(storeCache ? requests.withCachingEnabled() : requests.withCachingDisabled(), writeBehind), PROCESSOR);
        // Derived from the request states and rebuilt when a task starts: in memory, no changelog. A store (not a field
        // of the processor, as the timer index is) because the HTTP API reads it from other threads.
        t.addStateStore(Stores.keyValueStoreBuilder(Stores.inMemoryKeyValueStore(LOAD_STORE), Serdes.String(), Serdes.Long())
                .withCachingDisabled().withLoggingDisabled(), PROCESSOR);
        // Decisions arrive serialized: the processor encodes each decision once per topic, not once per copy.
        t.addSink(DECISIONS_SINK, topics.decisions().name(), topics.decisions().keySerde().serializer(),
                Serdes.ByteArray().serializer(), PROCESSOR);
        t.addSink(COMMANDS_SINK, topics.engineCommands().name(), topics.engineCommands().keySerde().serializer(),
                Serdes.ByteArray().serializer(), PROCESSOR);
        t.addSink(DEAD_LETTER_SINK, topics.deadLetters().name(), topics.deadLetters().keySerde().serializer(),
                topics.deadLetters().valueSerde().serializer(), PROCESSOR);
        // The global store keeps the topic's raw bytes: restoration copies the topic into the store without running
        // the processor, so both paths must store the same thing; readers decode (and skip what does not decode).
        t.addGlobalStore(Stores.keyValueStoreBuilder(Stores.inMemoryKeyValueStore(ENGINES_STORE), Serdes.String(),
                        Serdes.ByteArray()).withLoggingDisabled(),
                "engines-source", Serdes.String().deserializer(), Serdes.ByteArray().deserializer(), topics.engines().name(),
                "engines-table", () -> new EngineTableProcessor(topics));
        return t;
    }

    private static KeyValueBytesStoreSupplier supplier(DeciderConfig.StoreKind kind, String name) {
        return kind == DeciderConfig.StoreKind.IN_MEMORY ? Stores.inMemoryKeyValueStore(name) : Stores.persistentKeyValueStore(name);
    }

}
