package io.orbitkv.pd.dashboard.internal;

import static io.orbitkv.pd.runtime.HttpEndpoint.send;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import io.orbitkv.pd.dashboard.DashboardConfig;
import io.orbitkv.pd.dashboard.stats.StatsWindow;
import io.orbitkv.pd.metrics.ComponentMetrics;
import io.orbitkv.pd.runtime.Health;
import io.orbitkv.pd.runtime.HttpEndpoint;
import io.orbitkv.pd.runtime.Lifecycle;
import java.io.IOException;
import java.io.InputStream;
import java.net.URI;
import java.net.URLDecoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsMetadata;
import org.apache.kafka.streams.errors.InvalidStateStoreException;
import org.apache.kafka.streams.state.HostInfo;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The dashboard's HTTP endpoint, the same on every instance:
 * <ul>
 *   <li>{@code GET /} (and {@code /app.js}, {@code /style.css}): the page, from the jar; nothing from a CDN;</li>
 *   <li>{@code GET /api/overview?window=1s|1m&span=N} or {@code &from=MS&to=MS}: the merged statistics of every
 *       instance (each is asked for its partials over {@code /internal/partials}); an instance that does not answer
 *       is listed with {@code ok: false} and the answer is marked {@code partial};</li>
 *   <li>{@code GET /internal/partials?window=&from=&to=}: this instance's partial aggregates;</li>
 *   <li>{@code GET /metrics}: Prometheus; {@code GET /api/health}: this instance's Streams state.</li>
 * </ul>
 */
