package io.orbitkv.pd.worker.internal;

import io.orbitkv.pd.events.AbortTransfer;
import io.orbitkv.pd.engine.client.CommandRouting;
import io.orbitkv.pd.engine.client.api.ApiProtocol;
import io.orbitkv.pd.tracing.TraceContext;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.RecomputeDecided;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.schemas.EventDecodingException;
import io.orbitkv.pd.schemas.RecordDecoding;
import io.orbitkv.pd.schemas.Topic;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceHeaders;
import io.orbitkv.pd.transport.PushGate;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.Consumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Reads the decisions routed to this worker's engine and acts on them.
 *
 * <p>How orders reach the right worker: the decider writes every decision an engine must act on to
 * {@code engine-commands} keyed by that engine's id, so Kafka's default partitioner puts all of them in partition
 * {@code murmur2(engine id) mod partitions}. The worker computes that partition and {@code assign}s itself to it
 * alone — no consumer-group rebalancing when workers come and go — and skips the records of other engines that
 * hash to the same partition. Offsets are committed under the worker's own group id only once each record's effect
 * is durable.
 *
 * <p>Acts on: {@code TransferOrder} (source = this engine: execute), {@code AbortTransfer} (source: cancel the
 * push; destination: fence the attempt at the gate), {@code ReleaseDecided} of DECODE pages with a lease (fence the
 * lease: no late push may land in pages that will be reused), {@code RecomputeDecided} (fence the request's pushes).
 * A record that does not decode, or that names another engine than its key, goes to the dead-letter topic.
 */
public final class CommandLoop implements Runnable, AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(CommandLoop.class);

    private final Consumer<byte[], byte[]> consumer;
    private final Topic<String, Decision> topic;
    private final String engineId;
    private final OrderRunner runner;
    private final PushGate gate;
    private final EventReporter reporter;
    private final int queueLimit;
    private final Duration commitInterval;
    private final EngineSink engineSink;
    private final OffsetTracker offsets = new OffsetTracker();
    private TopicPartition partition;
    private volatile boolean running = true;
    private volatile boolean positioned;
    /** Why the loop stopped taking commands, or null while it runs. */
    private volatile String failure;
    /** Whether the last offset commit failed (logged once per outage, not once per interval). */
    private volatile boolean commitFailing;

    /** Where the engine's own decisions go when the engine is on the worker's engine API (after the worker acted on them). */
    @FunctionalInterface
    public interface EngineSink {
        void publish(Decision decision, TraceContext trace, Marks marks, long receivedMicros);
    }

    public CommandLoop(Consumer<byte[], byte[]> consumer, Topic<String, Decision> topic, String engineId, OrderRunner runner, PushGate gate,
                       EventReporter reporter, int queueLimit, Duration commitInterval) {
        this(consumer, topic, engineId, runner, gate, reporter, queueLimit, commitInterval, null);
    }

    /** {@code engineSink}: the engine API's, or null when the engine reads its decisions from Kafka itself. */
    public CommandLoop(Consumer<byte[], byte[]> consumer, Topic<String, Decision> topic, String engineId, OrderRunner runner, PushGate gate,
                       EventReporter reporter, int queueLimit, Duration commitInterval, EngineSink engineSink) {
        this.engineSink = engineSink;
        this.consumer = consumer;
        this.topic = topic;
        this.engineId = engineId;
        this.runner = runner;
        this.gate = gate;
        this.reporter = reporter;
        this.queueLimit = queueLimit;
        this.commitInterval = commitInterval;
    }

    /**
     * Assigns the engine's partition and fixes the start position (the committed offset, else the end of the
     * partition: orders written before this worker's engine existed are not for it). Call before announcing the
     * engine, so no order issued after the announcement can be missed.
     */
    public TopicPartition position() {
        int n = consumer.partitionsFor(topic.name(), Duration.ofSeconds(30)).size();
        partition = new TopicPartition(topic.name(), CommandRouting.partitionFor(engineId, n));
        consumer.assign(List.of(partition));
        long pos = consumer.position(partition, Duration.ofSeconds(30));
        positioned = true;
        log.atInfo().addKeyValue("partition", partition).addKeyValue("offset", pos).addKeyValue("engineId", engineId)
                .log("reading engine commands");
        return partition;
    }

    public boolean positioned() {
        return positioned;
    }

    @Override
    public void run() {
        long nextCommit = System.nanoTime() + commitInterval.toNanos();
        boolean paused = false;
        try {
            while (running) {
                var records = consumer.poll(Duration.ofMillis(100));
                long received = Marks.nowMicros();
                for (ConsumerRecord<byte[], byte[]> r : records) {
                    handle(r, received);
                }
                if (!paused && runner.queued() >= queueLimit) {
                    consumer.pause(List.of(partition));
                    paused = true;
                    log.atWarn().addKeyValue("queued", runner.queued()).log("worker.queue.limit reached: pausing engine commands");
                } else if (paused && runner.queued() < queueLimit / 2) {
                    consumer.resume(List.of(partition));
                    paused = false;
                }
                if (System.nanoTime() >= nextCommit) {
                    commit();
                    nextCommit = System.nanoTime() + commitInterval.toNanos();
                }
            }
        } catch (WakeupException e) {
            // closing
        } catch (RuntimeException e) {
            failure = e.toString();
            log.atError().setCause(e).log("engine command loop stopped: this worker takes no more orders");
        } finally {
            try {
                long next = offsets.committable();
                if (next >= 0) {
                    consumer.commitSync(Map.of(partition, new OffsetAndMetadata(next)), Duration.ofSeconds(5));
                }
            } catch (RuntimeException e) {
                log.atWarn().log("final offset commit failed: " + e.getMessage());
            }
            consumer.close(CloseOptions.timeout(Duration.ofSeconds(5)));
        }
    }

    /**
     * Commits what is done, without waiting: a Kafka outage must not end the loop (a synchronous commit used to throw a
     * TimeoutException after 60 s and stop this worker's orders for good while it still said ready). A failed commit is
     * retried by the next one; until then a restart re-reads at most the uncommitted orders, which it dedupes.
     */
    private void commit() {
        long next = offsets.committable();
        if (next >= 0) {
            consumer.commitAsync(Map.of(partition, new OffsetAndMetadata(next)), (committed, e) -> {
                if (e == null) {
                    offsets.committed(next);
                    if (commitFailing) {
                        commitFailing = false;
                        log.atInfo().addKeyValue("offset", next).log("engine command offsets committed again");
                    }
                } else if (!commitFailing) {
                    commitFailing = true;
                    log.atWarn().addKeyValue("offset", next).log("committing engine command offsets failed (retried at the next commit): " + e);
                }
            });
        }
    }

    /** Why the loop stopped taking commands, or null while it runs (the worker is not ready without it). */
    public String failure() {
        return failure;
    }

    private void handle(ConsumerRecord<byte[], byte[]> r, long receivedMicros) {
        offsets.track(r.offset());
        Runnable done = () -> offsets.done(r.offset());
        String key = r.key() == null ? null : new String(r.key(), StandardCharsets.UTF_8);
        if (key != null && !key.equals(engineId)) {
            done.run(); // another engine whose id hashes to this partition
            return;
        }
        Decision d;
        try {
            d = RecordDecoding.decodeValue(r, topic.valueSerde().deserializer());
            if (d == null) {
                throw new EventDecodingException(EventDecodingException.Reason.EMPTY, topic.name(), "null value (tombstone)").at(r.partition(),
                        r.offset());
            }
        } catch (EventDecodingException e) {
            reporter.deadLetter(r, "UNDECODABLE", e.getMessage()).whenComplete((v, err) -> done.run());
            return;
        }
        if (key == null) {
            reporter.deadLetter(r, "KEY_MISMATCH", "engine command without a key: commands are keyed by the engine id that must act")
                    .whenComplete((v, err) -> done.run());
            return;
        }
        try {
            switch (d.getPayload()) {
                case TransferOrder o -> {
                    if (!engineId.equals(o.getSourceEngineId())) {
                        reporter.deadLetter(r, "KEY_MISMATCH", "TransferOrder " + o.getOrderId() + " is keyed '" + key + "' but its source engine is '"
                                + o.getSourceEngineId() + "': orders go to the source engine's worker").whenComplete((v, err) -> done.run());
                        return;
                    }
                    Marks orderMarks = Marks.read(r.headers());
                    runner.submit(d.getRequestId(), o, TraceHeaders.read(r.headers()).orElse(null), r.timestamp(), done,
                            orderMarks.get(Marks.OUT).orElse(0), receivedMicros);
                    return;
                }
                case AbortTransfer a -> {
                    boolean mine = false;
                    if (engineId.equals(a.getSourceEngineId())) {
                        runner.abort(a.getOrderId(), a.getAttempt(), a.getReason());
                        mine = true;
                    }
                    if (engineId.equals(a.getDestEngineId())) {
                        gate.abortAttempt(a.getOrderId(), a.getAttempt(), a.getReason());
                        mine = true;
                    }
                    if (!mine) {
                        reporter.deadLetter(r, "KEY_MISMATCH", "AbortTransfer " + a.getOrderId() + " is keyed '" + key + "' but names engines '"
                                + a.getSourceEngineId() + "' and '" + a.getDestEngineId() + "'").whenComplete((v, err) -> done.run());
                        return;
                    }
                }
                case ReleaseDecided rel -> {
                    if (!engineId.equals(rel.getEngineId())) {
                        // keyed to this engine but naming another: acting on it could free the wrong pages; no engine does
                        reporter.deadLetter(r, "KEY_MISMATCH", "ReleaseDecided is keyed '" + key + "' but names engine '" + rel.getEngineId()
                                + "': releases go to the engine whose pages they free").whenComplete((v, err) -> done.run());
                        return;
                    }
                    if (rel.getSide() == ReleaseSide.DECODE && engineId.equals(rel.getEngineId()) && rel.getLeaseId() != null
                            && rel.getLeaseEpoch() != null) {
                        gate.releaseLease(rel.getLeaseId(), rel.getLeaseEpoch());
                        log.atInfo().addKeyValue("requestId", d.getRequestId()).addKeyValue("leaseId", rel.getLeaseId())
                                .addKeyValue("leaseEpoch", rel.getLeaseEpoch()).log("lease released: late pushes are refused from now on");
                    }
                }
                case RecomputeDecided rc -> {
                    if (engineId.equals(rc.getDecodeEngineId())) {
                        gate.fenceRequest(d.getRequestId(), "the decode engine recomputes the prefill: " + rc.getReason());
                    }
                }
                default -> {
                    // KvReady and the rest are for the engine itself, not its worker.
                }
            }
            if (engineSink != null && ApiProtocol.forEngine(d)) {
                // After the worker's own action (a released lease refuses late pushes before the engine frees the pages).
                engineSink.publish(d, TraceHeaders.read(r.headers()).orElse(null), Marks.read(r.headers()), receivedMicros);
            }
        } catch (RuntimeException e) {
            log.atError().setCause(e).addKeyValue("offset", r.offset()).log("acting on a decision failed");
        }
        done.run();
    }

    @Override
    public void close() {
        running = false;
        consumer.wakeup();
    }
}
