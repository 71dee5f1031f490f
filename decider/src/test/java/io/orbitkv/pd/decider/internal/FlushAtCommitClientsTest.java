package io.orbitkv.pd.decider.internal;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.Future;
import java.util.concurrent.atomic.AtomicReference;

import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.clients.consumer.CommitFailedException;
import org.junit.jupiter.api.Test;

/**
 * Which flushes wait and when a commit is refused, without a broker: the clients point at a closed port, so a send
 * fails (no metadata within max.block.ms) through its callback, as a send the broker refused would.
 */
class FlushAtCommitClientsTest {

    private static final String THREAD = "decider-1a2b-StreamThread-1";

    private static Map<String, Object> producerConfig(String clientId, boolean transactional) {
        Map<String, Object> c = new HashMap<>();
        c.put("bootstrap.servers", "127.0.0.1:1");
        c.put("client.id", clientId);
        c.put("linger.ms", 0);
        c.put("request.timeout.ms", 300);
        c.put("delivery.timeout.ms", 400);
        c.put("max.block.ms", 200);
        c.put("reconnect.backoff.ms", 50);
        if (transactional) {
            c.put("transactional.id", "tx-" + clientId);
        }
        return c;
    }

    private static Map<String, Object> consumerConfig(String clientId) {
        Map<String, Object> c = new HashMap<>();
        c.put("bootstrap.servers", "127.0.0.1:1");
        c.put("client.id", clientId);
        c.put("group.id", "g");
        c.put("enable.auto.commit", false);
        return c;
    }

    /** Sends one record that cannot be delivered (no metadata within max.block.ms: its callback gets the error). */
    private static Future<RecordMetadata> sendDoomed(Producer<byte[], byte[]> producer, AtomicReference<Exception> seen) {
        return producer.send(new ProducerRecord<>("t", new byte[] {1}), (m, e) -> seen.set(e));
    }

    @Test
    void threadKeyPairsStreamsClientIdsOnly() {
        assertEquals(THREAD, FlushAtCommitClients.threadKey(Map.of("client.id", THREAD + "-producer"), "-producer"));
        assertEquals(THREAD, FlushAtCommitClients.threadKey(Map.of("client.id", THREAD + "-consumer"), "-consumer"));
        assertNull(FlushAtCommitClients.threadKey(Map.of("client.id", THREAD + "-restore-consumer"), "-consumer"));
        assertNull(FlushAtCommitClients.threadKey(Map.of("client.id", "my-app-producer"), "-producer"));
        assertNull(FlushAtCommitClients.threadKey(Map.of(), "-producer"));
    }

    @Test
    void pairedProducerDefersTheTaskFlushAndTheCommitFlushesAndRefusesAfterAFailedSend() {
        FlushAtCommitClients clients = new FlushAtCommitClients();
        try (Producer<byte[], byte[]> p = clients.getProducer(producerConfig(THREAD + "-producer", false));
             Consumer<byte[], byte[]> consumer = clients.getConsumer(consumerConfig(THREAD + "-consumer"))) {
            var producer = (FlushAtCommitClients.DeferringProducer) p;
            assertEquals(1, clients.pairs());
            // A task's flush does not wait; the commit flushes once, then commits (nothing to commit here).
            producer.flush();
            producer.flush();
            assertEquals(0, producer.flushes());
            consumer.commitSync(Map.of());
            assertEquals(1, producer.flushes());
            // After a failed send (Streams' own callback sees the error too) the commit flushes and commits nothing.
            AtomicReference<Exception> seen = new AtomicReference<>();
            // At-least-once, the thread's acks are registered under its name for the request store.
            assertEquals(producer, FlushAtCommitClients.acksOf(THREAD));
            assertEquals(0, producer.acknowledged());
            sendDoomed(producer, seen);
            assertEquals(1, producer.sent());
            CommitFailedException refused = assertThrows(CommitFailedException.class, () -> consumer.commitSync(Map.of()));
            // The failed send was never acknowledged; the refusal forgets it (the tasks are revived from the last commit).
            assertEquals(producer.sent(), producer.acknowledged());
            assertTrue(refused.getMessage().startsWith("not committing offsets"), refused.getMessage());
            assertInstanceOf(Exception.class, seen.get());
            assertEquals(refused.getCause(), seen.get());
            assertEquals(2, producer.flushes());
            // Streams now re-processes from the last committed offsets; the next commit is judged on its own sends.
            consumer.commitSync(Map.of(), Duration.ofSeconds(1));
            assertEquals(3, producer.flushes());
        }
        assertEquals(0, clients.pairs(), "a closed producer leaves no pair behind");
        assertNull(FlushAtCommitClients.acksOf(THREAD), "nor acks");
    }

