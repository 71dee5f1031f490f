package io.orbitkv.pd.proxy.internal;

import com.fasterxml.jackson.databind.JsonNode;
import io.orbitkv.pd.engine.client.http.CompletionRequest;
import io.vertx.core.http.ConnectionPoolTooBusyException;
import java.net.ConnectException;
import java.util.concurrent.TimeoutException;

/**
 * Every upstream failure mapped to what the client sees, in one place (OpenAI-style error bodies):
 * <ul>
 *   <li>an engine that cannot be reached, resets the connection or answers 5xx/409: <b>502</b> {@code upstream_error};</li>
 *   <li>an engine that is overloaded, out of KV pages or starting (503), or no engine of a side available: <b>503</b>;</li>
 *   <li>no answer within {@code proxy.timeout.request}, or an engine's own timeout (504): <b>504</b>;</li>
 *   <li>an engine's 400/404/413 (it refused the input): passed through with the engine's message.</li>
 * </ul>
 */
public final class UpstreamErrors {

    private UpstreamErrors() { }

    /** Status, error type and message for the client. */
    public record Mapped(int status, String type, String message) { }

    /** An engine answered {@code status} with {@code body}. */
    public static Mapped fromStatus(String side, String engineId, int status, String body) {
        String upstream = message(body);
        String what = side + " engine " + engineId + " answered " + status + ": " + upstream;
        return switch (status) {
            case 400, 404, 413, 422 -> new Mapped(status, "invalid_request_error", what);
            case 503, 429 -> new Mapped(503, "service_unavailable", what);
            case 504 -> new Mapped(504, "timeout", what);
            default -> new Mapped(502, "upstream_error", what);
        };
    }

    /** Talking to an engine failed. */
    public static Mapped fromFailure(String side, String engineId, Throwable t) {
        Throwable c = t;
        while (c.getCause() != null && c.getCause() != c) {
            c = c.getCause();
        }
        if (c instanceof TimeoutException || c instanceof io.netty.channel.ConnectTimeoutException) {
            return new Mapped(504, "timeout", side + " engine " + engineId + " did not answer in time: " + c.getMessage());
        }
        if (c instanceof ConnectionPoolTooBusyException) {
            return new Mapped(503, "service_unavailable", "too many requests waiting for a connection to " + side + " engine " + engineId);
        }
        String why = c instanceof ConnectException ? "cannot connect" : noRoute(c) ? "cannot connect: no route to the engine's host"
                + " (a partition, or its address is wrong)" : c.getClass().getSimpleName();
        return new Mapped(502, "upstream_error", side + " engine " + engineId + " failed: " + why + ": " + c.getMessage());
    }

    /**
     * Whether {@code c} is how the kernel refuses a connection to a host it has no route to: Linux answers a connect to a
     * blackholed route with EINVAL ("Invalid argument"), to an unreachable network or a prohibited route with
     * ENETUNREACH / EHOSTUNREACH / EACCES. A client used to see only "SocketException: Invalid argument" (issue 31).
     */
    static boolean noRoute(Throwable c) {
        if (c instanceof java.net.NoRouteToHostException) {
            return true;
        }
        String m = c.getMessage() == null ? "" : c.getMessage();
        return c instanceof java.net.SocketException && (m.startsWith("Invalid argument") || m.startsWith("Network is unreachable")
                || m.startsWith("No route to host") || m.startsWith("Permission denied"));
    }

    public static Mapped noEngine(String side) {
        return new Mapped(503, "service_unavailable", "no " + side + " engine is available (none registered, or all left)");
    }

    public static Mapped timeout(String requestId, java.time.Duration limit) {
        return new Mapped(504, "timeout", "request " + requestId + " was not answered within " + limit + " (proxy.timeout.request); it was cancelled");
    }

    private static String message(String body) {
        if (body == null || body.isBlank()) {
            return "(no body)";
        }
        try {
            JsonNode n = CompletionRequest.json().readTree(body);
            JsonNode m = n.path("error").path("message");
            if (m.isTextual()) {
                return m.asText();
            }
        } catch (Exception e) {
            // not JSON: quote it
        }
        return body.length() > 300 ? body.substring(0, 300) + "..." : body;
    }
}
