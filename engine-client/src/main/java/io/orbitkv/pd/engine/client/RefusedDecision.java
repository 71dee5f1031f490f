package io.orbitkv.pd.engine.client;

/**
 * Thrown by a {@link DecisionListener} that will not act on a decision addressed to its engine because acting could
 * harm another request: a {@code ReleaseDecided} whose lease is not the one the engine announced for that request (a
 * stale or forged epoch would free the pages of a request still decoding), or one for pages the engine does not hold.
 * The engine client sends the record to the dead-letter topic with {@link #code()} and the message, and goes on.
 */
public final class RefusedDecision extends RuntimeException {

    private final String code;

    /** {@code code}: the dead letter's error type ({@code STALE_LEASE}, {@code UNKNOWN_REQUEST}, ...). */
    public RefusedDecision(String code, String message) {
        super(message);
        this.code = code;
    }

    public String code() {
        return code;
    }
}
