package io.orbitkv.pd.engine.client;

import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.schemas.EngineRegistrations;
import io.orbitkv.pd.schemas.EventDecodingException;
import io.orbitkv.pd.schemas.RecordDecoding;
import io.orbitkv.pd.schemas.Topic;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.function.Consumer;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The engines table as this worker sees it: the latest registration per engine, read from the compacted engines
 * topic from its beginning. Where peers accept pushes (endpoints), their layouts and instance epochs come from here.
 * When a peer's registration changes (new instance epoch, other endpoints, or it left), {@code onChange} runs so
 * transports drop what they cached for it. A registration that does not decode, or that {@link EngineRegistrations#check}
 * refuses (another engine than its key, an invalid layout, an older instance epoch than the one taken), is skipped and
 * handed to {@code onRefused} with {@code live} true once the table was read to its end when the directory started (so a
 * reader can dead-letter what arrives while it runs without dead-lettering the same old records on every start).
 */
public final class EngineDirectory implements Runnable, AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(EngineDirectory.class);

    private final org.apache.kafka.clients.consumer.Consumer<byte[], byte[]> consumer;
    private final Topic<String, EngineRegistration> topic;
    private final Consumer<String> onChange;
    private volatile Refused onRefused = (r, type, reason, live) -> { };
    private final Map<String, EngineRegistration> latest = new ConcurrentHashMap<>();
    private final CountDownLatch caughtUp = new CountDownLatch(1);
    private volatile boolean running = true;

    public EngineDirectory(org.apache.kafka.clients.consumer.Consumer<byte[], byte[]> consumer, Topic<String, EngineRegistration> topic, Consumer<String> onChange) {
        this.consumer = consumer;
        this.topic = topic;
        this.onChange = onChange;
    }

    /** Hears of every registration the directory refused. */
    @FunctionalInterface
    public interface Refused {
        /**
         * @param record    the record as read
         * @param errorType as on the dead-letter topic
         * @param reason    for a user
         * @param live      written after the directory caught up with the table (not an old record read again)
         */
        void refused(ConsumerRecord<byte[], byte[]> record, String errorType, String reason, boolean live);
    }

    /** Sets who hears of refused registrations (one listener; must not throw). */
    public EngineDirectory onRefused(Refused listener) {
        this.onRefused = java.util.Objects.requireNonNull(listener, "listener");
        return this;
    }

    private void refuse(ConsumerRecord<byte[], byte[]> r, String type, String reason) {
        log.atWarn().addKeyValue("offset", r.offset()).addKeyValue("errorType", type).log("engine registration refused: " + reason);
        try {
            onRefused.refused(r, type, reason, caughtUp.getCount() == 0);
        } catch (RuntimeException e) {
            log.atError().setCause(e).log("handling a refused registration failed");
        }
    }

    @Override
    public void run() {
        try {
            List<TopicPartition> parts = consumer.partitionsFor(topic.name(), Duration.ofSeconds(30)).stream()
                    .map(p -> new TopicPartition(p.topic(), p.partition())).toList();
            consumer.assign(parts);
            consumer.seekToBeginning(parts);
            Map<TopicPartition, Long> end = consumer.endOffsets(parts, Duration.ofSeconds(30));
            while (running) {
                for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                    apply(r);
                }
                if (caughtUp.getCount() > 0 && end.entrySet().stream().allMatch(e -> consumer.position(e.getKey()) >= e.getValue())) {
                    caughtUp.countDown();
                }
            }
        } catch (WakeupException e) {
            // closing
        } catch (RuntimeException e) {
            if (running) {
                log.atError().setCause(e).log("engine directory stopped: peers' registrations no longer update");
            }
        } finally {
            consumer.close(CloseOptions.timeout(Duration.ofSeconds(5)));
        }
    }

    private void apply(ConsumerRecord<byte[], byte[]> r) {
        String key = r.key() == null ? null : new String(r.key(), StandardCharsets.UTF_8);
        if (r.value() == null) {
            if (key != null && latest.remove(key) != null) {
                changed(key);
            }
            return;
        }
        EngineRegistration reg;
        try {
            reg = RecordDecoding.decodeValue(r, topic.valueSerde().deserializer());
        } catch (EventDecodingException e) {
            refuse(r, "UNDECODABLE", "engine registration does not decode: " + e.getMessage());
            return;
        }
        EngineRegistration prev = key == null ? null : latest.get(key);
        EngineRegistrations.Refusal bad = EngineRegistrations.check(key, reg, prev);
        if (bad != null) {
            refuse(r, bad.errorType(), bad.reason());
            return;
        }
        latest.put(key, reg);
        if (prev != null && (prev.getInstanceEpoch() != reg.getInstanceEpoch() || !Objects.equals(prev.getEndpoints(), reg.getEndpoints())
                || reg.getDeregistered())) {
            log.atInfo().addKeyValue("engineId", key).addKeyValue("instanceEpoch", reg.getInstanceEpoch())
                    .addKeyValue("deregistered", reg.getDeregistered()).log("engine re-registered: dropping cached endpoints");
            changed(key);
        }
        synchronized (this) {
            notifyAll();
        }
    }

    private void changed(String engineId) {
        try {
            onChange.accept(engineId);
        } catch (RuntimeException e) {
            log.atError().setCause(e).addKeyValue("engineId", engineId).log("dropping cached endpoints failed");
        }
    }

    /** True once the table was read up to where it ended when the worker started. */
    public boolean awaitCaughtUp(Duration timeout) throws InterruptedException {
        return caughtUp.await(timeout.toMillis(), TimeUnit.MILLISECONDS);
    }

    public Optional<EngineRegistration> get(String engineId) {
        return Optional.ofNullable(latest.get(engineId));
    }

    /**
     * The engine's registration once it has at least {@code minEpoch} (registered or left at that epoch), waiting up to
     * {@code timeout} for it to appear; whatever is known then otherwise. A goodbye of an older instance does not end the
     * wait: an order naming a newer instance was issued on that instance's registration, which this table has not read yet
     * (an engine restarting says goodbye, then registers again).
     */
    public Optional<EngineRegistration> await(String engineId, long minEpoch, Duration timeout) throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        synchronized (this) {
            while (true) {
                EngineRegistration r = latest.get(engineId);
                if (r != null && r.getInstanceEpoch() >= minEpoch) {
                    return Optional.of(r);
                }
                long left = deadline - System.nanoTime();
                if (left <= 0 || !running) {
                    return Optional.ofNullable(r);
                }
                TimeUnit.NANOSECONDS.timedWait(this, Math.min(left, TimeUnit.MILLISECONDS.toNanos(200)));
            }
        }
    }

    @Override
    public void close() {
        running = false;
        consumer.wakeup();
        synchronized (this) {
            notifyAll();
        }
    }
}
