package io.orbitkv.pd.transport;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.schemas.OrderTokens;
import java.nio.charset.StandardCharsets;
import java.util.List;

/** Signed push requests for tests, as the decider would issue them. */
public final class Pushes {

    public static final byte[] KEY = "test-auth-key-0123456789".getBytes(StandardCharsets.UTF_8);
    public static final OrderTokens TOKENS = new OrderTokens(KEY);

    private Pushes() { }

    public static PushRequest signed(String request, int attempt, String lease, long leaseEpoch, String destEngine, long destEpoch,
                                     List<BlockRun> dest) {
        String order = request + "/a" + attempt;
        return new PushRequest(request, order, attempt, lease, leaseEpoch, destEngine, destEpoch, dest,
                TOKENS.sign(order, leaseEpoch, destEngine, destEpoch, dest), 0, "test-sender");
    }

    /** The same request with a token signed by another key. */
    public static PushRequest forged(PushRequest r) {
        byte[] token = new OrderTokens("another-key-that-is-not-ours".getBytes(StandardCharsets.UTF_8))
                .sign(r.orderId(), r.leaseEpoch(), r.destEngineId(), r.destInstanceEpoch(), r.destRuns());
        return new PushRequest(r.requestId(), r.orderId(), r.attempt(), r.leaseId(), r.leaseEpoch(), r.destEngineId(), r.destInstanceEpoch(),
                r.destRuns(), token, r.deadlineMs(), r.senderId());
    }

    /** The same token presented with other destination runs (a tampered order). */
    public static PushRequest retargeted(PushRequest r, List<BlockRun> dest) {
        return new PushRequest(r.requestId(), r.orderId(), r.attempt(), r.leaseId(), r.leaseEpoch(), r.destEngineId(), r.destInstanceEpoch(),
                dest, r.token(), r.deadlineMs(), r.senderId());
    }
}
