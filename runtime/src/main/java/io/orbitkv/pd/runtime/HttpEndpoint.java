package io.orbitkv.pd.runtime;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpHandler;
import com.sun.net.httpserver.HttpServer;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.ExecutorService;

/**
 * A component's small HTTP endpoint on the JDK's {@link HttpServer} ({@code /health}, {@code /metrics}, interactive
 * queries): the decider's, the worker's and the dashboard's. One way to bind it (an error naming the setting that chose
 * the address), to answer, and to stop it; the request routing stays with each component.
 */
public final class HttpEndpoint implements AutoCloseable {

    private final HttpServer server;
    private final ExecutorService executor;

    private HttpEndpoint(HttpServer server, ExecutorService executor) {
        this.server = server;
        this.executor = executor;
    }

    /**
     * Binds {@code host:port} (0: any free port) and routes every path to {@code handler}, run on {@code executor}; not
     * yet serving until {@link #start()}.
     *
     * @param setting the configuration key that chose the port, named in the error when it cannot be bound
     * @throws UncheckedIOException naming the setting and the address when the port is taken or the host unknown
     */
    public static HttpEndpoint bind(String setting, String host, int port, ExecutorService executor, HttpHandler handler) {
        HttpServer server;
        try {
            server = HttpServer.create(new InetSocketAddress(host, port), 0);
        } catch (IOException e) {
            executor.shutdownNow();
            throw new UncheckedIOException(setting + ": cannot listen on " + host + ":" + port + ": " + e.getMessage(), e);
        }
        server.setExecutor(executor);
        server.createContext("/", handler);
        return new HttpEndpoint(server, executor);
    }

    public HttpEndpoint start() {
        server.start();
        return this;
    }

    /** The host:port actually bound. */
    public String address() {
        return server.getAddress().getHostString() + ":" + server.getAddress().getPort();
    }

    public int port() {
        return server.getAddress().getPort();
    }

    /** Answers with {@code body} as UTF-8. */
    public static void send(HttpExchange ex, int status, String contentType, String body) throws IOException {
        send(ex, status, contentType, body.getBytes(StandardCharsets.UTF_8));
    }

    /**
     * Answers with {@code body}, never cached (every endpoint here is live state), and closes the exchange's body.
     */
    public static void send(HttpExchange ex, int status, String contentType, byte[] body) throws IOException {
        ex.getResponseHeaders().set("Content-Type", contentType);
        ex.getResponseHeaders().set("Cache-Control", "no-store");
        ex.sendResponseHeaders(status, body.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(body);
        }
    }

    /** Stops at once (no grace for exchanges in flight: these are short reads) and ends the handler threads. */
    @Override
    public void close() {
        server.stop(0);
        executor.shutdownNow();
    }
}
