package io.orbitkv.pd.decider.internal;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.decider.Facts;
import io.orbitkv.pd.decider.RequestStateMachine;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.state.DeciderState;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.processor.api.MockProcessorContext;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

class RequestStoreTest {

    private KeyValueStore<String, DeciderState> below;
    private RequestStore store;

    @BeforeEach
    void open() {
        below = Stores.keyValueStoreBuilder(Stores.inMemoryKeyValueStore("requests"), Serdes.String(),
                EventSerdes.embedded().forType(DeciderState.class)).withLoggingDisabled().withCachingDisabled().build();
        store = new RequestStore(below);
        store.init(new MockProcessorContext<>().getStateStoreContext(), store);
    }

    private static DeciderState state(String id) {
        return new RequestStateMachine(Facts.policy()).onEvent(null, Facts.admitted(id), 1_000).state();
    }

    @Test
    void aPutReachesTheStoreBelowOnlyWhenStreamsFlushesBeforeACommit() {
        DeciderState s = state("r1");
        store.put("r1", s);
        s.setNextTimerMs(42); // the processor mutates live states in place and puts them again
        store.put("r1", s);
        assertThat(below.get("r1")).isNull();
        assertThat(store.dirtyCount()).isEqualTo(1);
        assertThat(store.live("r1")).isSameAs(s);

        store.flushCache();
        assertThat(below.get("r1")).isEqualTo(s);
        assertThat(below.get("r1").getNextTimerMs()).isEqualTo(42);
        assertThat(store.dirtyCount()).isZero();
        assertThat(store.flushes()).isEqualTo(1);
        // Nothing dirty: a flush writes nothing.
        store.flushCache();
        assertThat(store.flushes()).isEqualTo(1);
        // A clean state is still served as the same live object, not deserialized again.
        assertThat(store.live("r1")).isSameAs(s);
    }

    @Test
    void writeBehindWritesTheStatesThatFirstChangedBeforeTheCutoffOldestFirstAndLeavesTheRest() {
        DeciderState a = state("a");
        DeciderState b = state("b");
        DeciderState c = state("c");
        store.put("a", a);
        store.put("b", b);
        long cutoff = System.nanoTime();
        store.put("c", c);
        store.put("a", a); // changed again: keeps its place (first change) in the order
        store.delete("b");

        assertThat(store.writeBehind(cutoff)).isEqualTo(2);
        assertThat(below.get("a")).isEqualTo(a);
        assertThat(below.get("b")).isNull();
        assertThat(below.get("c")).isNull();
        assertThat(store.dirtyCount()).isEqualTo(1);
        assertThat(store.writeBehind(cutoff)).isZero();

        // Written, then changed again: it waits from its new first change, and the commit's flush writes the rest.
        store.put("a", a);
        assertThat(store.writeBehind(cutoff)).isZero();
        store.flushCache();
        assertThat(below.get("c")).isEqualTo(c);
        assertThat(store.dirtyCount()).isZero();
        assertThat(store.writeBehind(System.nanoTime())).isZero();
    }

    /** Acks a test drives by hand: what the stream thread's at-least-once producer reports. */
    private static final class HandAcks implements FlushAtCommitClients.Acks {
        long sent;
        long acknowledged;
        int waits;
        long acknowledgedByWait = -1;

        @Override
        public long sent() {
            return sent;
        }

        @Override
        public long acknowledged() {
            return acknowledged;
        }

        @Override
        public void awaitAll() {
            waits++;
            if (acknowledgedByWait >= 0) {
                acknowledged = acknowledgedByWait;
            }
        }
    }

    @Test
    void atLeastOnceAStateIsWrittenOnlyOnceTheDecisionsItReflectsAreAcknowledged() {
        HandAcks acks = new HandAcks();
        String thread = Thread.currentThread().getName();
        FlushAtCommitClients.register(thread, acks);
        try {
            DeciderState a = state("a");
            DeciderState b = state("b");
            acks.sent = 2; // a's step sent two decisions
            store.put("a", a);
            acks.sent = 5; // b's step three more
            store.put("b", b);
            long cutoff = System.nanoTime();

            // Old enough, but a's decisions are in flight: nothing is written behind (b waits behind a).
            assertThat(store.writeBehind(cutoff)).isZero();
            acks.acknowledged = 2;
            assertThat(store.writeBehind(cutoff)).isEqualTo(1);
            assertThat(below.get("a")).isEqualTo(a);
            assertThat(below.get("b")).isNull();

            // The commit waits for the producer before it writes what is left.
            acks.acknowledgedByWait = 5;
            store.flushCache();
            assertThat(acks.waits).isEqualTo(1);
            assertThat(below.get("b")).isEqualTo(b);
            assertThat(store.dirtyCount()).isZero();

            // Sends after its states' (another task's states, say) do not make the commit wait.
            DeciderState d = state("d");
            acks.sent = 5;
            store.put("d", d);
            acks.sent = 6;
            store.flushCache();
            assertThat(acks.waits).isEqualTo(1);
            assertThat(below.get("d")).isEqualTo(d);

            // A state whose decisions failed (never acknowledged) is not written; the commit after it is refused.
            DeciderState c = state("c");
            acks.sent = 8;
            store.put("c", c);
            acks.acknowledgedByWait = 7;
            store.flushCache();
            assertThat(acks.waits).isEqualTo(2);
            assertThat(below.get("c")).isNull();
            assertThat(store.dirtyCount()).isEqualTo(1);
        } finally {
            FlushAtCommitClients.unregister(thread, acks);
        }
    }

