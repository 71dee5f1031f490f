package io.orbitkv.pd.transport;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.TransferOrder;
import java.nio.ByteBuffer;
import java.util.List;
import java.util.Objects;

/**
 * What a sender presents to the receiving worker before any byte moves: the order's identity, the lease it
 * writes under, the destination runs and the decider's token over (order id, lease epoch, destination runs).
 *
 * @param requestId         the request (for logs and request-level fences)
 * @param orderId           {@code <request id>/a<attempt>}, as the decider names it
 * @param attempt           attempt number, from 1
 * @param leaseId           the destination pages' lease
 * @param leaseEpoch        the lease epoch the order was issued under
 * @param destEngineId      the engine whose pages receive the bytes
 * @param destInstanceEpoch that engine's instance epoch when the order was issued
 * @param destRuns          destination block runs, exactly as signed
 * @param token             HMAC-SHA256 token from the order
 * @param deadlineMs        wall-clock deadline of the order (epoch ms), 0 for none
 * @param senderId          the sending worker, for logs
 * @param firstToken        the prefill's sampled token, or null: the receiving worker hands it to its engine with the
 *                          kv_ready it delivers when the push lands (not covered by the token: it only saves the decode
 *                          engine a step, and the decider's KvReady carries the same value)
 */
public record PushRequest(String requestId, String orderId, int attempt, String leaseId, long leaseEpoch, String destEngineId,
                          long destInstanceEpoch, List<BlockRun> destRuns, byte[] token, long deadlineMs, String senderId, Integer firstToken) {

    /** A push that carries no first token. */
    public PushRequest(String requestId, String orderId, int attempt, String leaseId, long leaseEpoch, String destEngineId,
                       long destInstanceEpoch, List<BlockRun> destRuns, byte[] token, long deadlineMs, String senderId) {
        this(requestId, orderId, attempt, leaseId, leaseEpoch, destEngineId, destInstanceEpoch, destRuns, token, deadlineMs, senderId, null);
    }

    public PushRequest {
        Objects.requireNonNull(requestId, "requestId");
        Objects.requireNonNull(orderId, "orderId");
        Objects.requireNonNull(leaseId, "leaseId");
        Objects.requireNonNull(destEngineId, "destEngineId");
        destRuns = List.copyOf(destRuns);
        token = token == null ? new byte[0] : token.clone();
        senderId = senderId == null ? "" : senderId;
    }

    /** The push for a decider's order. */
    public static PushRequest of(String requestId, TransferOrder o, String senderId) {
        ByteBuffer t = o.getAuthToken().duplicate();
        byte[] token = new byte[t.remaining()];
        t.get(token);
        return new PushRequest(requestId, o.getOrderId(), o.getAttempt(), o.getLeaseId(), o.getLeaseEpoch(), o.getDestEngineId(),
                o.getDestInstanceEpoch(), o.getDestBlocks(), token, o.getDeadlineMs(), senderId, o.getFirstToken());
    }

    /**
     * Endpoint attribute of a receiver whose admission frame reads a first token ({@code first-token=true}: tcp and
     * mooncake since 2026-12-04; older receivers refuse the extra bytes).
     */
    public static final String FIRST_TOKEN_ATTRIBUTE = "first-token";

    /** This push as {@code peer} can take it: without the first token when the peer does not announce it reads one. */
    public PushRequest forPeer(PeerEndpoint peer) {
        return firstToken == null || "true".equals(peer.attributes().get(FIRST_TOKEN_ATTRIBUTE)) ? this : withFirstToken(null);
    }

    /** This push with {@code first} as its first token (null: none). */
    public PushRequest withFirstToken(Integer first) {
        return new PushRequest(requestId, orderId, attempt, leaseId, leaseEpoch, destEngineId, destInstanceEpoch, destRuns, token, deadlineMs,
                senderId, first);
    }

    @Override
    public byte[] token() {
        return token.clone();
    }

    /** Whether the order has a deadline and it passed. */
    public boolean deadlinePassed() {
        return deadlineMs > 0 && System.currentTimeMillis() > deadlineMs;
    }

    /** {@code order r/a2 (lease L epoch 3)} for messages. */
    public String describe() {
        return "order " + orderId + " (lease " + leaseId + " epoch " + leaseEpoch + ")";
    }

    @Override
    public String toString() {
        return "PushRequest[" + describe() + " to " + destEngineId + "@" + destInstanceEpoch + ", " + destRuns.size() + " runs]";
    }
}
