package io.orbitkv.pd.worker.internal;

import static io.orbitkv.pd.runtime.HttpEndpoint.send;

import com.sun.net.httpserver.HttpExchange;
import io.orbitkv.pd.metrics.ComponentMetrics;
import io.orbitkv.pd.runtime.Health;
import io.orbitkv.pd.runtime.HttpEndpoint;
import io.orbitkv.pd.runtime.Lifecycle;
import java.io.IOException;
import java.util.concurrent.Executors;
import java.util.function.Supplier;

/**
 * The worker's HTTP endpoint: {@code GET /metrics} (Prometheus text), {@code GET /health}, and the probes
 * {@code /health/live} and {@code /health/ready} ({@link Health}). One daemon thread.
 */
public final class WorkerHttp implements AutoCloseable {

    private final HttpEndpoint endpoint;
    private final ComponentMetrics metrics;
    private final Supplier<String> health;
    private final Lifecycle lifecycle;
    private final Supplier<String> notReady;

    /**
     * @param health   the body of {@code /health}
     * @param notReady why the worker cannot take orders although it runs (no engine registered yet), or null
     */
    public WorkerHttp(String host, int port, ComponentMetrics metrics, Supplier<String> health, Lifecycle lifecycle, Supplier<String> notReady) {
        this.metrics = metrics;
        this.health = health;
        this.lifecycle = lifecycle;
        this.notReady = notReady;
        this.endpoint = HttpEndpoint.bind("worker.http.port", host, port,
                Executors.newSingleThreadExecutor(Thread.ofPlatform().daemon().name("worker-http").factory()), this::handle);
    }

    public WorkerHttp start() {
        endpoint.start();
        return this;
    }

    /** host:port actually bound. */
    public String address() {
        return endpoint.address();
    }

    private void handle(HttpExchange ex) throws IOException {
        try {
            String path = ex.getRequestURI().getPath();
            if (!"GET".equals(ex.getRequestMethod())) {
                send(ex, 405, "text/plain", "only GET is supported");
            } else if (path.equals("/metrics")) {
                send(ex, 200, ComponentMetrics.CONTENT_TYPE, metrics.scrape());
            } else if (Health.probe(path, lifecycle, notReady) instanceof Health.Answer a) {
                send(ex, a.status(), "application/json", a.json());
            } else if (path.equals("/health")) {
                send(ex, 200, "application/json", health.get());
            } else {
                send(ex, 404, "text/plain", "no such endpoint: " + path + " (try /metrics, /health, /health/live, /health/ready)");
            }
        } catch (RuntimeException e) {
            send(ex, 500, "text/plain", e.toString());
        } finally {
            ex.close();
        }
    }

    @Override
    public void close() {
        endpoint.close();
    }
}
