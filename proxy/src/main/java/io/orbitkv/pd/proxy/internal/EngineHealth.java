package io.orbitkv.pd.proxy.internal;

import io.orbitkv.pd.proxy.routing.EngineInfo;
import io.vertx.core.Vertx;
import io.vertx.core.http.HttpClient;
import io.vertx.core.http.HttpMethod;
import io.vertx.core.http.RequestOptions;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Which engines the proxy should not route to now. The decider's engine table says which engines registered and did
 * not leave; it cannot say that one died a moment ago (its registration stays until it deregisters or comes back) or
 * hangs. So the proxy checks for itself: an engine it cannot connect to is marked down at once, and every
 * {@code proxy.engines.probe} each engine's {@code /health} is asked with a {@code probe-timeout}: a refused connection
 * or a status other than 200 marks it down at once, {@value #MISSES} checks in a row not answered in time (a hung or
 * stopped process keeps its socket open, so only a deadline notices it) mark it down, a 200 marks it up. A dead engine is
 * thus out of routing on the first failed call, a hung one within {@value #MISSES} × probe-timeout. One late answer
 * alone (a GC pause, a busy core, a slow link) no longer takes a healthy engine out of routing.
 */
public final class EngineHealth {

    private static final Logger log = LoggerFactory.getLogger(EngineHealth.class);

    /** Why and since when an engine is down. */
    public record Down(long sinceMs, String reason) { }

    private final Map<String, Down> down = new ConcurrentHashMap<>();
    /** Engines whose last check has not answered yet: no second check piles on. */
    private final java.util.Set<String> probing = ConcurrentHashMap.newKeySet();
    /** Checks in a row not answered in time, per engine. */
    private final Map<String, Integer> misses = new ConcurrentHashMap<>();

    /** Checks in a row not answered in time that mark an engine down. */
    public static final int MISSES = 3;

    /** What one check of an engine's {@code /health} found. */
    public enum Probe { HEALTHY, UNHEALTHY, UNREACHABLE, TIMED_OUT }

    /** Whether requests may be routed to {@code engineId} now. */
    public boolean usable(String engineId) {
        return !down.containsKey(engineId);
    }

    /** The engines routed around now, with why. */
    public Map<String, Down> down() {
        return Map.copyOf(down);
    }

    public void markDown(String engineId, String reason) {
        if (down.putIfAbsent(engineId, new Down(System.currentTimeMillis(), reason)) == null) {
            log.atWarn().addKeyValue("engineId", engineId).log("engine marked down, routing around it until its /health answers: " + reason);
            for (java.util.function.BiConsumer<String, String> l : downListeners) {
                l.accept(engineId, reason);
            }
        }
    }

    private final java.util.List<java.util.function.BiConsumer<String, String>> downListeners = new java.util.concurrent.CopyOnWriteArrayList<>();

    /** Told (engine id, reason) each time an engine is newly marked down: requests waiting on it need not wait on. */
    public void onDown(java.util.function.BiConsumer<String, String> listener) {
        downListeners.add(listener);
    }

    public void markUp(String engineId) {
        Down d = down.remove(engineId);
        if (d != null) {
            log.atInfo().addKeyValue("engineId", engineId).addKeyValue("downMs", System.currentTimeMillis() - d.sinceMs())
                    .log("engine healthy again, routing to it");
        }
    }

    /** Checks every engine of {@code engines} every {@code period} (0: never; then only failed calls mark engines down, and nothing up). */
    public void start(Vertx vertx, HttpClient client, Supplier<List<EngineInfo>> engines, Duration period, Duration timeout) {
        if (period.isZero()) {
            return;
        }
        vertx.setPeriodic(period.toMillis(), id -> {
            for (EngineInfo e : engines.get()) {
                probe(client, e, timeout);
            }
        });
    }

    private void probe(HttpClient client, EngineInfo e, Duration timeout) {
        if (!probing.add(e.engineId())) {
            return; // the last check of this engine is still waiting: it will say
        }
        RequestOptions o = new RequestOptions().setMethod(HttpMethod.GET).setAbsoluteURI(e.httpUrl() + "/health").setTimeout(timeout.toMillis());
        client.request(o).compose(r -> r.send()).compose(r -> r.body().map(b -> r.statusCode())).onComplete(ar -> {
            probing.remove(e.engineId());
            Probe p = ar.succeeded() ? (ar.result() == 200 ? Probe.HEALTHY : Probe.UNHEALTHY)
                    : timedOut(ar.cause()) ? Probe.TIMED_OUT : Probe.UNREACHABLE;
            probed(e.engineId(), p, ar.succeeded() ? "/health answered " + ar.result()
                    : "/health not answered within " + timeout.toMillis() + " ms: " + ar.cause().getMessage());
        });
    }

    /** What one check found: up on a 200, down on a definite failure or on the {@value #MISSES}th check in a row not answered. */
    public void probed(String engineId, Probe p, String why) {
        switch (p) {
            case HEALTHY -> {
                misses.remove(engineId);
                markUp(engineId);
            }
            case TIMED_OUT -> {
                int n = misses.merge(engineId, 1, Integer::sum);
                if (n >= MISSES) {
                    markDown(engineId, why + " (" + n + " checks in a row)");
                }
            }
            default -> {
                misses.remove(engineId);
                markDown(engineId, why);
            }
        }
    }

    private static boolean timedOut(Throwable t) {
        for (Throwable c = t; c != null; c = c.getCause()) {
            if (c instanceof java.util.concurrent.TimeoutException || c.getClass().getSimpleName().contains("Timeout")
                    || String.valueOf(c.getMessage()).contains("timeout")) {
                return true;
            }
        }
        return false;
    }
}