public final class DashboardHttp implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(DashboardHttp.class);
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final int MAX_SPAN = 3600;
    private static final int MAX_FAILURES = 25;
    private static final Map<String, String> STATIC = Map.of(
            "/", "index.html", "/index.html", "index.html", "/app.js", "app.js", "/style.css", "style.css");

    private final DashboardConfig config;
    private final HttpEndpoint endpoint;
    private final HttpClient client = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(2)).build();
    /**
     * Virtual threads: a handler blocks while it asks the other instances for their partials, and those may at the same
     * time be asking this one; a small fixed pool could be exhausted by such crossing calls.
     */
    private KafkaStreams streams;
    private Lifecycle lifecycle;
    private LocalView local;
    private DashboardMetrics metrics;
    private AtomicLong streamTime;

    public DashboardHttp(DashboardConfig config) {
        this.config = config;
        this.endpoint = HttpEndpoint.bind("dashboard.http.port", config.httpHost(), config.httpPort(),
                Executors.newThreadPerTaskExecutor(Thread.ofVirtual().name("dashboard-http-", 0).factory()), this::handle);
    }

    /** host:port as other instances (and browsers) reach it: the Streams {@code application.server}. */
    public String advertised() {
        return config.httpAdvertisedHost() + ":" + endpoint.port();
    }

    public void start(KafkaStreams streams, DashboardMetrics metrics, AtomicLong streamTime, Lifecycle lifecycle) {
        this.streams = streams;
        this.local = new LocalView(streams);
        this.metrics = metrics;
        this.streamTime = streamTime;
        this.lifecycle = lifecycle;
        endpoint.start();
        log.atInfo().addKeyValue("url", "http://" + advertised() + "/").log("dashboard listening");
    }

    private void handle(HttpExchange ex) throws IOException {
        long t0 = System.nanoTime();
        String path = ex.getRequestURI().getPath();
        // Resources close before catch clauses run: the error answers must be sent inside the try-with-resources.
        try (ex) {
            respond(ex, path);
        } finally {
            metrics.query(path.startsWith("/api/") || path.startsWith("/internal/") || path.equals("/metrics") ? path : "static",
                    System.nanoTime() - t0);
        }
    }

    private void respond(HttpExchange ex, String path) throws IOException {
        try {
            Map<String, String> q = query(ex.getRequestURI().getRawQuery());
            if (!"GET".equals(ex.getRequestMethod())) {
                send(ex, 405, "application/json", error("only GET is supported"));
            } else if (STATIC.containsKey(path)) {
                staticFile(ex, STATIC.get(path));
            } else if (path.equals("/api/overview")) {
                send(ex, 200, "application/json", overview(q).toString());
            } else if (path.equals("/internal/partials")) {
                Range r = range(q);
                send(ex, 200, "application/json", LocalView.toJson(local.read(r.window, r.from, r.to)).toString());
            } else if (Health.probe(path, lifecycle, this::notReady) instanceof Health.Answer a) {
                send(ex, a.status(), "application/json", a.json());
            } else if (path.equals("/api/health")) {
                send(ex, 200, "application/json", JSON.createObjectNode().put("state", streams.state().name())
                        .put("lifecycle", lifecycle.state().label()).put("stream_time", streamTime.get()).toString());
            } else if (path.equals("/metrics")) {
                refreshInflightGauges();
                send(ex, 200, ComponentMetrics.CONTENT_TYPE, metrics.scrape());
            } else {
                send(ex, 404, "application/json", error("no such endpoint: " + path + " (try /, /api/overview, /metrics, /api/health, /health/live, /health/ready)"));
            }
        } catch (IllegalArgumentException e) {
            send(ex, 400, "application/json", error(e.getMessage()));
        } catch (InvalidStateStoreException e) {
            send(ex, 503, "application/json", error("statistics not available yet (Streams is " + streams.state() + "); retry"));
        } catch (RuntimeException e) {
            log.atWarn().setCause(e).addKeyValue("path", path).log("dashboard query failed");
            send(ex, 503, "application/json", error("not available now (" + e.getClass().getSimpleName() + ": " + e.getMessage() + "); retry"));
        }
    }

    private void refreshInflightGauges() {
        try {
            metrics.inflight(local.inflight());
        } catch (InvalidStateStoreException e) {
            // not running yet: the gauges keep their last values
        }
    }

    private record Range(StatsWindow window, long from, long to) { }

    /** {@code window} (1s), then {@code from}/{@code to} (epoch ms), or {@code span} windows ending with the current one. */
    private static Range range(Map<String, String> q) {
        StatsWindow w = StatsWindow.parse(q.getOrDefault("window", "1s"));
        long to;
        long from;
        if (q.containsKey("from") && q.containsKey("to")) {
            from = w.start(number(q, "from"));
            to = w.start(number(q, "to") - 1) + w.sizeMs();
        } else {
            long span = q.containsKey("span") ? number(q, "span") : w == StatsWindow.ONE_SECOND ? 120 : 60;
            if (span < 1 || span > MAX_SPAN) {
                throw new IllegalArgumentException("span: must be 1.." + MAX_SPAN + " windows, got " + span);
            }
            to = w.start(System.currentTimeMillis()) + w.sizeMs();
            from = to - span * w.sizeMs();
        }
        if (to <= from || (to - from) / w.sizeMs() > MAX_SPAN) {
            throw new IllegalArgumentException("from/to: need from < to and at most " + MAX_SPAN + " windows, got " + from + ".." + to);
        }
        return new Range(w, from, to);
    }

    private ObjectNode overview(Map<String, String> q) {
        Range r = range(q);
        List<Overview.Partial> partials = new ArrayList<>();
        Map<String, Long> inflight = new TreeMap<>();
        List<JsonNode> failures = new ArrayList<>();
        ArrayNode instances = JSON.createArrayNode();
        boolean partial = false;
        String query = "/internal/partials?window=" + r.window.label() + "&from=" + r.from + "&to=" + r.to;
        // Ask the other instances in parallel, read the local stores meanwhile.
        Map<StreamsMetadata, CompletableFuture<String>> remote = new java.util.LinkedHashMap<>();
        for (StreamsMetadata m : streams.metadataForAllStreamsClients()) {
            remote.put(m, isSelf(m.hostInfo()) ? null : get(m.hostInfo(), query));
        }
        for (Map.Entry<StreamsMetadata, CompletableFuture<String>> entry : remote.entrySet()) {
            StreamsMetadata m = entry.getKey();
            String server = m.hostInfo().host() + ":" + m.hostInfo().port();
            LocalView.Part part;
            try {
                part = entry.getValue() == null ? local.read(r.window, r.from, r.to) : LocalView.fromJson(JSON.readTree(entry.getValue().join()));
            } catch (IOException | RuntimeException e) {
                log.atWarn().addKeyValue("instance", server).log("dashboard instance did not answer: " + e.getMessage());
                instances.addObject().put("server", server).put("ok", false).put("error", e.getMessage());
                partial = true;
                continue;
            }
            instances.addObject().put("server", server).put("ok", true);
            partials.addAll(part.partials());
            part.inflight().forEach((k, v) -> inflight.merge(k, v, Long::sum));
            failures.addAll(part.failures());
        }
        ObjectNode out = Overview.build(r.window, r.from, r.to, partials, inflight, failures, config.traceCommand(), MAX_FAILURES);
        out.put("generated_at", System.currentTimeMillis()).put("stream_time", streamTime.get()).put("state", streams.state().name())
                .put("partial", partial).put("poll_ms", config.pollInterval().toMillis());
        out.set("instances", instances);
        return out;
    }

    private boolean isSelf(HostInfo h) {
        return advertised().equals(h.host() + ":" + h.port());
    }

    private CompletableFuture<String> get(HostInfo h, String pathAndQuery) {
        return client.sendAsync(HttpRequest.newBuilder(URI.create("http://" + h.host() + ":" + h.port() + pathAndQuery))
                        .timeout(Duration.ofSeconds(5)).GET().build(), HttpResponse.BodyHandlers.ofString())
                .thenApply(r -> {
                    if (r.statusCode() != 200) {
                        throw new IllegalStateException("HTTP " + r.statusCode() + ": " + r.body());
                    }
                    return r.body();
                });
    }

    private static void staticFile(HttpExchange ex, String name) throws IOException {
        try (InputStream in = DashboardHttp.class.getResourceAsStream("/io/orbitkv/pd/dashboard/web/" + name)) {
            if (in == null) {
                send(ex, 404, "text/plain", "missing resource " + name);
                return;
            }
            String type = name.endsWith(".html") ? "text/html; charset=utf-8" : name.endsWith(".js") ? "text/javascript; charset=utf-8"
                    : "text/css; charset=utf-8";
            send(ex, 200, type, in.readAllBytes());
        }
    }

    private static Map<String, String> query(String raw) {
        Map<String, String> out = new HashMap<>();
        if (raw == null || raw.isEmpty()) {
            return out;
        }
        for (String pair : raw.split("&")) {
            int eq = pair.indexOf('=');
            String k = URLDecoder.decode(eq < 0 ? pair : pair.substring(0, eq), StandardCharsets.UTF_8);
            out.put(k, eq < 0 ? "" : URLDecoder.decode(pair.substring(eq + 1), StandardCharsets.UTF_8));
        }
        return out;
    }

    private static long number(Map<String, String> q, String key) {
        try {
            return Long.parseLong(q.get(key));
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(key + ": must be an integer, got '" + q.get(key) + "'");
        }
    }

    private static String error(String message) {
        return JSON.createObjectNode().put("error", message).toString();
    }


    /** Ready once Streams is RUNNING: before, the statistics are not queryable. */
    private String notReady() {
        KafkaStreams.State s = streams.state();
        return s == KafkaStreams.State.RUNNING ? null : "Kafka Streams is " + s;
    }

    @Override
    public void close() {
        endpoint.close();
    }
}
