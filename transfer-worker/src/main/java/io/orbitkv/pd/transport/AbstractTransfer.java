package io.orbitkv.pd.transport;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicReference;

/**
 * What every transport's {@link Transfer} shares: the result, which completes once (the first outcome wins, a later
 * one is ignored), and the reasons to stop early. A transport extends it with the push itself, polls
 * {@link #stopReason()} at its frame boundaries and ends the push with {@link #succeed} or {@link #fail}.
 *
 * <p>Two things stop a push early: the caller's {@link #cancel} ({@link #cancelReason()}), and the transport's own
 * {@link #stop} (one stripe failed, so its siblings stop too). {@link #stopReason()} is the first of them; each reason
 * is set once, so the first one stays whatever comes after it.
 */
public abstract class AbstractTransfer implements Transfer {

    private final CompletableFuture<TransferResult> result = new CompletableFuture<>();
    private final AtomicReference<String> cancelled = new AtomicReference<>();
    private final AtomicReference<String> stopping = new AtomicReference<>();

    @Override
    public final CompletableFuture<TransferResult> result() {
        return result;
    }

    /** Records the caller's reason (the first one; null reads {@code cancelled}); the push stops at its next check. */
    @Override
    public final void cancel(String reason) {
        String why = reason == null ? "cancelled" : reason;
        cancelled.compareAndSet(null, why);
        stopping.compareAndSet(null, why);
    }

    /** Fails the push unless its result is already in. */
    public final void fail(TransferException e) {
        result.completeExceptionally(e);
    }

    /** Fails the push with {@code e} if it is a {@link TransferException}; anything else is a bug: {@code INTERNAL}, {@code <what> failed: <e>}. */
    protected final void failUnexpected(String what, RuntimeException e) {
        fail(e instanceof TransferException t ? t : TransferException.unexpected(what, e));
    }

    /** Completes the push unless its result is already in. */
    protected final void succeed(TransferResult r) {
        result.complete(r);
    }

    /** Asks the push to stop for a reason of the transport's own (not a cancellation by the caller). */
    protected final void stop(String reason) {
        stopping.compareAndSet(null, reason);
    }

    /** Why the push must stop, or null: the first of the caller's cancellation and the transport's own {@link #stop}. */
    protected final String stopReason() {
        return stopping.get();
    }

    /** {@code ABORTED} ({@code aborted: <reason>}) when the push must stop, else null. */
    protected final TransferException stopped() {
        String why = stopping.get();
        return why == null ? null : new TransferException(TransferError.ABORTED, "aborted: " + why);
    }

    /** The caller's reason to cancel, or null. */
    protected final String cancelReason() {
        return cancelled.get();
    }
}
