package io.orbitkv.pd.transport;

import java.util.Objects;

/** A push that was refused or failed, with its {@link TransferError kind} and a message a user can act on. */
public final class TransferException extends RuntimeException {

    private final TransferError kind;

    public TransferException(TransferError kind, String message) {
        this(kind, message, null);
    }

    public TransferException(TransferError kind, String message, Throwable cause) {
        super(message, cause);
        this.kind = Objects.requireNonNull(kind, "kind");
    }

    /** An unexpected failure (a bug, or a library that broke its contract): {@code INTERNAL}, {@code <what> failed: <cause>}. */
    public static TransferException unexpected(String what, Throwable cause) {
        return new TransferException(TransferError.INTERNAL, what + " failed: " + cause, cause);
    }

    public TransferError kind() {
        return kind;
    }

    public boolean retriable() {
        return kind.retriable();
    }

    /** {@code KIND: message}, the text reported in {@code TransferFailed.reason}. */
    public String reason() {
        return kind + ": " + getMessage();
    }
}
