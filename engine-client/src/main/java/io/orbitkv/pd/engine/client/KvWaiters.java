package io.orbitkv.pd.engine.client;

import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.RecomputeDecided;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.tracing.Marks;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ConcurrentHashMap;

/**
 * Turns one engine's decisions into what its requests wait for ({@link EngineControl#awaitKv}) and hands every
 * decision to the engine's {@link DecisionListener}. Remembers recent ends, so a waiter registered after its request
 * ended completes at once. Shared by both ways in ({@link EngineClient}, the engine API client). Thread-safe.
 */
public final class KvWaiters {

    private static final int RECENT_ENDS = 50_000;

    private final String engineId;
    private final DecisionListener listener;
    private final Map<String, CompletableFuture<KvSignal>> waiters = new ConcurrentHashMap<>();
    private final Map<String, KvSignal> recentEnds = new LinkedHashMap<>(1024, 0.75f, false) {
        @Override
        protected boolean removeEldestEntry(Map.Entry<String, KvSignal> eldest) {
            return size() > RECENT_ENDS;
        }
    };

    public KvWaiters(String engineId, DecisionListener listener) {
        this.engineId = engineId;
        this.listener = listener == null ? new DecisionListener() { } : listener;
    }

    public CompletableFuture<KvSignal> awaitKv(String requestId) {
        CompletableFuture<KvSignal> f = waiters.computeIfAbsent(requestId, k -> new CompletableFuture<>());
        KvSignal ended;
        synchronized (recentEnds) {
            ended = recentEnds.get(requestId);
        }
        if (ended != null) {
            complete(requestId, ended);
        }
        return f;
    }

    public void forget(String requestId) {
        waiters.remove(requestId);
    }

    /** One decision for this engine, read at {@code receivedMicros}, with the marks it carried. */
    public void onDecision(Decision d, long receivedMicros, Marks marks) {
        String rid = d.getRequestId();
        switch (d.getPayload()) {
            case KvReady k -> {
                complete(rid, new KvSignal.Ready(k.getOrderId(), k.getBytes(), receivedMicros, marks.get(Marks.OUT).orElse(0),
                        k.getFirstToken(), marks.get(Marks.LANDED).orElse(0)));
                listener.onKvReady(d, k);
            }
            case RecomputeDecided r -> {
                complete(rid, new KvSignal.Recompute(r.getReason()));
                listener.onRecompute(d, r);
            }
            case ReleaseDecided rel -> {
                // The listener first: it may refuse the release (RefusedDecision: not this request's lease), and then
                // the request waiting for its KV must not be ended either.
                listener.onRelease(d, rel);
                if (rel.getSide() == ReleaseSide.DECODE && engineId.equals(rel.getEngineId())) {
                    end(rid, new KvSignal.Ended(OutcomeKind.UNKNOWN, "decode pages released: " + rel.getReason()));
                }
            }
            case RequestOutcome o -> {
                if (o.getKind() != OutcomeKind.COMPLETED) {
                    end(rid, new KvSignal.Ended(o.getKind(), o.getReason()));
                }
                listener.onOutcome(d, o);
            }
            default -> {
                // TransferOrder / AbortTransfer are for the engine's transfer worker.
            }
        }
    }

    /** Ends every wait (the engine is going away). */
    public void endAll(String reason) {
        waiters.values().forEach(f -> f.complete(new KvSignal.Ended(OutcomeKind.UNKNOWN, reason)));
        waiters.clear();
    }

    private void end(String requestId, KvSignal signal) {
        synchronized (recentEnds) {
            recentEnds.putIfAbsent(requestId, signal);
        }
        complete(requestId, signal);
    }

    private void complete(String requestId, KvSignal signal) {
        CompletableFuture<KvSignal> f = waiters.remove(requestId);
        if (f != null) {
            f.complete(signal);
        }
    }
}
