package io.orbitkv.pd.worker;

import io.orbitkv.pd.schemas.config.KafkaClients;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.TransportEndpoint;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvPool;
import io.orbitkv.pd.metrics.ComponentMetrics;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.OrderTokens;
import io.orbitkv.pd.schemas.TopicAdmin;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.transport.KvTransport;
import io.orbitkv.pd.transport.KvTransportProvider;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.local.LocalFabric;
import io.orbitkv.pd.transport.local.LocalTransport;
import io.orbitkv.pd.transport.tcp.TcpTransport;
import io.orbitkv.pd.worker.internal.CommandLoop;
import io.orbitkv.pd.worker.internal.EngineDirectory;
import io.orbitkv.pd.worker.internal.EventReporter;
import io.orbitkv.pd.worker.internal.OrderRunner;
import io.orbitkv.pd.worker.internal.WorkerHttp;
import io.orbitkv.pd.worker.internal.WorkerMetrics;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import org.apache.kafka.clients.admin.Admin;
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
 * <p>Lifecycle: {@link #start()} once, {@link #close()} once (idempotent); {@link #awaitClose()} blocks until closed.
 */
public final class WorkerApp implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(WorkerApp.class);

    private final WorkerConfig config;
    private final EventSerdes serdes;
    private final Topics topics;
    private final AtomicBoolean started = new AtomicBoolean();
    private final AtomicBoolean closed = new AtomicBoolean();
    private final CountDownLatch closedLatch = new CountDownLatch(1);
    private KvPool pool;
    private PushGate gate;
    private final List<KvTransport> transports = new ArrayList<>();
    private KafkaProducer<String, byte[]> producer;
    private EventReporter reporter;
    private EngineDirectory directory;
    private OrderRunner runner;
    private CommandLoop commands;
    private EngineRegistration registration;
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
        this.httpConfig = httpConfig;
        this.metrics = ComponentMetrics.create("worker", config.workerId());
        this.workerMetrics = new WorkerMetrics(metrics.registry());
        this.serdes = EventSerdes.create(config.serde());
        this.topics = new Topics(config.topics(), serdes);
    }

    /** Allocates the pool, starts the transports, joins Kafka and announces the engine; returns when it takes orders. */
    public WorkerApp start() throws InterruptedException {
        if (!started.compareAndSet(false, true)) {
            throw new IllegalStateException("worker already started");
        }
        if (config.usesDevAuthKey()) {
            log.warn("auth.key is not set: using the built-in development key. Set auth.key (the decider's, >= 16 bytes, or hex:...) in production.");
        }
        try {
            pool = config.poolPath() == null ? HostKvPool.allocate(config.geometry()) : HostKvPool.mapFile(config.geometry(), config.poolPath());
            gate = new PushGate(config.engineId(), config::instanceEpoch, pool, new OrderTokens(config.authKey()), config.maxRuns(), 100_000);
            workerMetrics.receiving(gate);
            for (String name : config.transports()) {
                transports.add(switch (name) {
                    case "tcp" -> TcpTransport.start(config.tcp(), config.workerId(), gate);
                    case "local" -> new LocalTransport(LocalFabric.shared(), config.engineId() + "@" + config.instanceEpoch(), gate);
                    default -> KvTransportProvider.find(name)
                            .orElseThrow(() -> new IllegalArgumentException("worker.transports: unknown transport '" + name + "'"))
                            .open(config.workerId(), gate, config.transportSettings().getOrDefault(name, Map.of()));
                });
            }
            try (Admin admin = Admin.create(Map.of("bootstrap.servers", config.bootstrapServers()))) {
                TopicAdmin.ensureTopics(admin, topics);
            }
            producer = new KafkaProducer<>(producerConfig(), new StringSerializer(), new ByteArraySerializer());
            reporter = new EventReporter(producer, topics, config.engineId(), config.workerId());
            directory = new EngineDirectory(new KafkaConsumer<>(consumerConfig(null), new ByteArrayDeserializer(), new ByteArrayDeserializer()),
                    topics.engines(), engine -> transports.forEach(t -> t.forgetPeer(engine)));
            Thread.ofPlatform().daemon().name("worker-engines").start(directory);
            runner = new OrderRunner(config.engineId(), config.instanceEpoch(), pool, transports, directory, reporter, config.workerId(),
                    config.concurrency(), config.dedupeCapacity(), config.peerWait(), workerMetrics);
            commands = new CommandLoop(new KafkaConsumer<>(consumerConfig(config.groupId()), new ByteArrayDeserializer(), new ByteArrayDeserializer()),
                    topics.engineCommands(), config.engineId(), runner, gate, reporter, config.queueLimit(), config.commitInterval());
            commands.position();
            if (!directory.awaitCaughtUp(Duration.ofSeconds(60))) {
                log.warn("engine table not read to its end within 60 s; continuing");
            }
            registration = registration(false);
            reporter.registration(registration).get(60, TimeUnit.SECONDS);
            Thread.ofPlatform().name("worker-commands").start(commands);
            if (httpConfig.enabled()) {
                http = new WorkerHttp(httpConfig.host(), httpConfig.port(), metrics,
                        () -> "{\"engine\":\"" + config.engineId() + "\",\"status\":\"ok\",\"completed\":" + completedOrders()
                                + ",\"failed\":" + failedOrders() + "}").start();
                log.atInfo().addKeyValue("url", "http://" + http.address() + "/metrics").log("worker metrics listening");
            }
            log.atInfo().addKeyValue("engineId", config.engineId()).addKeyValue("instanceEpoch", config.instanceEpoch())
                    .addKeyValue("endpoints", registration.getEndpoints().stream().map(e -> e.getTransport() + "://" + e.getAddress()).toList())
                    .addKeyValue("pool", pool).log("worker ready");
            return this;
        } catch (InterruptedException e) {
            close();
            throw e;
        } catch (java.util.concurrent.ExecutionException | java.util.concurrent.TimeoutException e) {
            close();
            throw new IllegalStateException("cannot announce engine " + config.engineId() + " on " + topics.engines().name() + ": " + e, e);
        } catch (RuntimeException e) {
            close();
            throw e;
        }
    }

    private EngineRegistration registration(boolean leaving) {
        List<TransportEndpoint> endpoints = new ArrayList<>();
        transports.forEach(t -> t.endpoint().ifPresent(endpoints::add));
        return EngineRegistration.newBuilder().setEngineId(config.engineId()).setRole(config.role()).setInstanceEpoch(config.instanceEpoch())
                .setModel(config.model()).setHttpUrl("").setEndpoints(endpoints).setLayout(config.geometry().toLayout(config.tpRank(), config.tpSize()))
                .setRegions(pool.memoryRegions()).setRegisteredAtMs(System.currentTimeMillis()).setDeregistered(leaving).build();
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

    public long completedOrders() {
        return runner == null ? 0 : runner.completedCount();
    }

    public long failedOrders() {
        return runner == null ? 0 : runner.failedCount();
    }

    public void awaitClose() throws InterruptedException {
        closedLatch.await();
    }

    /** Stops taking orders, cancels running pushes, announces that the engine left, frees everything. Idempotent. */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        try {
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
                    try {
                        reporter.registration(registration(true)).get(10, TimeUnit.SECONDS);
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
            // Transports before the pool: their threads read and write its memory.
            for (KvTransport t : transports) {
                step("close transport " + t.name(), t::close);
            }
            step("close the producer", () -> {
                if (producer != null) {
                    producer.close(Duration.ofSeconds(10));
                }
            });
            step("free the pool", () -> {
                if (pool != null) {
                    pool.close();
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
            closedLatch.countDown();
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
