package io.orbitkv.pd.engine.client;

import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceContext;
import java.util.concurrent.CompletableFuture;

/**
 * An engine's side of the contract (docs/engine-integration.md): report facts, learn decisions. Two ways in: the
 * {@link EngineClient} talks Kafka itself; {@code io.orbitkv.pd.engine.client.api.EngineApiClient} goes through the
 * transfer worker's local engine API, as an engine in any other language does. Both write the same records.
 *
 * <p>Each report returns a future completed when the broker has the fact. {@code trace}: the request's trace context
 * as the engine received it (or null); the fact carries a child of it. {@code marks}: what the engine did for it
 * (null: none); the fact carries them with {@code out} added.
 */
public interface EngineControl extends AutoCloseable {

    String engineId();

    /** The instance epoch every fact of this engine carries. */
    long instanceEpoch();

    /** Prefill done: the prompt's KV is in {@code sourceBlocks} (token order), held until a release names the request. */
    CompletableFuture<Void> prefillCompleted(String requestId, int[] sourceBlocks, int numTokens, Integer firstToken, TraceContext trace, Marks marks);

    /** Prefill impossible; the engine holds no pages for the request. */
    CompletableFuture<Void> prefillFailed(String requestId, String reason, boolean retriable, TraceContext trace, Marks marks);

    /** Destination pages held under a lease; register {@link #awaitKv} before calling this, so no signal is missed. */
    CompletableFuture<Void> decodeReady(String requestId, String leaseId, long leaseEpoch, int[] destBlocks, long leaseDeadlineMs, TraceContext trace,
                                        Marks marks);

    /**
     * As {@link #decodeReady(String, String, long, int[], long, TraceContext, Marks)}, the prompt's first {@code cachedBlocks}
     * blocks already in the engine's prefix cache (it fills those pages itself; the order moves only the rest). A control
     * plane that cannot say so moves everything.
     */
    default CompletableFuture<Void> decodeReady(String requestId, String leaseId, long leaseEpoch, int[] destBlocks, long leaseDeadlineMs,
                                                int cachedBlocks, TraceContext trace, Marks marks) {
        return decodeReady(requestId, leaseId, leaseEpoch, destBlocks, leaseDeadlineMs, trace, marks);
    }

    CompletableFuture<Void> decodeRejected(String requestId, String reason, TraceContext trace, Marks marks);

    /** Still holding the lease; {@code seq} makes the event id unique per heartbeat. */
    CompletableFuture<Void> heartbeat(String requestId, String leaseId, long leaseEpoch, long extendToMs, int seq, TraceContext trace, Marks marks);

    CompletableFuture<Void> decodeCompleted(String requestId, int outputTokens, boolean recomputed, TraceContext trace, Marks marks);

    /** The engine itself asks to stop the request (e.g. the KV it received does not verify). */
    CompletableFuture<Void> cancel(String requestId, String reason, TraceContext trace, Marks marks);

    /**
     * The engine's KV cache changed: {@code payloads} in order, each a {@code BlockStored}, {@code BlockRemoved} or
     * {@code AllBlocksCleared} (vLLM's KV events), numbered by the client. Through the engine API the worker writes them to
     * {@code orbitkv.kv-events}; a client that cannot (an engine on Kafka clients of its own) drops them.
     */
    default CompletableFuture<Void> kvEvents(java.util.List<Object> payloads) {
        return CompletableFuture.completedFuture(null);
    }

    /**
     * How far the prefill of {@code requestId} has come (prompt tokens {@code [0, doneTokens)} in every layer,
     * {@code [doneTokens, chunkEnd)} in layers {@code [0, layers)}), so the worker pushes what is complete while the rest
     * computes; {@code sourceBlocks} (the pages, token order) in a request's first progress, else null. Unanswered: the
     * worker acts on it or not. A client without a worker beside it (Kafka clients of its own) drops it.
     */
    default void prefillProgress(String requestId, int[] sourceBlocks, int numTokens, int doneTokens, int chunkEnd, int layers) {
    }

    /** Whether {@link #prefillProgress} reaches a worker (an engine skips the work of reporting it otherwise). */
    default boolean takesPrefillProgress() {
        return false;
    }

    /**
     * Completes with the first of: the KV landed, recompute, or the request ended / its decode pages were released.
     * Call before reporting {@link #decodeReady}. A signal that arrived before (the request already ended) completes it
     * at once.
     */
    CompletableFuture<KvSignal> awaitKv(String requestId);

    /** Stops waiting (the engine gave up on the request, e.g. its HTTP client went away). */
    void forget(String requestId);

    /** Decisions delivered (after dedupe). */
    long decisionsSeen();

    /** Leaves: announces that the engine left (its in-flight work is void) and frees the connection. Idempotent. */
    @Override
    void close();
}
