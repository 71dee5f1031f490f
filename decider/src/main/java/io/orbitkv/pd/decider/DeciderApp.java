package io.orbitkv.pd.decider;

import io.micrometer.core.instrument.binder.kafka.KafkaStreamsMetrics;
import io.orbitkv.pd.decider.internal.DeciderHttp;
import io.orbitkv.pd.decider.internal.DueTimers;
import io.orbitkv.pd.decider.internal.FlushAtCommitClients;
import io.orbitkv.pd.decider.internal.Ticker;
import io.orbitkv.pd.metrics.ComponentMetrics;
import io.orbitkv.pd.runtime.Lifecycle;
import io.orbitkv.pd.runtime.StreamsRunner;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.TopicAdmin;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.config.KafkaClients;
import java.time.Duration;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.streams.KafkaClientSupplier;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One decider instance: wires config → topology → {@link KafkaStreams}, plus the ticker (writes Ticks and
 * engine-epoch facts into the log) and the interactive-query HTTP endpoint. Instances with the same
 * application id share the partitions; each request is decided by exactly one of them at a time.
 */
public final class DeciderApp implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(DeciderApp.class);

    private final DeciderConfig config;
    private final EventSerdes serdes;
    private final Topics topics;
    private final KafkaStreams streams;
    private final Ticker ticker;
    private final DeciderHttp http;
    private final ComponentMetrics metrics;
    private final DeciderMetrics deciderMetrics;
    private final KafkaStreamsMetrics streamsMetrics;
    private final StreamsRunner runner;
    private final Lifecycle lifecycle;

    public DeciderApp(DeciderConfig config) {
        this.config = config;
        this.serdes = EventSerdes.create(config.serde());
        this.topics = new Topics(config.topics(), serdes);
        this.http = config.httpPort() >= 0 ? new DeciderHttp(config.httpHost(), config.httpAdvertisedHost(), config.httpPort()) : null;
        this.metrics = ComponentMetrics.create("decider", http != null ? http.advertised() : config.applicationId());
        this.deciderMetrics = new DeciderMetrics(metrics.registry());
        DueTimers dueTimers = new DueTimers();
        var topology = DeciderTopology.build(config, topics, deciderMetrics, dueTimers);
        KafkaClientSupplier clients = clientSupplier(config);
        this.streams = clients == null ? new KafkaStreams(topology, streamsProperties(config, http))
                : new KafkaStreams(topology, streamsProperties(config, http), clients);
        // Kafka Streams' own client metrics (thread, task, store, consumer, producer) as kafka_stream_* meters.
        this.streamsMetrics = new KafkaStreamsMetrics(streams);
        streamsMetrics.bindTo(metrics.registry());
        this.streams.setUncaughtExceptionHandler(e -> {
            log.atError().setCause(e).log("stream thread failed; replacing it");
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        this.ticker = new Ticker(config, topics, streams, dueTimers);
        this.runner = new StreamsRunner("decider", streams);
        this.lifecycle = new Lifecycle("decider " + config.applicationId());
    }

    /**
     * The stream threads' producer is waited for once per commit, not once per task ({@link FlushAtCommitClients}),
     * unless a production exception handler other than Streams' default is configured (one that lets Streams skip a
     * failed record would see its commit refused and the record re-processed instead) or {@code -Dorbitkv.decider.flushPerTask=true} asks for
     * Streams' own behaviour (to measure the difference); null: Streams' own clients.
     */
    static KafkaClientSupplier clientSupplier(DeciderConfig config) {
        boolean ownHandler = config.kafkaOverrides().keySet().stream().anyMatch(k -> k.endsWith("production.exception.handler"));
        if (ownHandler || Boolean.getBoolean("orbitkv.decider.flushPerTask")) {
            return null;
        }
        return new FlushAtCommitClients();
    }

    /** Streams properties for this config: low-latency overrides first, then the user's {@code kafka.*} overrides. */
    public static Properties streamsProperties(DeciderConfig config, DeciderHttp http) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, config.applicationId());
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, config.bootstrapServers());
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, config.guarantee() == DeciderConfig.Guarantee.EXACTLY_ONCE_V2
                ? StreamsConfig.EXACTLY_ONCE_V2 : StreamsConfig.AT_LEAST_ONCE);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, config.commitInterval().toMillis());
        p.put(StreamsConfig.STATE_DIR_CONFIG, config.stateDir().toAbsolutePath().toString());
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, config.threads());
        p.put(StreamsConfig.STATESTORE_CACHE_MAX_BYTES_CONFIG, DeciderTopology.storeCacheBytes(config));
        p.put(StreamsConfig.POLL_MS_CONFIG, 10);
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, (int) config.topics().replicationFactor());
        // Streams raises the producer's linger.ms to 100 ms by default: +50 ms on every decision at p50.
        p.put(StreamsConfig.producerPrefix(ProducerConfig.LINGER_MS_CONFIG), 0);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG), 100);
        // Under exactly-once a send that races a commit is answered CONCURRENT_TRANSACTIONS and retried after
        // retry.backoff.ms (100 ms by default), which lands straight in the decision latency tail.
        p.put(StreamsConfig.producerPrefix(ProducerConfig.RETRY_BACKOFF_MS_CONFIG), 5);
        // As every fact producer (KafkaClients.factProducer): a partition leader cut off from the other brokers but not from
        // this instance holds a produce request it can never complete until request.timeout.ms (30 s by default), and only
        // then does the producer look for the new leader — every decision of the partitions it led waited ~27 s in the
        // partitions chaos run.
        p.put(StreamsConfig.producerPrefix(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG), KafkaClients.FACT_REQUEST_TIMEOUT_MS);
        // And a fetch sent to a leader that was then cut off silently waits request.timeout.ms before the consumer looks for
        // the new one (KafkaClients.CONSUMER_REQUEST_TIMEOUT_MS).
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG), KafkaClients.CONSUMER_REQUEST_TIMEOUT_MS);
        // Each task reads one partition of one topic (the engines are a global store), so there is nothing to line up
        // between partitions and -1 processes in the same order as the default 0. It skips Streams' readiness
        // bookkeeping, which (4.4, PartitionGroup.readyToProcess) formats a message for every empty partition of
        // every task on every loop iteration.
        p.put(StreamsConfig.MAX_TASK_IDLE_MS_CONFIG, -1L);
        if (http != null) {
            p.put(StreamsConfig.APPLICATION_SERVER_CONFIG, http.advertised());
        }
        config.kafkaOverrides().forEach(p::put);
        return p;
    }

    /** Creates missing topics, starts the HTTP endpoint, Streams and the ticker. */
    public DeciderApp start() {
        lifecycle.starting();
        try {
            if (config.usesDevAuthKey()) {
                log.warn("auth.key is not set: using the built-in development key. Set auth.key (>= 16 bytes, or hex:...) in production.");
            }
            TopicAdmin.ensure(KafkaClients.admin(config.bootstrapServers(), config.kafkaOverrides()), topics);
            if (http != null) {
                http.start(streams, topics, metrics, deciderMetrics, lifecycle);
            }
            runner.start();
            ticker.start();
        } catch (RuntimeException e) {
            lifecycle.failed(e);
            throw e;
        }
        lifecycle.running();
        return this;
    }

    /** Where this instance is in its life ({@code /health} reports it beside the Streams state). */
    public Lifecycle.State state() {
        return lifecycle.state();
    }

    public KafkaStreams streams() {
        return streams;
    }

    /** The decider's own meters (facts, decisions, dead letters, per-fact processing time and its listener). */
    public DeciderMetrics deciderMetrics() {
        return deciderMetrics;
    }

    /** This process's Prometheus registry (served at {@code /metrics} when the HTTP endpoint is on). */
    public ComponentMetrics metrics() {
        return metrics;
    }

    public Topics topics() {
        return topics;
    }

    /** The interactive-query endpoint (tests: closing it leaves an instance Streams still lists, as a hung host would). */
    io.orbitkv.pd.decider.internal.DeciderHttp httpEndpoint() {
        return http;
    }

    /** The interactive-query base URL, or null when the endpoint is off. */
    public String httpUrl() {
        return http == null ? null : "http://" + http.advertised();
    }

    /** Waits until Streams is RUNNING; false on timeout or as soon as Streams has failed. */
    public boolean awaitRunning(Duration timeout) throws InterruptedException {
        return runner.awaitRunning(timeout);
    }

    /** Blocks until {@link #close()} has run (by a shutdown hook, for example). */
    public void awaitClose() throws InterruptedException {
        lifecycle.awaitStopped();
    }

    /** Stops the ticker, Streams (a last commit), the endpoint. Idempotent. */
    @Override
    public void close() {
        if (!lifecycle.stopping()) {
            return;
        }
        ticker.close();
        // Within the 8 s SIGTERM bound (ShutdownBound): a last commit and the threads' stop take well under a second with
        // the broker up; with it gone the close gives up here instead of after 30 s, and the next owner redoes what the
        // commit would have kept (exactly-once: the open transaction is aborted).
        runner.close(Duration.ofSeconds(5));
        if (http != null) {
            http.close();
        }
        serdes.close();
        streamsMetrics.close();
        metrics.close();
        lifecycle.stopped();
    }
}