    @Test
    void finishedRequestsAreNotKeptLiveAfterTheFlush() {
        DeciderState s = state("r1");
        s.setPhase(io.orbitkv.pd.state.Phase.COMPLETED);
        store.put("r1", s);
        assertThat(store.live("r1")).isSameAs(s);
        store.flushCache();
        // Read back from the store below: equal, but a new object (the live one may be collected young).
        assertThat(store.live("r1")).isEqualTo(s).isNotSameAs(s);
    }

    @Test
    void queriesGetCopiesOfPendingStatesAndNeverTheLiveObject() {
        DeciderState s = state("r1");
        store.put("r1", s);
        DeciderState q = store.get("r1");
        assertThat(q).isEqualTo(s).isNotSameAs(s);
        s.setNextTimerMs(7);
        assertThat(q.getNextTimerMs()).isNotEqualTo(7);
    }

    @Test
    void deletesAreDeferredToo() {
        store.put("r1", state("r1"));
        store.flushCache();
        assertThat(store.delete("r1")).isNotNull();
        assertThat(store.get("r1")).isNull();
        assertThat(store.live("r1")).isNull();
        assertThat(below.get("r1")).isNotNull();
        store.commit(Map.of()); // a checkpoint's commit writes pending changes as well
        assertThat(below.get("r1")).isNull();
    }

    @Test
    void aRequestThatBeganAndEndedBetweenTwoWritesLeavesNothingBelow() {
        // given a store below that counts the deletes it is asked for (each one is a changelog tombstone)
        int[] deletes = new int[1];
        @SuppressWarnings("unchecked")
        KeyValueStore<String, DeciderState> counting = (KeyValueStore<String, DeciderState>) java.lang.reflect.Proxy.newProxyInstance(
                getClass().getClassLoader(), new Class<?>[] {KeyValueStore.class}, (proxy, method, args) -> {
                    if (method.getName().equals("delete")) {
                        deletes[0]++;
                    }
                    try {
                        return method.invoke(below, args);
                    } catch (java.lang.reflect.InvocationTargetException e) {
                        throw e.getCause();
                    }
                });
        RequestStore s = new RequestStore(counting);
        // when one request is admitted and ends before any write, and another was written before it ended
        s.put("short", state("short"));
        s.delete("short");
        s.put("long", state("long"));
        s.flushCache();
        s.delete("long");
        s.flushCache();
        // then only the one that reached the store below gets a tombstone
        assertThat(deletes[0]).isEqualTo(1);
        assertThat(below.get("short")).isNull();
        assertThat(below.get("long")).isNull();
    }

    @Test
    void allAndRangeLayPendingChangesOverTheStoreBelow() {
        store.putAll(List.of(KeyValue.pair("a", state("a")), KeyValue.pair("c", state("c")), KeyValue.pair("d", state("d"))));
        store.flushCache();
        DeciderState changedC = state("c");
        changedC.setNextTimerMs(99);
        store.put("c", changedC);
        store.put("b", state("b"));
        store.delete("d");

        Map<String, DeciderState> all = new HashMap<>();
        try (KeyValueIterator<String, DeciderState> it = store.all()) {
            it.forEachRemaining(kv -> all.put(kv.key, kv.value));
        }
        assertThat(all).containsOnlyKeys("a", "b", "c");
        assertThat(all.get("c").getNextTimerMs()).isEqualTo(99);
        assertThat(all.get("c")).isNotSameAs(changedC);

        List<String> range = new java.util.ArrayList<>();
        try (KeyValueIterator<String, DeciderState> it = store.range("b", "d")) {
            it.forEachRemaining(kv -> range.add(kv.key));
        }
        assertThat(range).containsExactly("b", "c");
        try (KeyValueIterator<String, DeciderState> it = store.range("b", "d")) {
            assertThat(it.peekNextKey()).isEqualTo("b");
            assertThat(it.next().key).isEqualTo("b");
            assertThat(it.peekNextKey()).isEqualTo("c");
            it.next();
            assertThat(it.hasNext()).isFalse();
            org.assertj.core.api.Assertions.assertThatThrownBy(it::peekNextKey).isInstanceOf(java.util.NoSuchElementException.class);
        }
        assertThat(store.approximateNumEntries()).isGreaterThanOrEqualTo(3);
    }
}
