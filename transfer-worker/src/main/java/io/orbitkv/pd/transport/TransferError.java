package io.orbitkv.pd.transport;

/**
 * Why a push did not complete: the kinds a receiver refuses with (sent on the wire by their {@link #code()}) and
 * the kinds a sender runs into. {@link #retriable()} is what the worker reports in {@code TransferFailed}: a
 * retriable failure may succeed as a new attempt (a peer that restarts, a connection that drops); a refusal for
 * cause (forged token, stale epoch, pages outside the pool) will fail the same way again.
 */
public enum TransferError {
    /** The frame stream broke the wire format (bad magic, lengths, order of frames). */
    PROTOCOL(1, false),
    /** The push reached a worker that does not serve the destination engine. */
    WRONG_ENGINE(2, false),
    /** The destination's instance epoch or the lease epoch is no longer current; the lease was released. */
    STALE_EPOCH(3, false),
    /** The authorization token does not verify. */
    UNAUTHORIZED(4, false),
    /** A run or a write lies outside the registered pool or outside the order's destination pages. */
    OUT_OF_RANGE(5, false),
    /** Source and destination page shapes differ. */
    LAYOUT_MISMATCH(6, false),
    /** The order (attempt) was aborted, or its request is being recomputed at the destination. */
    ABORTED(7, false),
    /** The receiver has no capacity now (too many connections or sessions). */
    BUSY(8, true),
    /** The transport cannot serve this pool or peer (for example tcp to a pool without a host view). */
    UNSUPPORTED(9, false),
    /** No TCP connection could be made to the peer. */
    PEER_UNREACHABLE(10, true),
    /** The connection dropped mid-transfer (peer killed or restarted). */
    CONNECTION_LOST(11, true),
    /** No progress for the I/O timeout, or the order's deadline passed. */
    TIMEOUT(12, true),
    /** Neither side offers a transport the other can use. */
    NO_TRANSPORT(13, false),
    /** The peer's engine is not (yet) registered, or it left. */
    UNKNOWN_PEER(14, true),
    /** A bug or an unexpected failure; details in the message and the logs. */
    INTERNAL(15, true);

    private final int code;
    private final boolean retriable;

    TransferError(int code, boolean retriable) {
        this.code = code;
        this.retriable = retriable;
    }

    /** The wire code (ERROR frames). */
    public int code() {
        return code;
    }

    public boolean retriable() {
        return retriable;
    }

    /** The kind for a wire code; {@link #PROTOCOL} for codes this version does not know. */
    public static TransferError ofCode(int code) {
        for (TransferError e : values()) {
            if (e.code == code) {
                return e;
            }
        }
        return PROTOCOL;
    }
}
