package io.orbitkv.pd.worker.internal;

import io.micrometer.core.instrument.MeterRegistry;
import io.orbitkv.pd.events.DeadLetter;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferFailed;
import io.orbitkv.pd.events.TransferStarted;
import io.orbitkv.pd.schemas.RecordDecoding;
import io.orbitkv.pd.runtime.KafkaWrites;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceContext;
import io.orbitkv.pd.tracing.TraceHeaders;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CompletableFuture;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Everything the worker writes to Kafka: transfer facts on the request-events topic (keyed by request id, event ids
 * {@code <order id>/started|completed|failed} so a repeated report is recognized), its engine's registration, and
 * dead letters. Each send completes its future when the broker has acknowledged it.
 */
public final class EventReporter {

    private static final Logger log = LoggerFactory.getLogger(EventReporter.class);

    private final Producer<String, byte[]> producer;
    private final Topics topics;
    private final String engineId;
    private final String workerId;
    private final MeterRegistry registry;

    /** @param registry where writes the broker did not take are counted ({@link KafkaWrites}); null: not counted */
    public EventReporter(Producer<String, byte[]> producer, Topics topics, String engineId, String workerId, MeterRegistry registry) {
        this.producer = producer;
        this.registry = registry;
        this.topics = topics;
        this.engineId = engineId;
        this.workerId = workerId;
    }

    public String component() {
        return "worker:" + engineId;
    }

    public CompletableFuture<Void> started(String requestId, String orderId, int attempt, String transport) {
        return started(requestId, orderId, attempt, transport, null, null);
    }

    /**
     * {@code trace}: the order's trace context (or null); the report carries a child of it as its {@code traceparent}.
     * {@code marks}: what the worker did for the order so far (or null); the report carries them with {@code out} added.
     */
    public CompletableFuture<Void> started(String requestId, String orderId, int attempt, String transport, TraceContext trace, Marks marks) {
        return fact(requestId, orderId + "/started", TransferStarted.newBuilder().setOrderId(orderId).setAttempt(attempt)
                .setWorkerId(workerId).setTransport(transport).build(), trace, marks);
    }

    public CompletableFuture<Void> completed(String requestId, String orderId, int attempt, long bytes, long durationUs) {
        return completed(requestId, orderId, attempt, bytes, durationUs, null, null);
    }

    public CompletableFuture<Void> completed(String requestId, String orderId, int attempt, long bytes, long durationUs, TraceContext trace,
                                             Marks marks) {
        return fact(requestId, orderId + "/completed", TransferCompleted.newBuilder().setOrderId(orderId).setAttempt(attempt)
                .setWorkerId(workerId).setBytes(bytes).setDurationUs(durationUs).build(), trace, marks);
    }

    public CompletableFuture<Void> failed(String requestId, String orderId, int attempt, String reason, boolean retriable) {
        return failed(requestId, orderId, attempt, reason, retriable, null, null);
    }

    public CompletableFuture<Void> failed(String requestId, String orderId, int attempt, String reason, boolean retriable, TraceContext trace,
                                          Marks marks) {
        return fact(requestId, orderId + "/failed", TransferFailed.newBuilder().setOrderId(orderId).setAttempt(attempt)
                .setWorkerId(workerId).setReason(reason).setRetriable(retriable).build(), trace, marks);
    }

    private CompletableFuture<Void> fact(String requestId, String eventId, Object payload, TraceContext trace, Marks marks) {
        RequestEvent e = RequestEvent.newBuilder().setRequestId(requestId).setEventId(eventId).setSource(component())
                .setEventTimeMs(System.currentTimeMillis()).setPayload(payload).build();
        byte[] value = topics.requestEvents().valueSerde().serializer().serialize(topics.requestEvents().name(), e);
        ProducerRecord<String, byte[]> record = new ProducerRecord<>(topics.requestEvents().name(), requestId, value);
        if (trace != null) {
            TraceHeaders.write(record.headers(), trace.newChild());
        }
        (marks == null ? Marks.empty() : marks).writeOut(record.headers());
        return send(record, eventId);
    }

    public CompletableFuture<Void> registration(EngineRegistration r) {
        byte[] value = topics.engines().valueSerde().serializer().serialize(topics.engines().name(), r);
        return send(new ProducerRecord<>(topics.engines().name(), r.getEngineId(), value), "registration of " + r.getEngineId());
    }

    /** Dead-letters a command record this worker refused (reusing the shared {@link RecordDecoding#deadLetter}). */
    public CompletableFuture<Void> deadLetter(ConsumerRecord<byte[], byte[]> record, String errorType, String reason) {
        log.atWarn().addKeyValue("topic", record.topic()).addKeyValue("partition", record.partition()).addKeyValue("offset", record.offset())
                .addKeyValue("errorType", errorType).log("command refused: " + reason);
        DeadLetter dl = RecordDecoding.deadLetter(component(), record, errorType, reason, System.currentTimeMillis());
        byte[] value = topics.deadLetters().valueSerde().serializer().serialize(topics.deadLetters().name(), dl);
        String key = record.key() == null ? "" : new String(record.key(), StandardCharsets.UTF_8);
        return send(new ProducerRecord<>(topics.deadLetters().name(), key, value), "dead letter for offset " + record.offset());
    }

    private CompletableFuture<Void> send(ProducerRecord<String, byte[]> record, String what) {
        CompletableFuture<Void> f = new CompletableFuture<>();
        producer.send(record, (md, e) -> {
            if (e != null) {
                log.atError().setCause(e).log("could not write " + what + " to " + record.topic() + ": " + KafkaWrites.failed(registry, record.topic(), e));
                f.completeExceptionally(e);
            } else {
                f.complete(null);
            }
        });
        return f;
    }
}
