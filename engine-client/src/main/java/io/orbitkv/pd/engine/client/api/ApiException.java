package io.orbitkv.pd.engine.client.api;

import java.util.List;

/**
 * A request the engine API refuses: a stable {@code code} a client can act on, the JSON {@code field} that was wrong
 * (null when the whole message was), and a message for people. Sent to the client as an {@code error} frame.
 */
public final class ApiException extends Exception {

    /** The frame could not be read (length, JSON, not an object): the connection cannot continue. */
    public static final String BAD_FRAME = "bad_frame";
    /** A frame over the size limit: the connection cannot continue. */
    public static final String TOO_LARGE = "too_large";
    /** A field is missing or has a wrong type or value. */
    public static final String BAD_REQUEST = "bad_request";
    /** An {@code op} this version does not know. */
    public static final String UNKNOWN_OP = "unknown_op";
    /** A protocol version this worker does not speak. */
    public static final String UNSUPPORTED_VERSION = "unsupported_version";
    /** A fact or other request before a successful {@code hello}. */
    public static final String NOT_REGISTERED = "not_registered";
    /** The hello names another engine than the one this worker serves. */
    public static final String WRONG_ENGINE = "wrong_engine";
    /** Another live connection already speaks for this engine at this (or a newer) instance epoch. */
    public static final String ENGINE_TAKEN = "engine_taken";
    /** A newer instance of the engine registered: this connection no longer speaks for it. */
    public static final String FENCED = "fenced";
    /** The engine's pool cannot be mapped or does not match (path, CUDA IPC handles, layout). */
    public static final String POOL = "pool";
    /** The worker could not do it now (Kafka unreachable, shutting down); the request may be retried. */
    public static final String UNAVAILABLE = "unavailable";

    /** Every code, for meters registered up front. */
    public static final List<String> CODES = List.of(BAD_FRAME, TOO_LARGE, BAD_REQUEST, UNKNOWN_OP, UNSUPPORTED_VERSION,
            NOT_REGISTERED, WRONG_ENGINE, ENGINE_TAKEN, FENCED, POOL, UNAVAILABLE);

    private final String code;
    private final String field;
    private long minInstanceEpoch;

    public ApiException(String code, String field, String message) {
        super(message);
        this.code = code;
        this.field = field;
    }

    /**
     * A {@link #FENCED} hello whose instance epoch is older than the engine's last instance: the smallest epoch the worker
     * takes (the {@code min_instance_epoch} of the error frame). A new instance on a host whose clock is behind the one its
     * predecessor ran on says hello again with it.
     */
    public ApiException minInstanceEpoch(long epoch) {
        this.minInstanceEpoch = epoch;
        return this;
    }

    /** The smallest instance epoch the worker takes, or 0 when this refusal names none. */
    public long minInstanceEpoch() {
        return minInstanceEpoch;
    }

    public String code() {
        return code;
    }

    /** The JSON field that was wrong, or null. */
    public String field() {
        return field;
    }

    /** Whether the connection must end after this error (the stream cannot be trusted, or the peer no longer counts). */
    public boolean fatal() {
        return BAD_FRAME.equals(code) || TOO_LARGE.equals(code) || FENCED.equals(code) || ENGINE_TAKEN.equals(code) || WRONG_ENGINE.equals(code)
                || UNSUPPORTED_VERSION.equals(code);
    }
}
