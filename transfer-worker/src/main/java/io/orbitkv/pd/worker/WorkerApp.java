package io.orbitkv.pd.worker;

import io.orbitkv.pd.schemas.config.Addresses;

import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.events.PrefillFailed;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.schemas.config.KafkaClients;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.engine.client.EngineFacts;
import io.orbitkv.pd.engine.client.api.ApiException;
import io.orbitkv.pd.engine.client.api.ApiFrames;
import io.orbitkv.pd.engine.client.api.ApiProtocol;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.events.MemoryRegion;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvPoolImporter;
import io.orbitkv.pd.events.TransportEndpoint;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvPool;
import io.orbitkv.pd.metrics.ComponentMetrics;
import io.orbitkv.pd.runtime.Lifecycle;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.TopicAdmin;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.transport.KvTransport;
import io.orbitkv.pd.transport.KvTransportProvider;
import io.orbitkv.pd.transport.TransportUnavailableException;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.local.LocalFabric;
import io.orbitkv.pd.transport.local.LocalTransport;
import io.orbitkv.pd.transport.tcp.TcpTransport;
import io.orbitkv.pd.worker.internal.CommandLoop;
import io.orbitkv.pd.engine.client.EngineDirectory;
import io.orbitkv.pd.worker.internal.EventReporter;
import io.orbitkv.pd.worker.internal.OrderRunner;
import io.orbitkv.pd.worker.internal.WorkerHttp;
import io.orbitkv.pd.worker.internal.WorkerMetrics;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One transfer worker: the sidecar that moves KV bytes for one engine. Wires config → pool → gate → transports →
 * Kafka (engines table, the engine's command partition, reports).
 *
 * <p>For now the worker owns the engine's pool (anonymous memory, or a shared file an engine process can map too)
 * and announces the engine's registration itself — layout, memory regions, its transport endpoints, the instance
 * epoch — standing in for the engine client that a later release adds. On a clean stop it announces that the
 * engine left.
 *
 * <p>Lifecycle ({@link Lifecycle}): {@link #start()} once, {@link #close()} once (idempotent); {@link #awaitClose()} blocks until closed.
 */
public final class WorkerApp implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(WorkerApp.class);

    private final WorkerConfig config;
    private final EventSerdes serdes;
    private final Topics topics;
    private final Lifecycle lifecycle;
    private volatile KvPool pool;
    private volatile PushGate gate;
    private final List<KvTransport> transports = new ArrayList<>();
    private KafkaProducer<String, byte[]> producer;
    private EventReporter reporter;
    private EngineDirectory directory;
    private volatile OrderRunner runner;
    private volatile CommandLoop commands;
    private Thread commandThread;
    private EngineApiServer api;
    private volatile Engine engine;
    private volatile EngineRegistration registration;
    private final WorkerHttpConfig httpConfig;
    private final ComponentMetrics metrics;
    private final WorkerMetrics workerMetrics;
    private WorkerHttp http;

    public WorkerApp(WorkerConfig config) {
        this(config, WorkerHttpConfig.DISABLED);
    }

    /** With the HTTP endpoint of {@code httpConfig} ({@code /metrics}, {@code /health}) when it is enabled. */
    public WorkerApp(WorkerConfig config, WorkerHttpConfig httpConfig) {
        this.config = config;
        this.lifecycle = new Lifecycle("worker " + config.engineId());
        this.httpConfig = httpConfig;
        this.metrics = ComponentMetrics.create("worker", config.workerId());
        this.workerMetrics = new WorkerMetrics(metrics.registry());
        this.serdes = EventSerdes.create(config.serde());
        this.topics = new Topics(config.topics(), serdes);
    }

    /**
     * Joins Kafka and, without the engine API, allocates or maps the pool, starts the transports and announces the
     * engine; returns when it takes orders. With the engine API, it listens on the socket instead: the engine's hello
     * brings the pool, and the data plane starts then ({@link #attach}).
     */
    public WorkerApp start() throws InterruptedException {
        lifecycle.starting();
        if (config.usesDevAuthKey()) {
            log.warn("auth.key is not set: using the built-in development key. Set auth.key (the decider's, >= 16 bytes, or hex:...) in production.");
        }
        try {
            TopicAdmin.ensure(KafkaClients.admin(config.bootstrapServers(), config.kafkaOverrides()), topics);
            producer = new KafkaProducer<>(producerConfig(), new StringSerializer(), new ByteArraySerializer());
            reporter = new EventReporter(producer, topics, config.engineId(), config.workerId(), metrics.registry());
            directory = new EngineDirectory(new KafkaConsumer<>(consumerConfig(null), new ByteArrayDeserializer(), new ByteArrayDeserializer()),
                    topics.engines(), engine -> transports.forEach(t -> t.forgetPeer(engine))).onRefused(this::registrationRefused);
            Thread.ofPlatform().daemon().name("worker-engines").start(directory);
            if (!directory.awaitCaughtUp(Duration.ofSeconds(60))) {
                log.warn("engine table not read to its end within 60 s; continuing");
            }
            if (config.engineApi().enabled()) {
                api = new EngineApiServer(config.engineApi().path(), config.engineApi().maxFrameBytes(), config.engineApi().decisionBuffer(),
                        config.engineApi().ioTimeout(),
                        new ApiHost()).start();
                workerMetrics.engineApi(api.refusals());
            } else {
                KvPool own = config.poolPath() == null ? HostKvPool.allocate(config.geometry()) : HostKvPool.mapFile(config.geometry(), config.poolPath());
                engine = new Engine(config.instanceEpoch(), config.role(), config.model(), "", config.geometry(), config.tpRank(), config.tpSize(),
                        null, null);
                openData(own);
                announce(false).get(60, TimeUnit.SECONDS);
            }
            if (httpConfig.enabled()) {
                http = new WorkerHttp(httpConfig.host(), httpConfig.port(), metrics,
                        () -> "{\"engine\":\"" + config.engineId() + "\",\"lifecycle\":\"" + lifecycle.state().label() + "\",\"status\":\""
                                + (pool == null ? "waiting for the engine" : "ok") + "\",\"completed\":" + completedOrders() + ",\"failed\":"
                                + failedOrders() + "}",
                        lifecycle, () -> pool == null ? "no engine registered yet (the engine API waits for its hello)"
                                : commands != null && commands.failure() != null ? "the engine command loop stopped: " + commands.failure()
                                : null).start();
                log.atInfo().addKeyValue("url", "http://" + http.address() + "/metrics").log("worker metrics listening");
            }
            if (api != null) {
                log.atInfo().addKeyValue("engineId", config.engineId()).addKeyValue("engineApi", api.path())
                        .log("worker ready: waiting for the engine to register through the engine API");
            } else {
                log.atInfo().addKeyValue("engineId", config.engineId()).addKeyValue("instanceEpoch", config.instanceEpoch())
                        .addKeyValue("endpoints", registration.getEndpoints().stream().map(e -> e.getTransport() + "://" + e.getAddress()).toList())
                        .addKeyValue("pool", pool).log("worker ready");
            }
            lifecycle.running();
            return this;
        } catch (InterruptedException e) {
            throw failedStart(e);
        } catch (java.util.concurrent.ExecutionException | java.util.concurrent.TimeoutException e) {
            throw failedStart(new IllegalStateException("cannot announce engine " + config.engineId() + " on " + topics.engines().name() + ": " + e, e));
        } catch (java.io.IOException e) {
            throw failedStart(new java.io.UncheckedIOException("worker.engine-api.path: cannot listen on " + config.engineApi().path() + ": "
                    + e.getMessage(), e));
        } catch (RuntimeException e) {
            throw failedStart(e);
        }
    }

    /** A start that threw: FAILED, then closed to free what it had opened; returns {@code e} for the caller to throw. */
    private <E extends Exception> E failedStart(E e) {
        lifecycle.failed(e);
        close();
        return e;
    }

    /**
     * A registration every reader refuses (docs/worker.md, "Failure handling"): dead-lettered when it arrived while this
     * worker runs; and when it is keyed by this worker's own engine, the worker announces its engine again at once, so
     * the table's latest record for it is the true one again (also once the topic is compacted).
     */
    private void registrationRefused(ConsumerRecord<byte[], byte[]> r, String type, String reason,
                                     boolean live) {
        if (!live || lifecycle.isStopping()) {
            return;
        }
        reporter.deadLetter(r, type, reason);
        String key = r.key() == null ? null : new String(r.key(), StandardCharsets.UTF_8);
        if (config.engineId().equals(key)) {
            synchronized (this) {
                if (registration != null && engine != null && pool != null) {
                    log.atWarn().addKeyValue("engineId", key).log("a registration of this worker's engine was refused (" + type
                            + "): announcing the engine again");
                    announce(false);
                }
            }
        }
    }

    /** Who the served engine is now: from the configuration, or from its engine API hello. */
    private record Engine(long instanceEpoch, EngineRole role, String model, String httpUrl, KvGeometry geometry, int tpRank, int tpSize,
                          List<MemoryRegion> announcedRegions, ApiProtocol.BlockHashing blockHash) { }

    /** Gate, transports, order runner and command loop over {@code newPool}, for the current {@link #engine}. */
    private void openData(KvPool newPool) {
        pool = newPool;
        long epoch = engine.instanceEpoch();
        gate = new PushGate(config.engineId(), () -> epoch, pool, config.orderTokens(), config.maxRuns(), 100_000);
        workerMetrics.receiving(gate);
        if (api != null) {
            // Ready on landing: the engine on the engine API decodes once the bytes are in its pages, not once the report
            // has made the round trip through the decider (whose KvReady still follows in the log).
            EngineApiServer engineApi = api;
            gate.onLanded(engineApi::deliverLanded);
        }
        for (String name : config.transports()) {
            transports.add(switch (name) {
                case "tcp" -> TcpTransport.start(config.tcp(), config.workerId(), gate);
                case "local" -> new LocalTransport(LocalFabric.shared(), config.engineId() + "@" + epoch, gate);
                default -> openProvided(name);
            });
        }
        runner = new OrderRunner(config.engineId(), epoch, pool, transports, directory::await, reporter, config.workerId(),
                config.concurrency(), config.dedupeCapacity(), config.peerWait(), workerMetrics).layerwise(config.layerwiseMinBytes())
                .holdPushes(config.holdPushPrefix(), config.holdPush());
        commands = new CommandLoop(new KafkaConsumer<>(consumerConfig(config.groupId()), new ByteArrayDeserializer(), new ByteArrayDeserializer()),
                topics.engineCommands(), config.engineId(), runner, gate, reporter, config.queueLimit(), config.commitInterval(),
                api == null ? null : api::publish);
        commands.position();
        commandThread = Thread.ofPlatform().name("worker-commands").start(commands);
    }

    /** Stops what {@link #openData} started, transports before the pool (their threads touch its memory). */
    private void closeData() {
        step("stop reading commands", () -> {
            if (commands != null) {
                commands.close();
                joinQuietly(commandThread);
            }
        });
        step("stop running orders", () -> {
            if (runner != null) {
                runner.close();
            }
        });
        for (KvTransport t : transports) {
            step("close transport " + t.name(), t::close);
        }
        transports.clear();
        step("free the pool", () -> {
            if (pool != null) {
                pool.close();
            }
        });
        commands = null;
        runner = null;
        gate = null;
        pool = null;
    }

    private static void joinQuietly(Thread t) {
        if (t == null) {
            return;
        }
        try {
            t.join(Duration.ofSeconds(10));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private java.util.concurrent.CompletableFuture<Void> announce(boolean leaving) {
        EngineRegistration r = registration(leaving);
        registration = leaving ? null : r;
        return reporter.registration(r);
    }

    /** The engine API's view of this worker. */
    private final class ApiHost implements EngineApiServer.Host {

        private final EngineFacts facts = new EngineFacts(config.engineId());

        @Override
        public String engineId() {
            return config.engineId();
        }

        @Override
        public EngineFacts facts() {
            return facts;
        }

        @Override
        public long knownEpoch() {
            EngineDirectory d = directory;
            return d == null ? 0 : d.get(config.engineId()).map(EngineRegistration::getInstanceEpoch).orElse(0L);
        }

        @Override
        public ObjectNode attach(ApiProtocol.Hello hello, boolean newInstance) throws ApiException {
            synchronized (WorkerApp.this) {
                if (lifecycle.isStopping()) {
                    throw new ApiException(ApiException.UNAVAILABLE, null, "the worker is stopping");
                }
                if (!newInstance) {
                    if (engine == null || !engine.geometry().equals(hello.geometry())) {
                        throw new ApiException(ApiException.POOL, "layout", "layout: a reconnect of instance " + hello.instanceEpoch()
                                + " must keep its layout (" + (engine == null ? "none" : engine.geometry()) + ")");
                    }
                    return welcomeExtra();
                }
                if (pool != null) {
                    log.atInfo().addKeyValue("engineId", config.engineId()).addKeyValue("instanceEpoch", hello.instanceEpoch())
                            .log("a new instance of the engine registered: rebuilding the data plane over its pool");
                    closeData();
                }
                if (hello.httpUrl() != null && !hello.httpUrl().isBlank()) {
                    // The proxy connects to the URL the engine announces: a loopback URL with peers on other hosts is refused
                    // here, where the engine hears why, instead of every request to it failing later.
                    try {
                        Addresses.requireReachableUrl("http_url (the engine's advertised URL)", hello.httpUrl(), config.bootstrapServers());
                    } catch (IllegalArgumentException e) {
                        throw new ApiException(ApiException.BAD_REQUEST, "http_url", e.getMessage());
                    }
                }
                KvPool p = mapPool(hello);
                Engine previous = engine;
                engine = new Engine(hello.instanceEpoch(), hello.role(), hello.model(), hello.httpUrl(), hello.geometry(), hello.tpRank(),
                        hello.tpSize(), hello.pool() != null && ApiProtocol.PoolSpec.CUDA_IPC.equals(hello.pool().kind()) ? hello.pool().regions() : null,
                        hello.blockHash());
                try {
                    openData(p);
                    announce(false).get(30, TimeUnit.SECONDS);
                    if (previous != null) {
                        cleared(previous.instanceEpoch(), "new_instance"); // what the old instance cached is gone with it
                    }
                } catch (IllegalArgumentException e) {
                    closeData();
                    throw new ApiException(ApiException.POOL, null, "the worker cannot serve this engine: " + e.getMessage());
                } catch (Exception e) {
                    closeData();
                    throw new ApiException(ApiException.UNAVAILABLE, null, "cannot announce engine " + config.engineId() + ": " + e);
                }
                return welcomeExtra();
            }
        }

        private ObjectNode welcomeExtra() {
            ObjectNode extra = ApiFrames.object().put("worker_id", config.workerId()).put("pool_location", pool.location());
            ArrayNode eps = extra.putArray("endpoints");
            for (TransportEndpoint e : registration.getEndpoints()) {
                eps.addObject().put("transport", e.getTransport()).put("address", e.getAddress());
            }
            return extra;
        }

        private KvPool mapPool(ApiProtocol.Hello hello) throws ApiException {
            ApiProtocol.PoolSpec spec = hello.pool();
            try {
                if (spec == null) {
                    if (config.poolPath() == null) {
                        throw new ApiException(ApiException.POOL, "pool", "pool: the hello names no pool and worker.pool.path is not set: send"
                                + " {\"kind\": \"shm\", \"path\": ...} or {\"kind\": \"cuda_ipc\", ...}");
                    }
                    return HostKvPool.mapFile(hello.geometry(), config.poolPath());
                }
                if (ApiProtocol.PoolSpec.SHM.equals(spec.kind())) {
                    java.nio.file.Path file = java.nio.file.Path.of(spec.path());
                    if (!java.nio.file.Files.isRegularFile(file)) {
                        throw new ApiException(ApiException.POOL, "pool.path", "pool.path: " + file + " is not a file this worker can see (the engine"
                                + " creates its pool file, e.g. under /dev/shm, before the hello)");
                    }
                    return HostKvPool.mapFile(hello.geometry(), file);
                }
                KvPoolImporter importer = KvPoolImporter.find(spec.kind()).orElseThrow(() -> new ApiException(ApiException.POOL, "pool.kind",
                        "pool.kind: '" + spec.kind() + "' pools need a module this worker does not have (orbitkv-gpu for cuda_ipc)"));
                return importer.open(config.engineId(), hello.geometry(), spec.device(), spec.regions());
            } catch (IllegalArgumentException e) {
                throw new ApiException(ApiException.POOL, "pool", "pool: " + e.getMessage().replace("worker.pool.path: ", ""));
            } catch (IllegalStateException | java.io.UncheckedIOException e) {
                throw new ApiException(ApiException.POOL, "pool", "pool: " + e.getMessage());
            }
        }

        @Override
        public java.util.concurrent.CompletableFuture<String> report(ApiProtocol.FactRequest f) {
            PushGate g = gate;
            if (g != null && f.fact().payload() instanceof io.orbitkv.pd.events.CancelRequested c) {
                // The engine gave the request up (its lease unconfirmed or lost, the KV corrupt, its client gone): no push for it
                // may land from now on, whatever the decider's abort and release — which reach this worker only as fast as its
                // command stream (a push acknowledged after the lease's release, in the partitions chaos run).
                g.fenceRequest(f.fact().requestId(), "engine " + config.engineId() + " gave the request up: " + c.getReason());
            }
            java.util.concurrent.CompletableFuture<String> done = new java.util.concurrent.CompletableFuture<>();
            producer.send(facts.record(topics, f.fact(), f.trace(), f.marks()), (md, err) -> {
                if (err != null) {
                    done.completeExceptionally(err);
                } else {
                    done.complete(f.fact().eventId());
                }
            });
            // After the send (one producer, one partition per request: the fact precedes the push's reports in the log),
            // an order issued ahead of this prefill starts now.
            OrderRunner r = runner;
            if (r != null) {
                long heard = f.marks() == null ? Marks.nowMicros() : f.marks().get(Marks.API).orElse(Marks.nowMicros());
                switch (f.fact().payload()) {
                    case PrefillCompleted pc -> r.prefillCompleted(f.fact().requestId(), pc.getSourceBlocks(), pc.getInstanceEpoch(),
                            pc.getFirstToken(), f.marks() == null ? 0 : f.marks().get(Marks.COMPUTE_END).orElse(0), heard);
                    case PrefillFailed pf -> r.prefillFailed(f.fact().requestId(), pf.getReason(), heard);
                    default -> { }
                }
            }
            return done;
        }

        @Override
        public void progress(long instanceEpoch, ApiProtocol.PrefillProgress p, long receivedMicros) {
            OrderRunner r = runner;
            if (r != null) {
                r.progress(p.requestId(), p, instanceEpoch, receivedMicros);
            }
        }

        @Override
        public java.util.concurrent.CompletableFuture<String> reportKv(long instanceEpoch, ApiProtocol.KvEventsRequest r) {
            java.util.concurrent.CompletableFuture<String> done = new java.util.concurrent.CompletableFuture<>();
            java.util.concurrent.atomic.AtomicInteger left = new java.util.concurrent.atomic.AtomicInteger(r.events().size());
            long now = System.currentTimeMillis();
            String last = "kv/" + instanceEpoch + "/" + r.events().get(r.events().size() - 1).seq();
            // One producer, one partition per engine: the events land in the order the engine reported them.
            for (ApiProtocol.KvEvent e : r.events()) {
                producer.send(kvRecord(instanceEpoch, e.seq(), now, e.payload()), (md, err) -> {
                    if (err != null) {
                        done.completeExceptionally(err);
                    } else if (left.decrementAndGet() == 0) {
                        done.complete(last);
                    }
                });
            }
            return done;
        }

        @Override
        public void detach(long instanceEpoch) {
            synchronized (WorkerApp.this) {
                if (engine == null || engine.instanceEpoch() != instanceEpoch) {
                    return;
                }
                cleared(instanceEpoch, "deregistered");
                try {
                    announce(true).get(10, TimeUnit.SECONDS);
                } catch (Exception e) {
                    log.atWarn().log("could not announce that engine " + config.engineId() + " left: " + e);
                }
                closeData();
                engine = null;
                log.atInfo().addKeyValue("engineId", config.engineId()).addKeyValue("instanceEpoch", instanceEpoch)
                        .log("the engine said goodbye: announced that it left; waiting for its next instance");
            }
        }
    }

    /** A KV cache event of this worker's engine, keyed by the engine id (one partition per engine keeps its order). */
    private org.apache.kafka.clients.producer.ProducerRecord<String, byte[]> kvRecord(long instanceEpoch, long seq, long atMs, Object payload) {
        io.orbitkv.pd.events.KvCacheEvent ev = io.orbitkv.pd.events.KvCacheEvent.newBuilder().setEngineId(config.engineId())
                .setInstanceEpoch(instanceEpoch).setSeq(seq).setEventTimeMs(atMs).setPayload(payload).build();
        String topic = topics.kvEvents().name();
        return new org.apache.kafka.clients.producer.ProducerRecord<>(topic, config.engineId(),
                topics.kvEvents().valueSerde().serializer().serialize(topic, ev));
    }

    /**
     * Says that nothing the engine's instance {@code instanceEpoch} cached is cached any more (seq 0: the worker's, outside
     * the engine's own numbering). Best effort: a reader also drops an older instance's blocks on its newer epoch.
     */
    private void cleared(long instanceEpoch, String reason) {
        if (producer == null) {
            return;
        }
        producer.send(kvRecord(instanceEpoch, 0, System.currentTimeMillis(), io.orbitkv.pd.events.AllBlocksCleared.newBuilder().setReason(reason).build()),
                (md, err) -> {
                    if (err != null) {
                        log.atWarn().log("could not write that engine " + config.engineId() + "'s KV cache is cleared (" + reason + "): " + err);
                    }
                });
    }

    /** A transport of another module (cuda, mooncake): refused with the provider's reason where it cannot run. */
    private KvTransport openProvided(String name) {
        KvTransportProvider p = KvTransportProvider.find(name)
                .orElseThrow(() -> new IllegalArgumentException("worker.transports: unknown transport '" + name + "'"));
        try {
            return p.open(config.workerId(), gate, config.transportSettings().getOrDefault(name, Map.of()));
        } catch (TransportUnavailableException e) {
            throw new IllegalArgumentException("worker.transports: '" + name + "' cannot run on this machine: " + e.getMessage(), e);
        }
    }

    private EngineRegistration registration(boolean leaving) {
        List<TransportEndpoint> endpoints = new ArrayList<>();
        transports.forEach(t -> t.endpoint().ifPresent(endpoints::add));
        String httpUrl = engine.httpUrl();
        String model = engine.model();
        if (httpUrl.isEmpty() && directory != null) {
            // An engine that registers itself (on Kafka) adds its HTTP URL to this worker's registration; a worker
            // restarted under the same engine instance must keep it, or the proxy stops routing to a live engine
            // (seen in chaos: decode-0 gone from routing after its worker's restart until the engine's own restart).
            Optional<EngineRegistration> current = directory.get(config.engineId());
            if (current.isPresent() && current.get().getInstanceEpoch() == engine.instanceEpoch() && !current.get().getHttpUrl().isEmpty()) {
                httpUrl = current.get().getHttpUrl();
                model = current.get().getModel();
            }
        }
        return EngineRegistration.newBuilder().setEngineId(config.engineId()).setRole(engine.role()).setInstanceEpoch(engine.instanceEpoch())
                .setModel(model).setHttpUrl(httpUrl).setEndpoints(endpoints)
                .setLayout(engine.geometry().toLayout(engine.tpRank(), engine.tpSize()))
                .setRegions(engine.announcedRegions() != null ? engine.announcedRegions() : pool.memoryRegions())
                .setRegisteredAtMs(System.currentTimeMillis()).setDeregistered(leaving)
                .setBlockHashAlgorithm(engine.blockHash() == null ? null : engine.blockHash().algorithm())
                .setBlockHashSeed(engine.blockHash() == null ? null : engine.blockHash().seed()).build();
    }

    private Map<String, Object> producerConfig() {
        return KafkaClients.factProducer(config.bootstrapServers(), config.workerId() + "-reports", config.kafkaOverrides());
    }

    private Map<String, Object> consumerConfig(String groupId) {
        return KafkaClients.consumer(config.bootstrapServers(), config.workerId() + (groupId == null ? "-engines" : "-commands"), groupId,
                config.isolationLevel(), groupId == null ? "earliest" : "latest", config.kafkaOverrides());
    }

    /** The HTTP endpoint's host:port, when it is on. */
    public Optional<String> httpAddress() {
        return Optional.ofNullable(http).map(WorkerHttp::address);
    }

    /** This process's Prometheus registry. */
    public ComponentMetrics metrics() {
        return metrics;
    }

    public WorkerConfig config() {
        return config;
    }

    public KvPool pool() {
        return pool;
    }

    public PushGate gate() {
        return gate;
    }

    /** The registration this worker announced for its engine. */
    public EngineRegistration registration() {
        return registration;
    }

    /** The tcp endpoint address ({@code host:port}), if tcp is on. */
    public Optional<String> tcpAddress() {
        return transports.stream().filter(t -> t instanceof TcpTransport).findFirst().flatMap(KvTransport::endpoint)
                .map(TransportEndpoint::getAddress);
    }

    /** Requests the engine API refused, by error code (empty without the API). */
    public Map<String, Long> apiRefusals() {
        Map<String, Long> out = new java.util.TreeMap<>();
        if (api != null) {
            api.refusals().forEach((k, v) -> out.put(k, v.get()));
        }
        return out;
    }

    /** The last decision sequence number the engine API gave out (0 without it). */
    public long apiLastSeq() {
        return api == null ? 0 : api.lastSeq();
    }

    /** Whether an engine is connected to the engine API now. */
    public boolean engineConnected() {
        return api != null && api.engineConnected();
    }

    /** Drops the engine API's connections without a goodbye (fault drills, tests). */
    public void dropEngineConnections() {
        if (api != null) {
            api.dropConnections();
        }
    }

    public long completedOrders() {
        return runner == null ? 0 : runner.completedCount();
    }

    public long failedOrders() {
        return runner == null ? 0 : runner.failedCount();
    }

    public void awaitClose() throws InterruptedException {
        lifecycle.awaitStopped();
    }

    /** Where this worker is in its life ({@code /health} reports it). */
    public Lifecycle.State state() {
        return lifecycle.state();
    }

    /** Stops taking orders, cancels running pushes, announces that the engine left, frees everything. Idempotent. */
    @Override
    public void close() {
        if (!lifecycle.stopping()) {
            return;
        }
        try {
            step("stop the engine API", () -> {
                if (api != null) {
                    api.close();
                }
            });
            synchronized (this) {
                step("stop reading commands", () -> {
                    if (commands != null) {
                        commands.close();
                    }
                });
                step("stop running orders", () -> {
                    if (runner != null) {
                        runner.close();
                    }
                });
                step("announce that the engine left", () -> {
                    if (registration != null && producer != null) {
                        Engine current = engine;
                        if (current != null) {
                            cleared(current.instanceEpoch(), "worker_stopped");
                        }
                        try {
                            announce(true).get(10, TimeUnit.SECONDS);
                        } catch (Exception e) {
                            throw new IllegalStateException(e.toString(), e);
                        }
                    }
                });
                step("stop the engine directory", () -> {
                    if (directory != null) {
                        directory.close();
                    }
                });
                closeData();
            }
            step("close the producer", () -> {
                if (producer != null) {
                    producer.close(Duration.ofSeconds(10));
                }
            });
            step("close serdes", serdes::close);
            step("stop the HTTP endpoint", () -> {
                if (http != null) {
                    http.close();
                }
            });
            step("close metrics", metrics::close);
            log.atInfo().addKeyValue("engineId", config.engineId()).log("worker stopped");
        } finally {
            lifecycle.stopped();
        }
    }

    private void step(String what, Runnable r) {
        try {
            r.run();
        } catch (RuntimeException e) {
            log.atWarn().setCause(e).addKeyValue("engineId", config.engineId()).log("while stopping: could not " + what);
        }
    }
}
