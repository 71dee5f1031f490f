package io.orbitkv.pd.runtime;

/**
 * The two probes every component serves, as an orchestrator (Kubernetes) reads them:
 * <ul>
 *   <li>{@code GET /health/live}: 200 while the process is worth keeping: starting, running, or stopping in order; 503
 *       once its start failed or it stopped (a restart is the cure).</li>
 *   <li>{@code GET /health/ready}: 200 only while it can do its job (running, and the component's own condition: the
 *       decider's Streams RUNNING, a worker's engine registered with its transports up, an engine registered, a proxy
 *       with engines to route to); 503 with the reason otherwise, so traffic goes elsewhere.</li>
 * </ul>
 * Both answer JSON: {@code {"status":"live|ready|not live|not ready","lifecycle":"running","reason":"…"}}.
 */
public final class Health {

    public static final String LIVE = "/health/live";
    public static final String READY = "/health/ready";

    /** One probe's answer: its HTTP status and JSON body. */
    public record Answer(int status, String json) { }

    private Health() { }

    /** Liveness from the lifecycle alone. */
    public static Answer live(Lifecycle lifecycle) {
        Lifecycle.State s = lifecycle.state();
        boolean live = s != Lifecycle.State.FAILED && s != Lifecycle.State.STOPPED;
        return answer(live, live ? "live" : "not live", s, live ? null : s == Lifecycle.State.FAILED ? "its start failed: " + lifecycle.failure()
                : "stopped");
    }

    /**
     * Readiness: running, and {@code notReady} (the component's own condition) null.
     *
     * @param notReady why the component cannot do its job now although it runs, or null when it can
     */
    public static Answer ready(Lifecycle lifecycle, String notReady) {
        Lifecycle.State s = lifecycle.state();
        String reason = s != Lifecycle.State.RUNNING ? "it is " + s.label() : notReady;
        return answer(reason == null, reason == null ? "ready" : "not ready", s, reason);
    }

    /** The answer for {@code path} ({@link #LIVE} or {@link #READY}), or null for another path. */
    public static Answer probe(String path, Lifecycle lifecycle, java.util.function.Supplier<String> notReady) {
        return switch (path) {
            case LIVE -> live(lifecycle);
            case READY -> ready(lifecycle, lifecycle.isRunning() ? notReady.get() : null);
            default -> null;
        };
    }

    private static Answer answer(boolean ok, String status, Lifecycle.State s, String reason) {
        StringBuilder b = new StringBuilder("{\"status\":\"").append(status).append("\",\"lifecycle\":\"").append(s.label()).append('"');
        if (reason != null) {
            b.append(",\"reason\":\"").append(escape(reason)).append('"');
        }
        return new Answer(ok ? 200 : 503, b.append('}').toString());
    }

    private static String escape(String s) {
        StringBuilder b = new StringBuilder(s.length());
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                default -> {
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        return b.toString();
    }
}
