package io.orbitkv.pd.mooncake.te;

import io.orbitkv.pd.transport.TransferError;

/** A Mooncake call that failed: the function, its result code as the engine's headers name it, and what it was doing. */
public final class MooncakeException extends RuntimeException {

    private final String function;
    private final int code;

    public MooncakeException(String function, int code, String context) {
        super(function + " failed: " + ResultCode.describe(code) + (context == null || context.isEmpty() ? "" : " (" + context + ")"));
        this.function = function;
        this.code = code;
    }

    /** A call that reports failure without a code (a null handle, an invalid batch id). */
    public MooncakeException(String function, String message) {
        super(function + " failed: " + message);
        this.function = function;
        this.code = Integer.MIN_VALUE;
    }

    public String function() {
        return function;
    }

    /** The raw return value (either family, see {@link ResultCode}); {@link Integer#MIN_VALUE} when there was none. */
    public int code() {
        return code;
    }

    /** What a push reports for this failure. */
    public TransferError kind() {
        return code == Integer.MIN_VALUE ? TransferError.INTERNAL : ResultCode.of(code).kind();
    }
}
