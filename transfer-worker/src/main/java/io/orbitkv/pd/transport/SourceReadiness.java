package io.orbitkv.pd.transport;

/**
 * What of a push's source pages the engine has computed yet: a push started while its prefill still runs (layer by layer,
 * docs/worker.md "Layer by layer") sends each piece once it is complete. Offsets are a source region's byte offsets, as a
 * {@link io.orbitkv.pd.kv.TransferPlan}'s spans name them. Thread-safe.
 */
public interface SourceReadiness {

    /**
     * How many bytes from {@code offset} of source region {@code region}, up to {@code length}, are computed: all of them
     * once complete; 0 when the page at {@code offset} is not yet.
     */
    long readyBytes(int region, long offset, long length);

    /** A number that grows with every report (more computed, complete, failed): for {@link #awaitChange}. */
    long version();

    /**
     * Waits up to {@code timeoutMs} for a report after {@code version}; true if one came (more may be ready, or the source
     * is complete, or failed: {@link #failure}), false if none by then. The caller checks its own reasons to stop between
     * waits.
     */
    boolean awaitChange(long version, long timeoutMs) throws InterruptedException;

    /** Whether the prefill has completed: every piece is computed and {@link #firstToken} is known. */
    boolean complete();

    /** Waits up to {@code timeoutMs} for {@link #complete}; false if not by then or it never will be. */
    boolean awaitComplete(long timeoutMs) throws InterruptedException;

    /** The token the prefill sampled, once complete (null before, or if the engine did not say). */
    Integer firstToken();

    /** Why the source will never be complete (the prefill failed, the push was aborted), or null. */
    String failure();
}
