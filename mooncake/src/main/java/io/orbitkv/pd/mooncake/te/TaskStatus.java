package io.orbitkv.pd.mooncake.te;

import io.orbitkv.pd.transport.TransferError;

/**
 * A request's state as {@code getTransferStatus} reports it ({@code STATUS_*} in {@code transfer_engine_c.h},
 * {@code Transport::TransferStatusEnum} inside the engine), and what each one means for a push.
 *
 * <p>Only {@link #COMPLETED} and {@link #FAILED} are terminal for the engine: a batch can be freed only after
 * every task reached one of them. {@link #TIMEOUT} is the engine saying a slice is late, not that it stopped: it may
 * still land, so a push that sees it stops submitting but keeps polling until the task ends.
 */
public enum TaskStatus {
    WAITING(0),
    PENDING(1),
    INVALID(2),
    CANCELED(3),
    COMPLETED(4),
    TIMEOUT(5),
    FAILED(6),
    /** A value this binding does not know (a newer engine). */
    UNKNOWN(-1);

    private final int code;

    TaskStatus(int code) {
        this.code = code;
    }

    /** The C value ({@code STATUS_WAITING} = 0 ... {@code STATUS_FAILED} = 6). */
    public int code() {
        return code;
    }

    public static TaskStatus of(int code) {
        for (TaskStatus s : values()) {
            if (s.code == code && s != UNKNOWN) {
                return s;
            }
        }
        return UNKNOWN;
    }

    /** Still moving: poll again later. */
    public boolean inFlight() {
        return this == WAITING || this == PENDING || this == TIMEOUT;
    }

    /**
     * Whether the engine is done with the task (no byte of it can land any more, the batch may be freed): completed,
     * failed, or a state in which the engine never started it ({@link #INVALID}, {@link #CANCELED}).
     */
    public boolean finished() {
        return this == COMPLETED || this == FAILED || this == INVALID || this == CANCELED;
    }

    /** The kind a push fails with when one of its requests ends (or lingers) in this state; null for the good ones. */
    public TransferError error() {
        return switch (this) {
            case WAITING, PENDING, COMPLETED -> null;
            // The engine gave up on the bytes (peer gone, connection reset, refused by the peer's engine): a new
            // attempt may succeed, as with a dropped tcp connection.
            case FAILED -> TransferError.CONNECTION_LOST;
            case TIMEOUT -> TransferError.TIMEOUT;
            case CANCELED -> TransferError.ABORTED;
            case INVALID, UNKNOWN -> TransferError.INTERNAL;
        };
    }
}
