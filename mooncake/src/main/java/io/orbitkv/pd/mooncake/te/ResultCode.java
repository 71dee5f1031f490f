package io.orbitkv.pd.mooncake.te;

import io.orbitkv.pd.transport.TransferError;

/**
 * The engine's result codes. The C API returns two families: functions that return {@code int} directly report
 * {@code ERR_*} values from {@code error.h} (negative), and the ones that wrap a {@code Status} ({@code submitTransfer},
 * {@code getTransferStatus}, {@code freeBatchID}) return {@code Status::Code} (positive). Both name the same
 * conditions; {@link #of(int)} accepts either.
 */
public enum ResultCode {
    OK(0, 0, null),
    INVALID_ARGUMENT(1, -1, TransferError.INTERNAL),
    TOO_MANY_REQUESTS(2, -2, TransferError.BUSY),
    ADDRESS_NOT_REGISTERED(3, -3, TransferError.OUT_OF_RANGE),
    BATCH_BUSY(4, -4, TransferError.INTERNAL),
    DEVICE_NOT_FOUND(6, -6, TransferError.UNSUPPORTED),
    ADDRESS_OVERLAPPED(7, -7, TransferError.INTERNAL),
    NOT_SUPPORTED_TRANSPORT(8, Holder.NONE, TransferError.NO_TRANSPORT),
    DNS(101, -101, TransferError.PEER_UNREACHABLE),
    SOCKET(102, -102, TransferError.PEER_UNREACHABLE),
    MALFORMED_JSON(103, -103, TransferError.PROTOCOL),
    REJECT_HANDSHAKE(104, -104, TransferError.PEER_UNREACHABLE),
    METADATA(200, -200, TransferError.PEER_UNREACHABLE),
    ENDPOINT(201, -201, TransferError.PEER_UNREACHABLE),
    CONTEXT(202, -202, TransferError.INTERNAL),
    NUMA(300, -300, TransferError.INTERNAL),
    CLOCK(301, -301, TransferError.INTERNAL),
    MEMORY(302, -302, TransferError.INTERNAL),
    NOT_IMPLEMENTED(999, -303, TransferError.UNSUPPORTED),
    UNKNOWN(Holder.NONE, Holder.NONE, TransferError.INTERNAL);

    private static final class Holder {
        /** No value of that family (error.h has no ERR_ for kNotSupportedTransport): never matches a return value. */
        static final int NONE = Integer.MIN_VALUE;
    }

    private final int status;
    private final int err;
    private final TransferError kind;

    ResultCode(int status, int err, TransferError kind) {
        this.status = status;
        this.err = err;
        this.kind = kind;
    }

    /** The code for a return value of either family; {@link #UNKNOWN} for values neither header defines. */
    public static ResultCode of(int rc) {
        if (rc == 0) {
            return OK;
        }
        for (ResultCode c : values()) {
            if (c != UNKNOWN && rc != Holder.NONE && (rc > 0 ? c.status == rc : c.err == rc)) {
                return c;
            }
        }
        return UNKNOWN;
    }

    /** {@code ERR_SOCKET (-102)} or {@code Status::kSocket (102)}, as the engine's headers spell it. */
    public static String describe(int rc) {
        ResultCode c = of(rc);
        if (c == UNKNOWN) {
            return "unknown result " + rc;
        }
        return rc < 0 ? "ERR_" + c.name() + " (" + rc + ")" : "Status::" + statusName(c) + " (" + rc + ")";
    }

    private static String statusName(ResultCode c) {
        StringBuilder b = new StringBuilder("k");
        for (String w : c.name().split("_")) {
            b.append(w.charAt(0)).append(w.substring(1).toLowerCase(java.util.Locale.ROOT));
        }
        return b.toString();
    }

    /** What a push reports when a call fails with this code: a retriable kind where a retry may find things fixed. */
    public TransferError kind() {
        return kind;
    }
}
