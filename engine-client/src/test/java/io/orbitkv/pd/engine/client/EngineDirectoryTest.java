package io.orbitkv.pd.engine.client;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.Topic;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.MockConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** The engines table read through a mock consumer: what {@code await} answers while an engine restarts. */
class EngineDirectoryTest {

    private final Topic<String, EngineRegistration> topic =
            new Topics(new TopicsConfig("t", 1, (short) 1, Duration.ofHours(1)), EventSerdes.embedded()).engines();
    private final TopicPartition partition = new TopicPartition(topic.name(), 0);
    private final MockConsumer<byte[], byte[]> consumer = new MockConsumer<>("earliest");
    private final EngineDirectory directory = new EngineDirectory(consumer, topic, engine -> { });
    private long offset;

    @AfterEach
    void close() {
        directory.close();
    }

    private void start() throws InterruptedException {
        consumer.updatePartitions(topic.name(), List.of(new PartitionInfo(topic.name(), 0, null, null, null)));
        consumer.updateBeginningOffsets(Map.of(partition, 0L));
        consumer.updateEndOffsets(Map.of(partition, 0L));
        Thread.ofPlatform().daemon().start(directory);
        assertThat(directory.awaitCaughtUp(Duration.ofSeconds(10))).isTrue();
    }

    private void write(long instanceEpoch, boolean deregistered) {
        EngineRegistration r = EngineRegistration.newBuilder().setEngineId("decode-0").setRole(EngineRole.DECODE).setInstanceEpoch(instanceEpoch)
                .setModel("m").setHttpUrl("http://decode-0").setEndpoints(List.of()).setRegions(List.of()).setRegisteredAtMs(offset)
                .setDeregistered(deregistered)
                .setLayout(new KvGeometry(2, KvSplit.SEPARATE, 16, 8, 128, Dtype.BF16, 32 * 1024, 64).toLayout(0, 1)).build();
        consumer.schedulePollTask(() -> consumer.addRecord(new ConsumerRecord<>(topic.name(), 0, offset++,
                "decode-0".getBytes(StandardCharsets.UTF_8), topic.valueSerde().serializer().serialize(topic.name(), r))));
    }

    @Test
    void anOrderForAnEngineThatLeftIsAnsweredAtOnceWithItsGoodbye() throws Exception {
        start();
        write(401, false);
        write(401, true);
        await().atMost(Duration.ofSeconds(10)).until(() -> directory.get("decode-0").map(EngineRegistration::getDeregistered).orElse(false));

        long t0 = System.nanoTime();
        EngineRegistration r = directory.await("decode-0", 401, Duration.ofSeconds(10)).orElseThrow();
        assertThat(r.getDeregistered()).isTrue();
        assertThat(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0)).isLessThan(5_000);
    }

    @Test
    void theGoodbyeOfAnOlderInstanceDoesNotAnswerAnOrderForTheNewOne() throws Exception {
        start();
        write(401, false);
        write(401, true);
        await().atMost(Duration.ofSeconds(10)).until(() -> directory.get("decode-0").map(EngineRegistration::getDeregistered).orElse(false));

        // The new instance's registration is not read yet: the wait runs its course, then says what is known.
        long t0 = System.nanoTime();
        EngineRegistration known = directory.await("decode-0", 402, Duration.ofMillis(300)).orElseThrow();
        assertThat(TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t0)).as("waited for instance 402").isGreaterThanOrEqualTo(300);
        assertThat(known.getInstanceEpoch()).isEqualTo(401);

        // Once it is read, the waiting order gets it.
        CompletableFuture<EngineRegistration> waiting = CompletableFuture.supplyAsync(() -> {
            try {
                return directory.await("decode-0", 402, Duration.ofSeconds(30)).orElseThrow();
            } catch (InterruptedException e) {
                throw new IllegalStateException(e);
            }
        });
        write(402, false);
        EngineRegistration r = waiting.get(30, TimeUnit.SECONDS);
        assertThat(r.getInstanceEpoch()).isEqualTo(402);
        assertThat(r.getDeregistered()).isFalse();
    }
}
