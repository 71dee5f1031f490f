package io.orbitkv.pd.dashboard;

import io.orbitkv.pd.dashboard.internal.DashboardNames;
import io.orbitkv.pd.dashboard.internal.StatsObserver;
import io.orbitkv.pd.dashboard.internal.StatsProcessor;
import io.orbitkv.pd.dashboard.stats.AggregateCodec;
import io.orbitkv.pd.dashboard.stats.StatsWindow;
import io.orbitkv.pd.schemas.Topics;
import java.time.Duration;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.state.Stores;

/**
 * The dashboard's topology, built by a pure function: the decisions and request-events topics (co-partitioned: both
 * keyed by request id with the same partition count, so one task sees a request's decisions and facts) read as
 * bytes into one processor that keeps, per task, partial statistics in 1 s and 1 min tumbling window stores; a
 * dead-letter sink for records that do not decode.
 *
 * <p>Why per-task partials and not a DSL {@code groupBy(constant).windowedBy(...)}: grouping every record under one
 * key repartitions the whole stream through one partition (one more hop through the broker, which is the budget on
 * small machines, and one task doing all the work). Every statistic here is mergeable by addition (counters, fixed
 * bucket histograms), so each task aggregates its own partitions and a query merges the partials of every task of
 * every instance, like {@code GET /states} of the decider sums its instances.
 */
public final class DashboardTopology {

    public static final String SOURCE = DashboardNames.SOURCE;
    public static final String PROCESSOR = DashboardNames.PROCESSOR;
    public static final String DEAD_LETTER_SINK = DashboardNames.DEAD_LETTER_SINK;
    public static final String ORDERS_STORE = DashboardNames.ORDERS_STORE;
    public static final String INFLIGHT_STORE = DashboardNames.INFLIGHT_STORE;
    public static final String FAILURES_STORE = DashboardNames.FAILURES_STORE;
    /** Per request: the timing marks that start or end a hop between two records, until the other end is read. */
    public static final String HOPS_STORE = DashboardNames.HOPS_STORE;

    private DashboardTopology() { }

    public static Topology build(DashboardConfig config, Topics topics) {
        return build(config, topics, StatsObserver.NONE);
    }

    public static Topology build(DashboardConfig config, Topics topics, StatsObserver observer) {
        Topology t = new Topology();
        t.addSource(SOURCE, Serdes.ByteArray().deserializer(), Serdes.ByteArray().deserializer(), topics.decisions().name(),
                topics.requestEvents().name());
        t.addProcessor(PROCESSOR, () -> new StatsProcessor(config, topics, observer), SOURCE);
        for (StatsWindow w : StatsWindow.values()) {
            Duration retention = w == StatsWindow.ONE_SECOND ? config.retentionSeconds() : config.retentionMinutes();
            t.addStateStore(Stores.windowStoreBuilder(
                            Stores.inMemoryWindowStore(w.storeName(), retention, Duration.ofMillis(w.sizeMs()), false),
                            Serdes.String(), AggregateCodec.serde())
                    .withCachingEnabled(), PROCESSOR);
        }
        for (String name : new String[] {ORDERS_STORE, INFLIGHT_STORE, FAILURES_STORE, HOPS_STORE}) {
            t.addStateStore(Stores.keyValueStoreBuilder(Stores.inMemoryKeyValueStore(name), Serdes.String(), Serdes.String())
                    .withCachingEnabled(), PROCESSOR);
        }
        t.addSink(DEAD_LETTER_SINK, topics.deadLetters().name(), topics.deadLetters().keySerde().serializer(),
                topics.deadLetters().valueSerde().serializer(), PROCESSOR);
        return t;
    }
}
