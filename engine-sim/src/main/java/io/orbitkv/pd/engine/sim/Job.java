package io.orbitkv.pd.engine.sim;

import io.orbitkv.pd.engine.client.http.CompletionRequest;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceContext;
import io.vertx.core.Future;
import io.vertx.core.http.HttpServerResponse;

/**
 * One request's state, from its HTTP request to its answer: what it asked, where it is in the {@link JobFlow}, its
 * timers and timings. Touched on the engine's event loop only.
 */
final class Job {
    final String rid;
    final CompletionRequest request;
    final int[] tokens;
    /** Layers of the prompt's KV written into its pages so far (the fill's thread writes, the loop reads). */
    volatile int filledLayers;
    /** Runs on the loop each time the fill finishes a layer (a P/D prefill's progress report), or null. */
    volatile Runnable onFilled;
    final HttpServerResponse response;
    /** The trace the request came with (its {@code traceparent}), or null: facts about it carry a child of it. */
    final TraceContext trace;
    final long startNanos = System.nanoTime();
    /** Wall-clock marks (µs): HTTP request in, compute start/end, KvReady read, first token out; 0 = not yet. */
    final long inMicros;
    long computeStartMicros;
    long computeEndMicros;
    long kvReadyMicros;
    long landedMicros;
    long firstTokenMicros;
    /** Completes with null once the received KV verified (or when nothing is verified), else with the mismatch. */
    Future<SimModel.Mismatch> verified = Future.succeededFuture(null);
    /** The prompt's block hashes, as the prefix cache keys them: computed once per job ({@code JobFlow.hashes}). */
    java.util.List<byte[]> hashes;
    /** Decode: the KV of the prompt's cached prefix, written from this engine's prefix cache (null: nothing cached). */
    io.vertx.core.Future<Void> restored;
    long decodeStartNanos = -1;
    boolean gone;
    boolean finished;
    boolean computing;
    long heartbeatTimer = -1;
    long timeoutTimer = -1;
    /** The self-fencing timer: fires when no acknowledged renewal covers the lease any more. */
    long fenceTimer = -1;
    /** Until when (System.nanoTime) the decode's lease is surely held: lease - margin after the last fact known written. */
    long leaseUntilNanos;
    long leaseEpoch;
    String leaseId;
    int heartbeats;
    /** Send times (nanos) of lease facts not yet acknowledged, oldest first: decode-ready, then heartbeats (event loop only). */
    final java.util.ArrayDeque<Long> unconfirmed = new java.util.ArrayDeque<>();
    /** Whether the decode still waits for its KV (the lease must then be confirmed: {@code engine.kv.confirm-timeout}). */
    boolean awaitingKv;
    long kvWaitNanos = -1;
    long verifyNanos = -1;
    long prefillNanos = -1;
    long kvBytes;
    /** The job's sequence in the engine's step scheduler (unique per computation), or null before it has one. */
    String seq;
    /** Tokens the job's steps produced so far, and those sent. */
    int produced;
    int emitted;
    long lastTokenNanos;
    /** Runs once, at the first token of the job's compute; then {@link #drain} runs at every token. */
    Runnable onFirst;
    Runnable drain;
    /** {@code prefill}, {@code decode}, {@code colocated} or {@code recomputed}; null until the flow took the job. */
    String mode;

    Job(String rid, CompletionRequest request, int[] tokens, HttpServerResponse response, TraceContext trace, long inMicros) {
        this.rid = rid;
        this.inMicros = inMicros;
        this.trace = trace;
        this.request = request;
        this.tokens = tokens;
        this.response = response;
    }

    boolean chat() {
        return request.kind() == CompletionRequest.Kind.CHAT;
    }

    /** What this engine did for the request so far, as {@link Marks} (HTTP request in, compute, KvReady, first token). */
    Marks marks() {
        Marks m = Marks.receivedAt(inMicros);
        if (computeStartMicros > 0) {
            m.at(Marks.COMPUTE_START, computeStartMicros).at(Marks.COMPUTE_END, computeEndMicros);
        }
        if (kvReadyMicros > 0) {
            m.at(Marks.KV_READY, kvReadyMicros);
        }
        if (landedMicros > 0) {
            // the KV came from the worker on landing: says which path the handoff took (HandoffAnatomy)
            m.at(Marks.LANDED, landedMicros);
        }
        if (firstTokenMicros > 0) {
            m.at(Marks.FIRST_TOKEN, firstTokenMicros);
        }
        return m;
    }
}
