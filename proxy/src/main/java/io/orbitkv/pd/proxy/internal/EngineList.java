package io.orbitkv.pd.proxy.internal;

import com.fasterxml.jackson.databind.JsonNode;
import io.orbitkv.pd.engine.client.http.CompletionRequest;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.proxy.routing.EngineInfo;
import io.vertx.core.Vertx;
import io.vertx.core.http.HttpClient;
import io.vertx.core.http.HttpMethod;
import io.vertx.core.http.RequestOptions;
import java.net.URI;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The engines the proxy routes to: the decider's {@code GET /engines} (any instance of several, the next asked when
 * one does not answer) (registrations with an HTTP URL that did not
 * leave, and their in-flight counts), refreshed every {@code proxy.engines.refresh}, plus the static ones from the
 * config. When the decider cannot be reached the last list stays in use.
 */
public final class EngineList {

    private static final Logger log = LoggerFactory.getLogger(EngineList.class);

    private final List<EngineInfo> staticEngines;
    private final List<URI> deciders;
    /** The decider instance asked now; the next one is tried when it does not answer. */
    private volatile int at;
    private volatile List<EngineInfo> current;
    /** Every engine the decider's last answer named (deregistered ones too) with its block size (0: unknown); null before the first. */
    private volatile Map<String, Integer> registered;
    private volatile long refreshedAt;
    private final java.util.concurrent.CompletableFuture<Void> firstRefresh = new java.util.concurrent.CompletableFuture<>();
    private boolean warned;

    public EngineList(List<EngineInfo> staticEngines, List<URI> deciders) {
        this.staticEngines = List.copyOf(staticEngines);
        this.deciders = List.copyOf(deciders);
        this.current = this.staticEngines;
    }

    public List<EngineInfo> current() {
        return current;
    }

    /**
     * Every engine registered with the deciders (deregistered ones too) with its block size (0: not said), or null while no
     * list came (no decider configured: never), the KV index's check of who may report a cache.
     */
    public Map<String, Integer> registered() {
        return registered;
    }

    /** Done once the list came from a decider (at once when there is no decider to ask: the static list is all). */
    public java.util.concurrent.CompletableFuture<Void> firstRefresh() {
        if (deciders.isEmpty()) {
            firstRefresh.complete(null);
        }
        return firstRefresh;
    }

    public long refreshedAtMs() {
        return refreshedAt;
    }

    /** Polls the decider every {@code period} on {@code vertx}'s event loop. */
    public void start(Vertx vertx, HttpClient client, Duration period) {
        if (deciders.isEmpty()) {
            return;
        }
        refresh(client);
        vertx.setPeriodic(period.toMillis(), id -> refresh(client));
    }

    private void refresh(HttpClient client) {
        int i = at;
        URI decider = deciders.get(i % deciders.size());
        RequestOptions o = new RequestOptions().setMethod(HttpMethod.GET).setAbsoluteURI(decider.resolve("/engines").toString())
                .setIdleTimeout(5000);
        client.request(o).compose(r -> r.send()).compose(r -> r.statusCode() == 200 ? r.body()
                        : io.vertx.core.Future.failedFuture("status " + r.statusCode()))
                .onSuccess(body -> {
                    try {
                        JsonNode all = CompletionRequest.json().readTree(body.getBytes());
                        current = merge(all);
                        Map<String, Integer> ids = new java.util.HashMap<>();
                        all.properties().forEach(e -> ids.put(e.getKey(), e.getValue().path("block_size").asInt(0)));
                        registered = Map.copyOf(ids);
                        refreshedAt = System.currentTimeMillis();
                        warned = false;
                        firstRefresh.complete(null);
                    } catch (Exception e) {
                        warn("unreadable engine list from " + decider + ": " + e.getMessage());
                    }
                })
                .onFailure(e -> {
                    // Any instance answers for every engine (the registrations are a global store): ask the next one.
                    at = i + 1;
                    warn("cannot refresh the engine list from " + decider + "/engines: " + e.getMessage()
                            + (deciders.size() > 1 ? "; asking " + deciders.get((i + 1) % deciders.size()) + " next" : ""));
                });
    }

    private void warn(String msg) {
        if (!warned) {
            warned = true;
            log.atWarn().log(msg + " (keeping the last list; warned once until it recovers)");
        }
    }

    /** The decider's answer merged with the static engines (a static entry wins for its id). */
    List<EngineInfo> merge(JsonNode engines) {
        Map<String, EngineInfo> out = new LinkedHashMap<>();
        engines.properties().forEach(e -> {
            JsonNode v = e.getValue();
            String url = v.path("http_url").asText("");
            if (url.isEmpty() || v.path("deregistered").asBoolean(false) || !v.has("role")) {
                return;
            }
            EngineRole role;
            try {
                role = EngineRole.valueOf(v.path("role").asText());
            } catch (IllegalArgumentException bad) {
                return;
            }
            String model = v.path("model").asText("");
            String algorithm = v.path("block_hash_algorithm").asText("");
            EngineInfo.Hashing hashing = algorithm.isEmpty() ? null
                    : new EngineInfo.Hashing(algorithm, v.path("block_hash_seed").asText(""), v.path("block_size").asInt(0));
            out.put(e.getKey(), new EngineInfo(e.getKey(), role, url, v.path("in_flight").asLong(0), model.isEmpty() ? null : model, hashing));
        });
        for (EngineInfo s : staticEngines) {
            EngineInfo d = out.get(s.engineId());
            out.put(s.engineId(), d == null ? s : new EngineInfo(s.engineId(), s.role(), s.httpUrl(), d.inFlight(), d.model(), d.hashing()));
        }
        return new ArrayList<>(out.values());
    }
}
