package io.orbitkv.pd.dashboard;

import io.micrometer.core.instrument.binder.kafka.KafkaStreamsMetrics;
import io.orbitkv.pd.dashboard.internal.DashboardHttp;
import io.orbitkv.pd.dashboard.internal.DashboardMetrics;
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
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One dashboard instance: config → {@link DashboardTopology} → {@link KafkaStreams}, the HTTP endpoint (page, API,
 * Prometheus) and the process's meters. A separate application from the decider (its own application id, consumer
 * group, state and process): it reads the log like any other consumer, so it can be restarted, scaled or replayed
 * without touching a decision. Instances with the same application id share the partitions and answer each query
 * together. The demo embeds one with {@code new DashboardApp(config).start()} and prints {@link #url()}.
 */
public final class DashboardApp implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(DashboardApp.class);

    private final DashboardConfig config;
    private final EventSerdes serdes;
    private final Topics topics;
    private final ComponentMetrics metrics;
    private final DashboardHttp http;
    private final KafkaStreams streams;
    private final KafkaStreamsMetrics streamsMetrics;
    private final AtomicLong streamTime = new AtomicLong();
    private final DashboardMetrics observer;
    private final Lifecycle lifecycle = new Lifecycle("dashboard");
    private final StreamsRunner runner;

    public DashboardApp(DashboardConfig config) {
        this.config = config;
        this.serdes = EventSerdes.create(config.serde());
        this.topics = new Topics(config.topics(), serdes);
        this.http = new DashboardHttp(config);
        this.metrics = ComponentMetrics.create("dashboard", http.advertised());
        this.observer = new DashboardMetrics(metrics, streamTime);
        this.streams = new KafkaStreams(DashboardTopology.build(config, topics, observer), streamsProperties(config, http.advertised()));
        this.streams.setUncaughtExceptionHandler(e -> {
            log.atError().setCause(e).log("dashboard stream thread failed; replacing it");
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.REPLACE_THREAD;
        });
        this.runner = new StreamsRunner("dashboard", streams);
        this.streamsMetrics = new KafkaStreamsMetrics(streams);
        streamsMetrics.bindTo(metrics.registry());
    }

    /**
     * Streams properties: at-least-once (statistics tolerate a record counted twice after a crash; transactions would
     * cost the broker CPU the decider needs), read_committed (decisions of an aborted decider transaction are not
     * counted), then the user's {@code kafka.*} overrides.
     */
    public static Properties streamsProperties(DashboardConfig config, String applicationServer) {
        Properties p = new Properties();
        p.put(StreamsConfig.APPLICATION_ID_CONFIG, config.applicationId());
        p.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, config.bootstrapServers());
        p.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.AT_LEAST_ONCE);
        p.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, config.commitInterval().toMillis());
        p.put(StreamsConfig.STATE_DIR_CONFIG, config.stateDir().toAbsolutePath().toString());
        p.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, config.threads());
        p.put(StreamsConfig.REPLICATION_FACTOR_CONFIG, (int) config.topics().replicationFactor());
        p.put(StreamsConfig.APPLICATION_SERVER_CONFIG, applicationServer);
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.ISOLATION_LEVEL_CONFIG), "read_committed");
        p.put(StreamsConfig.consumerPrefix(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG), "earliest");
        config.kafkaOverrides().forEach(p::put);
        return p;
    }

    /** Creates missing topics, starts the HTTP endpoint and Streams. */
    public DashboardApp start() {
        lifecycle.starting();
        try {
            TopicAdmin.ensure(KafkaClients.admin(config.bootstrapServers(), config.kafkaOverrides()), topics);
            http.start(streams, observer, streamTime, lifecycle);
            runner.start();
        } catch (RuntimeException e) {
            lifecycle.failed(e);
            throw e;
        }
        lifecycle.running();
        return this;
    }

    /** The page's URL, e.g. {@code http://127.0.0.1:7080/}. */
    public String url() {
        return "http://" + http.advertised() + "/";
    }

    public KafkaStreams streams() {
        return streams;
    }

    public Topics topics() {
        return topics;
    }

    /** Waits until Streams is RUNNING; false on timeout or as soon as Streams has failed. */
    public boolean awaitRunning(Duration timeout) throws InterruptedException {
        return runner.awaitRunning(timeout);
    }

    /** Where this instance is in its life ({@code /api/health} reports it beside the Streams state). */
    public Lifecycle.State state() {
        return lifecycle.state();
    }

    /** Blocks until {@link #close()} has run (by a shutdown hook, for example). */
    public void awaitClose() throws InterruptedException {
        lifecycle.awaitStopped();
    }

    /** Stops the endpoint and Streams. Idempotent. */
    @Override
    public void close() {
        if (!lifecycle.stopping()) {
            return;
        }
        http.close();
        runner.close(Duration.ofSeconds(30));
        streamsMetrics.close();
        metrics.close();
        serdes.close();
        lifecycle.stopped();
    }
}
