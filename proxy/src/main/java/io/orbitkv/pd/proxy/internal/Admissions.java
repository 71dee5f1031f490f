package io.orbitkv.pd.proxy.internal;

import io.micrometer.core.instrument.MeterRegistry;
import io.orbitkv.pd.schemas.config.KafkaClients;
import io.orbitkv.pd.events.CancelRequested;
import io.orbitkv.pd.events.FailurePolicy;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestAnswered;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.runtime.KafkaWrites;
import io.orbitkv.pd.schemas.Topics;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceContext;
import io.orbitkv.pd.tracing.TraceHeaders;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What the proxy writes: the facts a request admitted (with its engines) and a request cancelled (client gone,
 * timeout), and, once a request ended, what its client got ({@code RequestAnswered}).
 */
public final class Admissions implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(Admissions.class);

    private final Producer<String, byte[]> producer;
    private final Topics topics;
    private final String source;
    private final MeterRegistry registry;
    /**
     * Every write is handed to this one thread, in call order (an admission before its cancel): a producer's {@code send}
     * blocks its caller while it has no metadata for the topic (up to {@code max.block.ms}, 60 s) — a Kafka outage must not
     * hold the proxy's event loops, which serve every other request, health check and stream.
     */
    private final java.util.concurrent.ExecutorService sends = java.util.concurrent.Executors.newSingleThreadExecutor(
            Thread.ofPlatform().daemon().name("proxy-kafka-send").factory());

    /** @param registry where writes the broker did not take are counted ({@link KafkaWrites}) */
    public Admissions(String bootstrapServers, Map<String, Object> overrides, Topics topics, String proxyId, MeterRegistry registry) {
        this(new KafkaProducer<>(KafkaClients.factProducer(bootstrapServers, proxyId + "-facts", overrides), new StringSerializer(),
                new ByteArraySerializer()), topics, proxyId, registry);
    }

    /** Over any producer (tests: {@code MockProducer}); {@code registry} may be null. */
    public Admissions(Producer<String, byte[]> producer, Topics topics, String proxyId, MeterRegistry registry) {
        this.producer = producer;
        this.registry = registry;
        this.topics = topics;
        this.source = proxyId;
    }

    public CompletableFuture<Void> admitted(String requestId, String model, int promptTokens, int maxTokens, String prefillEngine,
                                            String decodeEngine, boolean recompute, Long deadlineMs) {
        return admitted(requestId, model, promptTokens, maxTokens, prefillEngine, decodeEngine, recompute, deadlineMs, null, null);
    }

    /**
     * {@code trace}: the proxy's span of this request (or null); written as the record's {@code traceparent}.
     * {@code marks}: when the proxy received the request (or null); the record carries them with {@code out} added.
     */
    public CompletableFuture<Void> admitted(String requestId, String model, int promptTokens, int maxTokens, String prefillEngine,
                                            String decodeEngine, boolean recompute, Long deadlineMs, TraceContext trace, Marks marks) {
        return fact(requestId, requestId + "/admitted", RequestAdmitted.newBuilder().setModel(model).setPromptTokens(promptTokens)
                .setMaxTokens(maxTokens).setPrefillEngineId(prefillEngine).setDecodeEngineId(decodeEngine)
                .setFailurePolicy(recompute ? FailurePolicy.RECOMPUTE : FailurePolicy.FAIL).setDeadlineMs(deadlineMs).build(), trace, marks);
    }

    /**
     * What the client got ({@code orbitkv.answers}), with the proxy's marks of the request: off the handoff's path,
     * written once the request ended here. A failed write is logged, never fails anything.
     */
    public void answered(RequestAnswered answer, Marks marks) {
        byte[] value = topics.answers().valueSerde().serializer().serialize(topics.answers().name(), answer);
        ProducerRecord<String, byte[]> record = new ProducerRecord<>(topics.answers().name(), answer.getRequestId(), value);
        marks.writeOut(record.headers());
        send(record, err -> log.atWarn().addKeyValue("requestId", answer.getRequestId()).log("could not write the answer's record: "
                + KafkaWrites.failed(registry, record.topic(), err)), () -> { });
    }

    /** A record the proxy could not use ({@code orbitkv.dead-letters}, keyed by its original key); a failed write is logged. */
    public void deadLetter(io.orbitkv.pd.events.DeadLetter dl) {
        byte[] value = topics.deadLetters().valueSerde().serializer().serialize(topics.deadLetters().name(), dl);
        String key = dl.getOriginalKey() == null ? null : java.nio.charset.StandardCharsets.UTF_8.decode(dl.getOriginalKey().duplicate()).toString();
        ProducerRecord<String, byte[]> record = new ProducerRecord<>(topics.deadLetters().name(), key, value);
        send(record, err -> log.atWarn().log("could not write a dead letter (" + dl.getErrorType() + " of " + dl.getTopic() + "-" + dl.getPartition()
                + "@" + dl.getOffset() + "): " + KafkaWrites.failed(registry, record.topic(), err)), () -> { });
    }

    /** The proxy id this writes as (the {@code source} of its facts). */
    public String source() {
        return source;
    }

    public CompletableFuture<Void> cancelled(String requestId, String reason) {
        return cancelled(requestId, reason, null);
    }

    public CompletableFuture<Void> cancelled(String requestId, String reason, TraceContext trace) {
        return fact(requestId, requestId + "/cancel/" + source, CancelRequested.newBuilder().setRequestedBy(source).setReason(reason).build(),
                trace, null);
    }

    private CompletableFuture<Void> fact(String requestId, String eventId, Object payload, TraceContext trace, Marks marks) {
        RequestEvent e = RequestEvent.newBuilder().setRequestId(requestId).setEventId(eventId).setSource(source)
                .setEventTimeMs(System.currentTimeMillis()).setPayload(payload).build();
        byte[] value = topics.requestEvents().valueSerde().serializer().serialize(topics.requestEvents().name(), e);
        CompletableFuture<Void> done = new CompletableFuture<>();
        ProducerRecord<String, byte[]> record = new ProducerRecord<>(topics.requestEvents().name(), requestId, value);
        if (trace != null) {
            TraceHeaders.write(record.headers(), trace);
        }
        (marks == null ? Marks.empty() : marks).writeOut(record.headers());
        send(record, err -> {
            log.atError().addKeyValue("requestId", requestId).log("could not write to " + record.topic() + ": "
                    + KafkaWrites.failed(registry, record.topic(), err));
            done.completeExceptionally(err);
        }, () -> done.complete(null));
        return done;
    }

    /** Sends on the writer thread; {@code failed} or {@code ok} once the broker answered (or the send could not start). */
    private void send(ProducerRecord<String, byte[]> record, java.util.function.Consumer<Exception> failed, Runnable ok) {
        try {
            sends.execute(() -> {
                try {
                    producer.send(record, (md, err) -> {
                        if (err != null) {
                            failed.accept(err);
                        } else {
                            ok.run();
                        }
                    });
                } catch (RuntimeException e) {
                    failed.accept(e);
                }
            });
        } catch (java.util.concurrent.RejectedExecutionException e) {
            failed.accept(e); // closing
        }
    }

    @Override
    public void close() {
        sends.shutdown();
        try {
            sends.awaitTermination(5, java.util.concurrent.TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        producer.close(Duration.ofSeconds(5));
    }
}