    @Test
    void aReplacementThreadReusingTheIndexKeepsItsProducerFlushedWhenTheOldOneCloses() {
        FlushAtCommitClients clients = new FlushAtCommitClients();
        Producer<byte[], byte[]> old = clients.getProducer(producerConfig(THREAD + "-producer", false));
        Consumer<byte[], byte[]> oldConsumer = clients.getConsumer(consumerConfig(THREAD + "-consumer"));
        // Defensive: Streams 4.4 frees a thread index only once the thread is DEAD, after its producer closed, so a
        // replacement with the same client ids cannot register before the old producer unregisters; if a later
        // version changed that order, the replacement's producer must stay registered.
        try (Producer<byte[], byte[]> p = clients.getProducer(producerConfig(THREAD + "-producer", false));
             Consumer<byte[], byte[]> consumer = clients.getConsumer(consumerConfig(THREAD + "-consumer"))) {
            var producer = (FlushAtCommitClients.DeferringProducer) p;
            oldConsumer.close();
            old.close();
            assertEquals(1, clients.pairs());
            producer.flush();
            assertEquals(0, producer.flushes(), "still deferred: its consumer flushes it");
            consumer.commitSync(Map.of());
            assertEquals(1, producer.flushes(), "the commit flushed the replacement's producer");
        }
        assertEquals(0, clients.pairs());
    }

    @Test
    void unpairedProducerFlushesAsUsual() {
        FlushAtCommitClients clients = new FlushAtCommitClients();
        try (Producer<byte[], byte[]> p = clients.getProducer(producerConfig(THREAD + "-producer", false));
             Consumer<byte[], byte[]> other = clients.getConsumer(consumerConfig("decider-1a2b-StreamThread-2-consumer"))) {
            var producer = (FlushAtCommitClients.DeferringProducer) p;
            producer.flush();
            assertEquals(1, producer.flushes());
            other.commitSync(Map.of()); // another thread's consumer does not touch this producer
            assertEquals(1, producer.flushes());
        }
    }

    @Test
    void transactionalProducerSkipsTheTaskFlushAndItsConsumerDoesNotFlushIt() {
        FlushAtCommitClients clients = new FlushAtCommitClients();
        try (Producer<byte[], byte[]> p = clients.getProducer(producerConfig(THREAD + "-producer", true));
             Consumer<byte[], byte[]> consumer = clients.getConsumer(consumerConfig(THREAD + "-consumer"))) {
            var producer = (FlushAtCommitClients.DeferringProducer) p;
            assertNull(FlushAtCommitClients.acksOf(THREAD), "the transaction makes states and decisions land together");
            producer.flush();
            consumer.commitSync(Map.of());
            assertEquals(0, producer.flushes(), "commitTransaction flushes a transactional producer itself");
        }
    }

    @Test
    void restoreAndGlobalConsumersArePlain() {
        FlushAtCommitClients clients = new FlushAtCommitClients();
        try (Consumer<byte[], byte[]> restore = clients.getRestoreConsumer(consumerConfig(THREAD + "-restore-consumer"))) {
            assertFalse(restore instanceof FlushAtCommitClients.FlushingConsumer);
        }
        assertEquals(0, clients.pairs());
    }
}
