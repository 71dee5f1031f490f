package io.orbitkv.pd.transport;

import io.orbitkv.pd.events.TransportEndpoint;
import io.orbitkv.pd.kv.KvPool;
import io.orbitkv.pd.kv.TransferPlan;
import java.util.Optional;

/**
 * Moves the pages of a {@link TransferPlan} from a local pool into a peer engine's pool. One implementation per
 * package ({@code tcp}, {@code local}; later {@code cuda}, {@code mooncake}); adding one touches nothing else.
 *
 * <p>The receiving half of a transport serves the local engine's pool through a {@link PushGate}, which checks
 * every push (token, epochs, fences, bounds) before any memory is touched. A transport acknowledges a push only
 * when its bytes are in place, and a sender completes a {@link Transfer} only on that acknowledgement.
 */
public interface KvTransport extends AutoCloseable {

    /** {@code tcp}, {@code local}, ...: the name engines register endpoints under. */
    String name();

    /** The endpoint peers push to, announced in the engine registration; empty for a send-only transport. */
    Optional<TransportEndpoint> endpoint();

    /** Whether this transport can push to {@code peer} from this process (e.g. {@code local} only within one JVM). */
    boolean canReach(PeerEndpoint peer);

    /** Starts pushing {@code plan} from {@code source} to {@code peer}; never throws, failures complete the transfer. */
    Transfer push(PushRequest request, KvPool source, TransferPlan plan, PeerEndpoint peer);

    /**
     * Starts pushing {@code plan} while its source is still being computed: each piece once {@code ready} says it is, the
     * last layer's pieces with the prefill's first token. A transport that cannot send pieces as they come (the default)
     * waits for the whole source, then pushes as {@link #push(PushRequest, KvPool, TransferPlan, PeerEndpoint)} does —
     * on the caller's thread, which an order thread is.
     */
    default Transfer push(PushRequest request, KvPool source, TransferPlan plan, PeerEndpoint peer, SourceReadiness ready)
            throws InterruptedException {
        while (!ready.awaitComplete(50)) {
            if (ready.failure() != null) {
                throw new TransferException(TransferError.ABORTED, "aborted before it started: " + ready.failure());
            }
            if (request.deadlinePassed()) {
                throw new TransferException(TransferError.TIMEOUT, "the order's deadline passed while its prefill computed");
            }
        }
        return push(request.withFirstToken(ready.firstToken()), source, plan, peer);
    }

    /** Whether {@link #push(PushRequest, KvPool, TransferPlan, PeerEndpoint, SourceReadiness)} sends pieces as they come. */
    default boolean streams() {
        return false;
    }

    /** Drops cached connections and endpoint state for an engine (it restarted, moved or left). */
    void forgetPeer(String engineId);

    /** Stops serving and sending; in-flight transfers fail. Idempotent. */
    @Override
    void close();
}
