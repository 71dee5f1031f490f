package io.orbitkv.pd.worker.internal;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.schemas.SerdeConfig;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.consumer.OffsetCommitCallback;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.TimeoutException;
import org.junit.jupiter.api.Test;

/**
 * A Kafka outage longer than the client's API timeout must not end the worker's command loop: every offset commit
 * failing (as during a partition from the brokers) leaves the loop taking commands, and it commits again once Kafka is
 * back. Before the fix the loop's synchronous commit threw a TimeoutException after 60 s and the worker took no more
 * orders for good while its readiness still said ready.
 */
class CommandLoopOutageTest {

    /** A consumer whose commits fail while {@link #down}; counts the attempts. */
    static final class Outage extends MockConsumer<byte[], byte[]> {
        volatile boolean down = true;
        final AtomicInteger attempts = new AtomicInteger();
        final AtomicInteger committed = new AtomicInteger();
        final java.util.concurrent.atomic.AtomicLong offset = new java.util.concurrent.atomic.AtomicLong(-1);

        Outage() {
            super("earliest");
        }

        @Override
        public synchronized void commitSync(Map<TopicPartition, OffsetAndMetadata> offsets) {
            attempts.incrementAndGet();
            if (down) {
                throw new TimeoutException("Timeout of 60000ms expired before successfully committing offsets");
            }
            committed.incrementAndGet();
            offsets.values().forEach(o -> offset.accumulateAndGet(o.offset(), Math::max));
        }

        @Override
        public synchronized void commitSync(Map<TopicPartition, OffsetAndMetadata> offsets, Duration timeout) {
            commitSync(offsets);
        }

        @Override
        public synchronized void commitAsync(Map<TopicPartition, OffsetAndMetadata> offsets, OffsetCommitCallback callback) {
            attempts.incrementAndGet();
            if (down) {
                callback.onComplete(offsets, new TimeoutException("the coordinator is unreachable"));
                return;
            }
            committed.incrementAndGet();
            offsets.values().forEach(o -> offset.accumulateAndGet(o.offset(), Math::max));
            callback.onComplete(offsets, null);
        }
    }

    @Test
    void commitsFailingThroughAnOutageLeaveTheLoopTakingCommands() throws Exception {
        Topics topics = new Topics(TopicsConfig.defaults(), EventSerdes.create(SerdeConfig.embedded()));
        String topic = topics.engineCommands().name();
        Outage consumer = new Outage();
        consumer.updatePartitions(topic, List.of(new PartitionInfo(topic, 0, null, null, null)));
        TopicPartition tp = new TopicPartition(topic, 0);
        consumer.updateBeginningOffsets(Map.of(tp, 0L));
        OrderRunner runner = new OrderRunner("prefill-0", 1, null, List.of(), null, null, "worker-prefill-0", 1, 64, Duration.ofSeconds(1));
        CommandLoop loop = new CommandLoop(consumer, topics.engineCommands(), "prefill-0", runner, null, null, 100, Duration.ofMillis(5));
        loop.position();
        Thread t = Thread.ofPlatform().start(loop);
        try {
            // records for another engine on the same partition: done at once, so there is always an offset to commit
            for (int i = 0; i < 5; i++) {
                consumer.addRecord(new ConsumerRecord<>(topic, 0, i, "decode-9".getBytes(StandardCharsets.UTF_8), new byte[] {1}));
            }
            await("commits fail through the outage").atMost(Duration.ofSeconds(10)).until(() -> consumer.attempts.get() >= 3);
            consumer.addRecord(new ConsumerRecord<>(topic, 0, 5, "decode-9".getBytes(StandardCharsets.UTF_8), new byte[] {1}));
            assertThat(t.isAlive()).as("the loop still runs").isTrue();
            assertThat(loop.failure()).isNull();
            consumer.down = false;
            await("offsets committed once Kafka is back").atMost(Duration.ofSeconds(10)).until(() -> consumer.committed.get() >= 1);
            await("every record's offset committed").atMost(Duration.ofSeconds(10)).until(() -> consumer.offset.get() == 6);
        } finally {
            loop.close();
            t.join(10_000);
            runner.close();
        }
    }
}
