package io.orbitkv.pd.decider.internal;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import com.sun.net.httpserver.HttpExchange;
import io.orbitkv.pd.decider.DeciderMetrics;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.metrics.ComponentMetrics;
import io.orbitkv.pd.runtime.Health;
import io.orbitkv.pd.runtime.HttpEndpoint;
import io.orbitkv.pd.runtime.Lifecycle;
import io.orbitkv.pd.schemas.EngineRegistrations;
import io.orbitkv.pd.schemas.EventDecodingException;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.state.DeciderState;
import io.orbitkv.pd.state.Phase;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.URI;
import java.net.URLDecoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Iterator;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.Executors;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyQueryMetadata;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.StreamsMetadata;
import org.apache.kafka.streams.state.HostInfo;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Interactive queries over HTTP, across every decider instance:
 * <ul>
 *   <li>{@code GET /requests/{id}}: the request's state and history, answered by whichever instance owns it
 *       (other instances forward the call);</li>
 *   <li>{@code GET /states}: requests per phase, summed over instances;</li>
 *   <li>{@code GET /engines}: in-flight requests per engine (what the proxy routes on), summed over instances,
 *       with each engine's registration;</li>
 *   <li>{@code GET /health}: this instance's Streams state;</li>
 *   <li>{@code GET /metrics}: this instance's Prometheus meters (phase and engine gauges refreshed from its stores).</li>
 * </ul>
 * {@code ?local=true} restricts an answer to this instance (used for the fan-out).
 *
 * <p>Health probes and metrics are answered on the endpoint's two threads; queries run on threads of their own (at most
 * {@link #MAX_QUERIES} at once, more get 503), and the fan-out asks every other instance at once with a
 * {@link #FORWARD_TIMEOUT}: an instance that does not answer is left out of the sums (named in the
 * {@code x-orbitkv-unreachable-instances} header) instead of failing the call. One unreachable instance used to hold
 * every {@code /engines} call 5 s on the two threads that also answer health probes, so a liveness probe could restart a
 * healthy instance (issue 31).
 */
public final class DeciderHttp implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(DeciderHttp.class);
    private static final ObjectMapper JSON = new ObjectMapper();

    private final HttpEndpoint endpoint;
    /** How long a forwarded query or a fan-out part may take from another instance. */
    static final Duration FORWARD_TIMEOUT = Duration.ofSeconds(2);
    /** Queries answered at once; more are refused (503) rather than queued behind slow fan-outs. */
    static final int MAX_QUERIES = 32;

    private final HttpClient client = HttpClient.newBuilder().connectTimeout(FORWARD_TIMEOUT).build();
    private final java.util.concurrent.ExecutorService queries = Executors.newThreadPerTaskExecutor(
            Thread.ofVirtual().name("decider-query-", 0).factory());
    private final java.util.concurrent.Semaphore queryPermits = new java.util.concurrent.Semaphore(MAX_QUERIES);
    private final String advertisedHost;
    private KafkaStreams streams;
    private Topics topics;
    private ComponentMetrics metrics;
    private DeciderMetrics deciderMetrics;
    private Lifecycle lifecycle;

    /** Binds the port now (Streams needs its {@code application.server} before it starts); serves from {@link #start}. */
    public DeciderHttp(String host, String advertisedHost, int port) {
        this.advertisedHost = advertisedHost;
        this.endpoint = HttpEndpoint.bind("decider.http.port", host, port,
                Executors.newFixedThreadPool(2, Thread.ofPlatform().daemon().name("decider-http-", 0).factory()), this::handle);
    }

    /** host:port as other instances reach it (the Streams {@code application.server}). */
    public String advertised() {
        return advertisedHost + ":" + endpoint.port();
    }

    /** Serves queries on {@code streams}, {@code metrics} at {@code /metrics}, and {@code lifecycle} in {@code /health}. */
    public void start(KafkaStreams streams, Topics topics, ComponentMetrics metrics, DeciderMetrics deciderMetrics, Lifecycle lifecycle) {
        this.streams = streams;
        this.topics = topics;
        this.metrics = metrics;
        this.deciderMetrics = deciderMetrics;
        this.lifecycle = lifecycle;
        endpoint.start();
        log.atInfo().addKeyValue("url", "http://" + advertised()).log("interactive queries listening");
    }

    private void handle(HttpExchange ex) throws IOException {
        String path = ex.getRequestURI().getPath();
        if ("GET".equals(ex.getRequestMethod()) && (path.startsWith("/requests/") || path.equals("/states") || path.equals("/engines"))) {
            if (!queryPermits.tryAcquire()) {
                try {
                    send(ex, 503, error(MAX_QUERIES + " queries in progress on this instance; retry"));
                } finally {
                    ex.close();
                }
                return;
            }
            queries.execute(() -> {
                try {
                    answer(ex, path);
                } catch (IOException e) {
                    log.atDebug().setCause(e).log("query answer not sent");
                } finally {
                    queryPermits.release();
                }
            });
            return;
        }
        answer(ex, path);
    }

    private void answer(HttpExchange ex, String path) throws IOException {
        // The exchange is closed after the error answer, not before it (a try-with-resources would close it first).
        try {
            boolean local = "local=true".equals(ex.getRequestURI().getQuery());
            if (!"GET".equals(ex.getRequestMethod())) {
                send(ex, 405, error("only GET is supported"));
            } else if (Health.probe(path, lifecycle, this::notReady) instanceof Health.Answer a) {
                send(ex, a.status(), a.json());
            } else if (path.equals("/health")) {
                send(ex, 200, JSON.createObjectNode().put("state", streams.state().name()).put("lifecycle", lifecycle.state().label()).toString());
            } else if (path.startsWith("/requests/") && path.length() > "/requests/".length()) {
                request(ex, URLDecoder.decode(path.substring("/requests/".length()), StandardCharsets.UTF_8), local);
            } else if (path.equals("/states")) {
                send(ex, 200, local ? localStates().toString() : partial(ex, sumOverInstances("/states")).toString());
            } else if (path.equals("/engines")) {
                send(ex, 200, local ? localLoad().toString() : engines(ex).toString());
            } else if (path.equals("/metrics")) {
                refreshGauges();
                HttpEndpoint.send(ex, 200, ComponentMetrics.CONTENT_TYPE, metrics.scrape());
            } else {
                send(ex, 404, error("no such endpoint: " + path + " (try /requests/{id}, /states, /engines, /health, /health/live, /health/ready, /metrics)"));
            }
        } catch (RuntimeException e) {
            log.atWarn().setCause(e).log("interactive query failed");
            send(ex, 503, error("not available now (" + e.getClass().getSimpleName() + ": " + e.getMessage() + "); retry"));
        } finally {
            ex.close();
        }
    }

    private void request(HttpExchange ex, String id, boolean local) throws IOException {
        KeyQueryMetadata md = streams.queryMetadataForKey(DeciderNames.REQUESTS_STORE, id, Serdes.String().serializer());
        HostInfo owner = md == null ? null : md.activeHost();
        if (!local && owner != null && !owner.equals(HostInfo.unavailable()) && !isSelf(owner)) {
            HttpResponse<String> r = get(owner, "/requests/" + id + "?local=true");
            send(ex, r.statusCode(), r.body());
            return;
        }
        ReadOnlyKeyValueStore<String, DeciderState> store = streams.store(StoreQueryParameters
                .fromNameAndType(DeciderNames.REQUESTS_STORE, QueryableStoreTypes.<String, DeciderState>keyValueStore())
                .withPartition(md == null ? null : md.partition()));
        DeciderState s = store.get(id);
        if (s == null) {
            send(ex, 404, error("request " + id + " is not known (never seen, or finished longer than decider.retention ago)"));
        } else {
            send(ex, 200, s.toString()); // Avro renders records as JSON
        }
    }

    private ObjectNode localStates() {
        ObjectNode out = JSON.createObjectNode();
        ReadOnlyKeyValueStore<String, DeciderState> store = streams.store(StoreQueryParameters
                .fromNameAndType(DeciderNames.REQUESTS_STORE, QueryableStoreTypes.<String, DeciderState>keyValueStore()));
        Map<String, Long> counts = new TreeMap<>();
        try (KeyValueIterator<String, DeciderState> it = store.all()) {
            while (it.hasNext()) {
                counts.merge(it.next().value.getPhase().name(), 1L, Long::sum);
            }
        }
        counts.forEach(out::put);
        return out;
    }

    private ObjectNode localLoad() {
        ObjectNode out = JSON.createObjectNode();
        ReadOnlyKeyValueStore<String, Long> store = streams.store(StoreQueryParameters
                .fromNameAndType(DeciderNames.LOAD_STORE, QueryableStoreTypes.<String, Long>keyValueStore()));
        try (KeyValueIterator<String, Long> it = store.prefixScan("engine/", Serdes.String().serializer())) {
            while (it.hasNext()) {
                KeyValue<String, Long> kv = it.next();
                out.put(kv.key.substring("engine/".length()), kv.value);
            }
        }
        return out;
    }

    /** Phase and engine gauges from this instance's stores; skipped while they are not queryable (rebalancing). */
    private void refreshGauges() {
        try {
            Map<Phase, Long> phases = new java.util.EnumMap<>(Phase.class);
            localStates().properties().forEach(f -> phases.put(Phase.valueOf(f.getKey()), f.getValue().asLong()));
            deciderMetrics.phases(phases);
            Map<String, Long> load = new TreeMap<>();
            localLoad().properties().forEach(f -> load.put(f.getKey(), f.getValue().asLong()));
            deciderMetrics.engines(load);
        } catch (RuntimeException e) {
            log.atDebug().setCause(e).log("stores not queryable now; gauges keep their last values");
        }
    }

    /** The sums of a fan-out; names the instances left out in the answer's header. */
    private static ObjectNode partial(HttpExchange ex, Sum sum) {
        if (!sum.unreachable().isEmpty()) {
            ex.getResponseHeaders().set("x-orbitkv-unreachable-instances", String.join(",", sum.unreachable()));
        }
        return sum.sum();
    }

    private ObjectNode engines(HttpExchange ex) {
        ObjectNode load = partial(ex, sumOverInstances("/engines"));
        ObjectNode out = JSON.createObjectNode();
        ReadOnlyKeyValueStore<String, byte[]> regs = streams.store(StoreQueryParameters
                .fromNameAndType(DeciderNames.ENGINES_STORE, QueryableStoreTypes.<String, byte[]>keyValueStore()));
        try (KeyValueIterator<String, byte[]> it = regs.all()) {
            while (it.hasNext()) {
                KeyValue<String, byte[]> kv = it.next();
                ObjectNode e = out.putObject(kv.key);
                e.put("in_flight", load.path(kv.key).asLong(0));
                try {
                    EngineRegistration r = topics.engines().valueSerde().deserializer().deserialize(topics.engines().name(), kv.value);
                    EngineRegistrations.Refusal bad = EngineRegistrations.check(kv.key, r, null);
                    if (bad != null) {
                        e.put("error", bad.reason()); // restored from the topic as it was: not routable
                        continue;
                    }
                    e.put("role", r.getRole().name()).put("instance_epoch", r.getInstanceEpoch()).put("http_url", r.getHttpUrl())
                            .put("deregistered", r.getDeregistered()).put("model", r.getModel());
                    // how it hashes its prefix-cache blocks: a router hashes prompts the same way (docs/routing.md)
                    if (r.getBlockHashAlgorithm() != null) {
                        e.put("block_hash_algorithm", r.getBlockHashAlgorithm()).put("block_hash_seed", r.getBlockHashSeed());
                    }
                    if (r.getLayout() != null) {
                        e.put("block_size", r.getLayout().getBlockSizeTokens());
                    }
                } catch (EventDecodingException bad) {
                    e.put("error", bad.getMessage());
                }
            }
        }
        for (Iterator<String> names = load.fieldNames(); names.hasNext(); ) {
            String engine = names.next();
            if (!out.has(engine)) {
                out.putObject(engine).put("in_flight", load.path(engine).asLong(0)).put("registered", false);
            }
        }
        return out;
    }

    /** Sums over the instances, and the instances that did not answer in time (left out). */
    private record Sum(ObjectNode sum, java.util.List<String> unreachable) { }

    /**
     * Sums numeric fields of {@code path?local=true} over every instance of the application, asking the others at once;
     * one that does not answer within {@link #FORWARD_TIMEOUT} is left out (and named), not waited for.
     */
    private Sum sumOverInstances(String path) {
        ObjectNode sum = JSON.createObjectNode();
        java.util.List<String> unreachable = new java.util.ArrayList<>();
        Map<HostInfo, java.util.concurrent.CompletableFuture<HttpResponse<String>>> parts = new java.util.LinkedHashMap<>();
        for (StreamsMetadata m : streams.metadataForAllStreamsClients()) {
            if (isSelf(m.hostInfo())) {
                add(sum, path.equals("/states") ? localStates() : localLoad());
            } else {
                parts.put(m.hostInfo(), client.sendAsync(HttpRequest.newBuilder(URI.create("http://" + m.hostInfo().host() + ":" + m.hostInfo().port()
                        + path + "?local=true")).timeout(FORWARD_TIMEOUT).GET().build(), HttpResponse.BodyHandlers.ofString()));
            }
        }
        for (Map.Entry<HostInfo, java.util.concurrent.CompletableFuture<HttpResponse<String>>> p : parts.entrySet()) {
            String who = p.getKey().host() + ":" + p.getKey().port();
            try {
                HttpResponse<String> r = p.getValue().get(FORWARD_TIMEOUT.toMillis() + 500, java.util.concurrent.TimeUnit.MILLISECONDS);
                if (r.statusCode() != 200) {
                    throw new IOException("answered " + r.statusCode() + ": " + r.body());
                }
                add(sum, JSON.readTree(r.body()));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException("interrupted", e);
            } catch (Exception e) {
                p.getValue().cancel(true);
                unreachable.add(who);
                log.atWarn().addKeyValue("instance", who).log("decider instance left out of " + path + ": " + e);
            }
        }
        return new Sum(sum, java.util.List.copyOf(unreachable));
    }

    private static void add(ObjectNode sum, JsonNode part) {
        part.properties().forEach(f -> sum.put(f.getKey(), sum.path(f.getKey()).asLong(0) + f.getValue().asLong(0)));
    }

    private boolean isSelf(HostInfo h) {
        return advertised().equals(h.host() + ":" + h.port());
    }

    private HttpResponse<String> get(HostInfo h, String pathAndQuery) {
        try {
            return client.send(HttpRequest.newBuilder(URI.create("http://" + h.host() + ":" + h.port() + pathAndQuery))
                    .timeout(FORWARD_TIMEOUT).GET().build(), HttpResponse.BodyHandlers.ofString());
        } catch (IOException e) {
            throw new UncheckedIOException("instance " + h + " unreachable: " + e.getMessage(), e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted", e);
        }
    }

    private static String error(String message) {
        return JSON.createObjectNode().put("error", message).toString();
    }

    /** Ready once Streams is RUNNING: before, during a rebalance or a restore, this instance answers no query. */
    private String notReady() {
        KafkaStreams.State s = streams.state();
        return s == KafkaStreams.State.RUNNING ? null : "Kafka Streams is " + s;
    }

    private static void send(HttpExchange ex, int status, String body) throws IOException {
        HttpEndpoint.send(ex, status, "application/json", body);
    }

    @Override
    public void close() {
        endpoint.close();
        queries.shutdownNow();
    }
}
