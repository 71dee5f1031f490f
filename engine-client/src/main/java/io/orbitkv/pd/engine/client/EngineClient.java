package io.orbitkv.pd.engine.client;

import io.micrometer.core.instrument.MeterRegistry;
import io.orbitkv.pd.runtime.KafkaWrites;
import io.orbitkv.pd.runtime.Lifecycle;
import io.orbitkv.pd.schemas.config.KafkaClients;
import io.orbitkv.pd.engine.client.internal.CommandReader;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.MemoryRegion;
import io.orbitkv.pd.events.RecomputeDecided;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.TransportEndpoint;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.TopicAdmin;
import io.orbitkv.pd.schemas.Topics;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Optional;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceContext;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * What an inference engine integrates to take part in P/D: it reports facts and learns decisions, and decides
 * nothing about the handoff itself (docs/engine-integration.md).
 *
 * <ul>
 *   <li><b>Register</b> ({@link #start}): the engine's layout, memory regions, HTTP URL and instance epoch on the
 *       compacted engines topic. With a transfer worker, the client waits for the worker's announcement (its
 *       transport endpoints, for the engine's epoch) and re-announces it with the engine's own fields; a worker that
 *       re-registers (new endpoints or epoch) is followed. {@link #close()} announces that the engine left.</li>
 *   <li><b>Report</b>: {@link #prefillCompleted} with the source pages, {@link #prefillFailed}, {@link #decodeReady}
 *       with the destination pages under a lease, {@link #heartbeat}, {@link #decodeRejected},
 *       {@link #decodeCompleted}, {@link #cancel}. Each returns a future completed when the broker has the fact;
 *       event ids are deterministic so a repeated report is recognized by the decider.</li>
 *   <li><b>Learn</b>: the decisions for this engine ({@code KvReady}, {@code ReleaseDecided},
 *       {@code RecomputeDecided}, {@code RequestOutcome}) from the one partition of {@code engine-commands} its id
 *       hashes to, delivered once per decision id to the {@link DecisionListener}, and to {@link #awaitKv} waiters.</li>
 * </ul>
 * Thread-safe. Lifecycle: {@link #start} once, {@link #close()} once (idempotent).
 */
public final class EngineClient implements EngineControl {

    private static final Logger log = LoggerFactory.getLogger(EngineClient.class);

    /**
     * What the engine announces about itself.
     *
     * @param role     prefill, decode or both
     * @param model    the served model name
     * @param httpUrl  OpenAI-compatible base URL (what the proxy calls)
     * @param geometry the KV pool's shape
     * @param tpRank   tensor-parallel rank
     * @param tpSize   tensor-parallel size
     * @param regions  the pool's memory regions (announced when no worker re-announces them)
     */
    public record Identity(EngineRole role, String model, String httpUrl, KvGeometry geometry, int tpRank, int tpSize, List<MemoryRegion> regions) {
        public Identity {
            Objects.requireNonNull(role, "role");
            Objects.requireNonNull(geometry, "geometry");
            regions = List.copyOf(regions);
        }
    }

    private final EngineClientConfig config;
    private final Identity identity;
    private final KvWaiters waiters;
    private final EngineFacts facts;
    private final EventSerdes serdes;
    private final Topics topics;
    private final Lifecycle lifecycle;
    /** Where writes the broker did not take are counted ({@link KafkaWrites}); null: not counted. */
    private final MeterRegistry registry;
    private final AtomicLong instanceEpoch = new AtomicLong();
    private org.apache.kafka.clients.producer.Producer<String, byte[]> producer;
    /**
     * Every fact is handed to this one thread, in call order (a decode-ready before its heartbeats): a producer's {@code send}
     * blocks its caller while it has no metadata for the topic (up to {@code max.block.ms}, 60 s) or its buffer is full —
     * the engine calls it from its event loop, which serves every request, stream and health check (as the proxy's
     * Admissions, issue 31).
     */
    private final java.util.concurrent.ExecutorService sends = java.util.concurrent.Executors.newSingleThreadExecutor(
            Thread.ofPlatform().daemon().name("engine-kafka-send").factory());
    private CommandReader commands;
    private EngineDirectory directory;
    private volatile EngineRegistration registration;
    private final long startedAtMs = System.currentTimeMillis();

    private EngineClient(EngineClientConfig config, Identity identity, DecisionListener listener, MeterRegistry registry) {
        this.config = config;
        this.registry = registry;
        this.lifecycle = new Lifecycle("engine client " + config.engineId());
        this.identity = identity;
        this.waiters = new KvWaiters(config.engineId(), listener);
        this.facts = new EngineFacts(config.engineId());
        this.serdes = EventSerdes.create(config.serde());
        this.topics = new Topics(config.topics(), serdes);
    }

    /**
     * Joins the control plane: ensures the topics, positions the command reader at the end of the engine's partition
     * (so no decision made after the announcement is missed), announces the engine (after its worker, if any) and
     * starts reading decisions. Returns once the engine is announced.
     */
    public static EngineClient start(EngineClientConfig config, Identity identity, DecisionListener listener) throws InterruptedException {
        return start(config, identity, listener, null);
    }

    /** As {@link #start(EngineClientConfig, Identity, DecisionListener)}, counting writes the broker refused in {@code registry}. */
    public static EngineClient start(EngineClientConfig config, Identity identity, DecisionListener listener, MeterRegistry registry)
            throws InterruptedException {
        EngineClient c = new EngineClient(config, identity, listener, registry);
        c.lifecycle.starting();
        try {
            c.open();
        } catch (InterruptedException | RuntimeException e) {
            c.lifecycle.failed(e);
            c.close();
            throw e;
        }
        c.lifecycle.running();
        return c;
    }

    /** A client over {@code producer} that reports facts and nothing else (tests of the report path; nothing is announced). */
    static EngineClient reportingOnly(EngineClientConfig config, Identity identity, org.apache.kafka.clients.producer.Producer<String, byte[]> producer) {
        EngineClient c = new EngineClient(config, identity, new DecisionListener() { }, null);
        c.producer = producer;
        return c;
    }

    private void open() throws InterruptedException {
        TopicAdmin.ensure(KafkaClients.admin(config.bootstrapServers(), config.kafkaOverrides()), topics);
        producer = new KafkaProducer<>(producerConfig(), new StringSerializer(), new ByteArraySerializer());
        commands = new CommandReader(new KafkaConsumer<>(consumerConfig("commands"), new ByteArrayDeserializer(), new ByteArrayDeserializer()),
                topics.engineCommands(), config.engineId(), waiters::onDecision, this::deadLetter);
        commands.position();
        EngineRegistration reg;
        if (config.expectWorker()) {
            directory = new EngineDirectory(new KafkaConsumer<>(consumerConfig("engines"), new ByteArrayDeserializer(), new ByteArrayDeserializer()),
                    topics.engines(), this::onPeerChanged);
            Thread.ofPlatform().daemon().name("engine-directory").start(directory);
            if (!directory.awaitCaughtUp(Duration.ofSeconds(60))) {
                log.warn("engine table not read to its end within 60 s; continuing");
            }
            EngineRegistration worker = awaitWorker();
            instanceEpoch.set(worker.getInstanceEpoch());
            reg = merged(worker, false);
        } else {
            instanceEpoch.set(config.instanceEpoch() != null ? config.instanceEpoch() : System.currentTimeMillis());
            reg = own(List.of(), identity.regions(), false);
        }
        announce(reg);
        Thread.ofPlatform().daemon().name("engine-commands").start(commands);
        log.atInfo().addKeyValue("engineId", config.engineId()).addKeyValue("instanceEpoch", instanceEpoch.get())
                .addKeyValue("role", identity.role()).addKeyValue("endpoints", reg.getEndpoints().size()).log("engine announced");
    }

    /** Waits for the worker's live announcement for this engine (its epoch, or the one configured). */
    private EngineRegistration awaitWorker() throws InterruptedException {
        long deadline = System.nanoTime() + config.workerWait().toNanos();
        while (true) {
            Optional<EngineRegistration> r = directory.get(config.engineId()).filter(this::isWorkerAnnouncement);
            if (r.isPresent()) {
                return r.get();
            }
            if (System.nanoTime() > deadline) {
                throw new IllegalStateException("engine.worker.wait: no transfer worker announced engine " + config.engineId()
                        + (config.instanceEpoch() == null ? "" : " at instance epoch " + config.instanceEpoch()) + " on " + topics.engines().name()
                        + " within " + config.workerWait() + " (start './orbitkv-pd worker' with worker.engine.id=" + config.engineId()
                        + ", the same worker.pool.path and layout, or set engine.worker.enabled=false)");
            }
            Thread.sleep(50); // the directory's await returns at once on a stale deregistration: poll instead
        }
    }

    /**
     * A live registration written by the worker (no HTTP URL) for the configured epoch, or — when none is configured
     * — one announced no earlier than {@code engine.worker.wait} before this engine started (older ones are
     * leftovers of a crashed worker).
     */
    private boolean isWorkerAnnouncement(EngineRegistration r) {
        if (r.getDeregistered() || r.getEndpoints().isEmpty()) {
            return false;
        }
        if (config.instanceEpoch() != null) {
            return r.getInstanceEpoch() == config.instanceEpoch();
        }
        return r.getRegisteredAtMs() >= startedAtMs - config.workerWait().toMillis();
    }

    /** The worker re-announced the engine (restart: new endpoints or epoch): follow it. */
    private void onPeerChanged(String engineId) {
        if (!engineId.equals(config.engineId()) || lifecycle.isStopping() || registration == null) {
            return;
        }
        directory.get(engineId).ifPresent(r -> {
            if (r.getDeregistered() || !r.getHttpUrl().isEmpty() || r.getEndpoints().isEmpty()) {
                return;
            }
            long before = instanceEpoch.getAndSet(r.getInstanceEpoch());
            log.atWarn().addKeyValue("engineId", engineId).addKeyValue("instanceEpoch", r.getInstanceEpoch()).addKeyValue("previousEpoch", before)
                    .log("transfer worker re-announced the engine: following its endpoints and epoch");
            announce(merged(r, false));
        });
    }

    private EngineRegistration merged(EngineRegistration worker, boolean leaving) {
        return own(worker.getEndpoints(), worker.getRegions().isEmpty() ? identity.regions() : worker.getRegions(), leaving);
    }

    private EngineRegistration own(List<TransportEndpoint> endpoints, List<MemoryRegion> regions, boolean leaving) {
        return EngineRegistration.newBuilder().setEngineId(config.engineId()).setRole(identity.role()).setInstanceEpoch(instanceEpoch.get())
                .setModel(identity.model()).setHttpUrl(identity.httpUrl()).setEndpoints(endpoints)
                .setLayout(identity.geometry().toLayout(identity.tpRank(), identity.tpSize())).setRegions(regions)
                .setRegisteredAtMs(System.currentTimeMillis()).setDeregistered(leaving).build();
    }

    private void announce(EngineRegistration reg) {
        announce(reg, 60);
    }

    private void announce(EngineRegistration reg, int timeoutSeconds) {
        byte[] value = topics.engines().valueSerde().serializer().serialize(topics.engines().name(), reg);
        try {
            producer.send(new ProducerRecord<>(topics.engines().name(), reg.getEngineId(), value)).get(timeoutSeconds, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while announcing engine " + reg.getEngineId(), e);
        } catch (Exception e) {
            throw new IllegalStateException("cannot announce engine " + reg.getEngineId() + " on " + topics.engines().name() + ": " + e, e);
        }
        registration = reg;
    }

    // ------------------------------------------------------------------------------------------------ identity

    @Override
    public String engineId() {
        return config.engineId();
    }

    /** The instance epoch every fact of this engine carries (the worker's, when one serves the engine). */
    @Override
    public long instanceEpoch() {
        return instanceEpoch.get();
    }

    public EngineRegistration registration() {
        return registration;
    }

    public Topics topics() {
        return topics;
    }

    // ------------------------------------------------------------------------------------------------ facts

    /** Prefill done: the prompt's KV is in {@code sourceBlocks} (token order), held until a release names the request. */
    public CompletableFuture<Void> prefillCompleted(String requestId, int[] sourceBlocks, int numTokens, Integer firstToken) {
        return prefillCompleted(requestId, sourceBlocks, numTokens, firstToken, null, null);
    }

    @Override
    public CompletableFuture<Void> prefillCompleted(String requestId, int[] sourceBlocks, int numTokens, Integer firstToken, TraceContext trace,
                                                    Marks marks) {
        return send(facts.prefillCompleted(requestId, instanceEpoch.get(), sourceBlocks, numTokens, firstToken, layout()), trace, marks);
    }

    /** Prefill impossible; the engine holds no pages for the request. */
    public CompletableFuture<Void> prefillFailed(String requestId, String reason, boolean retriable) {
        return prefillFailed(requestId, reason, retriable, null, null);
    }

    @Override
    public CompletableFuture<Void> prefillFailed(String requestId, String reason, boolean retriable, TraceContext trace, Marks marks) {
        return send(facts.prefillFailed(requestId, instanceEpoch.get(), reason, retriable), trace, marks);
    }

    /** Destination pages held under a lease; register {@link #awaitKv} before calling this, so no signal is missed. */
    public CompletableFuture<Void> decodeReady(String requestId, String leaseId, long leaseEpoch, int[] destBlocks, long leaseDeadlineMs) {
        return decodeReady(requestId, leaseId, leaseEpoch, destBlocks, leaseDeadlineMs, null, null);
    }

    @Override
    public CompletableFuture<Void> decodeReady(String requestId, String leaseId, long leaseEpoch, int[] destBlocks, long leaseDeadlineMs, TraceContext trace,
                                               Marks marks) {
        return send(facts.decodeReady(requestId, instanceEpoch.get(), leaseId, leaseEpoch, destBlocks, leaseDeadlineMs, layout()), trace, marks);
    }

    @Override
    public CompletableFuture<Void> decodeReady(String requestId, String leaseId, long leaseEpoch, int[] destBlocks, long leaseDeadlineMs,
                                               int cachedBlocks, TraceContext trace, Marks marks) {
        return send(facts.decodeReady(requestId, instanceEpoch.get(), leaseId, leaseEpoch, destBlocks, leaseDeadlineMs, layout(), cachedBlocks),
                trace, marks);
    }

    public CompletableFuture<Void> decodeRejected(String requestId, String reason) {
        return decodeRejected(requestId, reason, null, null);
    }

    @Override
    public CompletableFuture<Void> decodeRejected(String requestId, String reason, TraceContext trace, Marks marks) {
        return send(facts.decodeRejected(requestId, instanceEpoch.get(), reason), trace, marks);
    }

    /** Still holding the lease; {@code seq} makes the event id unique per heartbeat. */
    public CompletableFuture<Void> heartbeat(String requestId, String leaseId, long leaseEpoch, long extendToMs, int seq) {
        return heartbeat(requestId, leaseId, leaseEpoch, extendToMs, seq, null, null);
    }

    @Override
    public CompletableFuture<Void> heartbeat(String requestId, String leaseId, long leaseEpoch, long extendToMs, int seq, TraceContext trace,
                                             Marks marks) {
        return send(facts.heartbeat(requestId, leaseId, leaseEpoch, extendToMs, seq), trace, marks);
    }

    public CompletableFuture<Void> decodeCompleted(String requestId, int outputTokens, boolean recomputed) {
        return decodeCompleted(requestId, outputTokens, recomputed, null, null);
    }

    @Override
    public CompletableFuture<Void> decodeCompleted(String requestId, int outputTokens, boolean recomputed, TraceContext trace, Marks marks) {
        return send(facts.decodeCompleted(requestId, outputTokens, recomputed), trace, marks);
    }

    /** The engine itself asks to stop the request (e.g. the KV it received does not verify). */
    public CompletableFuture<Void> cancel(String requestId, String reason) {
        return cancel(requestId, reason, null, null);
    }

    @Override
    public CompletableFuture<Void> cancel(String requestId, String reason, TraceContext trace, Marks marks) {
        return send(facts.cancel(requestId, reason), trace, marks);
    }

    /** A decision this engine refused goes to the dead-letter topic: an event, with the original bytes and why. */
    private void deadLetter(org.apache.kafka.clients.consumer.ConsumerRecord<byte[], byte[]> r, RefusedDecision why) {
        io.orbitkv.pd.events.DeadLetter dl = io.orbitkv.pd.schemas.RecordDecoding.deadLetter("engine:" + config.engineId(), r, why.code(),
                why.getMessage(), System.currentTimeMillis());
        byte[] value = topics.deadLetters().valueSerde().serializer().serialize(topics.deadLetters().name(), dl);
        producer.send(new ProducerRecord<>(topics.deadLetters().name(), r.key() == null ? null : new String(r.key(),
                java.nio.charset.StandardCharsets.UTF_8), value), (md, err) -> {
                    if (err != null) {
                        log.atWarn().log("could not dead-letter a refused decision: " + KafkaWrites.failed(registry, topics.deadLetters().name(), err));
                    }
                });
    }

    private io.orbitkv.pd.events.KvLayout layout() {
        return identity.geometry().toLayout(identity.tpRank(), identity.tpSize());
    }

    private CompletableFuture<Void> send(EngineFacts.Fact fact, TraceContext trace, Marks marks) {
        ProducerRecord<String, byte[]> record = facts.record(topics, fact, trace, marks);
        CompletableFuture<Void> done = new CompletableFuture<>();
        try {
            sends.execute(() -> {
                try {
                    producer.send(record, (md, err) -> {
                        if (err != null) {
                            log.atError().addKeyValue("requestId", fact.requestId()).addKeyValue("eventId", fact.eventId())
                                    .log("report failed: " + KafkaWrites.failed(registry, record.topic(), err));
                            done.completeExceptionally(err);
                        } else {
                            done.complete(null);
                        }
                    });
                } catch (RuntimeException e) {
                    done.completeExceptionally(e); // max.block.ms passed, or the producer closed
                }
            });
        } catch (java.util.concurrent.RejectedExecutionException e) {
            done.completeExceptionally(new IllegalStateException("engine client closed", e));
        }
        return done;
    }

    // ------------------------------------------------------------------------------------------------ decisions

    @Override
    public CompletableFuture<KvSignal> awaitKv(String requestId) {
        return waiters.awaitKv(requestId);
    }

    @Override
    public void forget(String requestId) {
        waiters.forget(requestId);
    }

    /** Decisions delivered (after dedupe) and duplicates dropped. */
    @Override
    public long decisionsSeen() {
        return commands == null ? 0 : commands.delivered();
    }

    // ------------------------------------------------------------------------------------------------ plumbing

    private Map<String, Object> producerConfig() {
        return KafkaClients.factProducer(config.bootstrapServers(), config.engineId() + "-facts", config.kafkaOverrides());
    }

    private Map<String, Object> consumerConfig(String what) {
        return KafkaClients.consumer(config.bootstrapServers(), config.engineId() + "-" + what, null, config.isolationLevel(), "latest",
                config.kafkaOverrides());
    }

    /** Announces that the engine left (its in-flight work is void), stops reading decisions, closes the clients. Idempotent. */
    @Override
    public void close() {
        if (!lifecycle.stopping()) {
            return;
        }
        try {
            if (registration != null && producer != null) {
                try {
                    EngineRegistration r = registration;
                    // Bounded: a stopping engine must not hang on a broker that is gone (its leases expire anyway).
                    announce(EngineRegistration.newBuilder(r).setDeregistered(true).setRegisteredAtMs(System.currentTimeMillis()).build(), 5);
                } catch (RuntimeException e) {
                    log.atWarn().log("could not announce that engine " + config.engineId() + " left: " + e.getMessage());
                }
            }
            if (commands != null) {
                commands.close();
            }
            if (directory != null) {
                directory.close();
            }
            sends.shutdown();
            try {
                sends.awaitTermination(2, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            if (producer != null) {
                producer.close(Duration.ofSeconds(2));
            }
            waiters.endAll("engine shutting down");
        } finally {
            serdes.close();
            lifecycle.stopped();
        }
    }

    /** Where this client is in its life (the engine's {@code /health} reports it). */
    public Lifecycle.State state() {
        return lifecycle.state();
    }
}
