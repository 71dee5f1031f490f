package io.orbitkv.pd.proxy.internal;

import io.vertx.core.Vertx;
import io.vertx.core.http.HttpConnection;
import io.vertx.core.http.HttpServerRequest;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Deadlines for what clients send, so that a client cannot hold the proxy's connections by sending nothing: a
 * connection with no request in progress — just opened, or between keep-alive requests, or stalled inside a request
 * head (the server sees a request only once its head is complete) — is closed after {@code idle}; a request body not
 * complete within {@code body} of its head gets 408 and its connection closed. A request being answered is never
 * timed out here: a slow answer is the engines', bounded by {@code proxy.timeout.request}. Needs a server without h2c
 * detection (which holds a connection back until its first bytes arrive). (Before: the server's idle
 * timeout was 0, and stalled heads, stalled bodies and silent connections stayed open past 60 s: issue 22.)
 */
public final class ClientDeadlines {

    private final Vertx vertx;
    private final Duration idle;
    private final Duration body;
    /** Per connection: its idle timer (-1: none armed) and its requests in progress. */
    private final Map<HttpConnection, long[]> connections = new ConcurrentHashMap<>();

    public ClientDeadlines(Vertx vertx, Duration idle, Duration body) {
        this.vertx = vertx;
        this.idle = idle;
        this.body = body;
    }

    /** A new connection: idle until its first request head is complete. */
    public void opened(HttpConnection c) {
        long[] s = {-1, 0};
        connections.put(c, s);
        c.closeHandler(v -> {
            long[] gone = connections.remove(c);
            if (gone != null && gone[0] >= 0) {
                vertx.cancelTimer(gone[0]);
            }
        });
        arm(c, s);
    }

    /**
     * A request head arrived: the connection is busy until the answer ends (run what this returns then); its body must
     * come within the body deadline, else {@code onBodyTimeout}.
     */
    public Runnable started(HttpServerRequest req, Runnable onBodyTimeout) {
        HttpConnection c = req.connection();
        long[] s = connections.get(c);
        Runnable done = () -> { };
        if (s != null) {
            synchronized (s) {
                s[1]++;
                if (s[0] >= 0) {
                    vertx.cancelTimer(s[0]);
                    s[0] = -1;
                }
            }
            done = () -> finished(c, s);
        }
        if (req.isEnded()) {
            return done;
        }
        // Not cancelled at the body's end (the request's end handler is the body reader's): it checks instead.
        vertx.setTimer(body.toMillis(), id -> {
            if (!req.isEnded()) {
                onBodyTimeout.run();
            }
        });
        return done;
    }

    private void finished(HttpConnection c, long[] s) {
        synchronized (s) {
            s[1]--;
            if (s[1] == 0) {
                arm(c, s);
            }
        }
    }

    private void arm(HttpConnection c, long[] s) {
        synchronized (s) {
            if (s[0] >= 0) {
                vertx.cancelTimer(s[0]);
            }
            s[0] = vertx.setTimer(idle.toMillis(), id -> {
                synchronized (s) {
                    if (s[1] == 0) {
                        c.close();
                    }
                }
            });
        }
    }
}
