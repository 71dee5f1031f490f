package io.orbitkv.pd.transport;

import java.util.concurrent.CompletableFuture;

/**
 * One push in flight. Its result completes only after every connection it used has stopped writing: with the
 * acknowledged bytes, or with a {@link TransferException}. So once the result is in, no byte of this push can
 * still land at the receiver, whatever the outcome. Transports implement it by extending {@link AbstractTransfer}.
 */
public interface Transfer {

    CompletableFuture<TransferResult> result();

    /** Stops the push at the next frame boundary; the result then fails with {@link TransferError#ABORTED}. Idempotent. */
    void cancel(String reason);
}
