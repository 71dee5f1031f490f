package io.orbitkv.pd.worker.internal;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import io.orbitkv.pd.metrics.ComponentMetrics;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.Executors;
import java.util.function.Supplier;

/** The worker's HTTP endpoint: {@code GET /metrics} (Prometheus text) and {@code GET /health}. One daemon thread. */
public final class WorkerHttp implements AutoCloseable {

    private final HttpServer server;
    private final ComponentMetrics metrics;
    private final Supplier<String> health;

    public WorkerHttp(String host, int port, ComponentMetrics metrics, Supplier<String> health) {
        this.metrics = metrics;
        this.health = health;
        try {
            this.server = HttpServer.create(new InetSocketAddress(host, port), 0);
        } catch (IOException e) {
            throw new UncheckedIOException("worker.http.port: cannot listen on " + host + ":" + port + ": " + e.getMessage(), e);
        }
        server.setExecutor(Executors.newSingleThreadExecutor(Thread.ofPlatform().daemon().name("worker-http").factory()));
        server.createContext("/", this::handle);
    }

    public WorkerHttp start() {
        server.start();
        return this;
    }

    /** host:port actually bound. */
    public String address() {
        return server.getAddress().getHostString() + ":" + server.getAddress().getPort();
    }

    private void handle(HttpExchange ex) throws IOException {
        try {
            String path = ex.getRequestURI().getPath();
            if (!"GET".equals(ex.getRequestMethod())) {
                send(ex, 405, "text/plain", "only GET is supported");
            } else if (path.equals("/metrics")) {
                send(ex, 200, ComponentMetrics.CONTENT_TYPE, metrics.scrape());
            } else if (path.equals("/health")) {
                send(ex, 200, "application/json", health.get());
            } else {
                send(ex, 404, "text/plain", "no such endpoint: " + path + " (try /metrics, /health)");
            }
        } catch (RuntimeException e) {
            send(ex, 500, "text/plain", e.toString());
        } finally {
            ex.close();
        }
    }

    private static void send(HttpExchange ex, int status, String type, String body) throws IOException {
        byte[] bytes = body.getBytes(StandardCharsets.UTF_8);
        ex.getResponseHeaders().set("Content-Type", type);
        ex.sendResponseHeaders(status, bytes.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(bytes);
        }
    }

    @Override
    public void close() {
        server.stop(0);
    }
}
