package io.orbitkv.pd.schemas;

import io.orbitkv.pd.events.BlockRun;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.util.HexFormat;
import java.util.List;
import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

/**
 * The authorization token of a transfer order: HMAC-SHA256 over the order id, the lease epoch and the
 * destination runs, keyed by a secret shared by the decider (which signs) and the receiving workers (which
 * verify before touching memory). Deterministic, so a replayed decider signs the same token.
 *
 * <p>Message layout: UTF-8 order id, 0x00, lease epoch (8 bytes big-endian), then for each destination run its
 * start and count (4 bytes big-endian each).
 */
public final class OrderTokens {

    private static final String ALGORITHM = "HmacSHA256";

    /**
     * The key every component uses when {@code auth.key} is not set: fine on a laptop, logged loudly, never for
     * production. Equal to the decider's {@code DeciderConfig.DEV_AUTH_KEY}, so a decider and workers started
     * without keys still agree.
     */
    public static final String DEV_KEY = "orbitkv-dev-insecure-auth-key";

    /**
     * The bytes of an {@code auth.key} setting: {@code hex:0a1b...} for binary keys, else the UTF-8 bytes of the
     * text (the same rule as the decider's config).
     */
    public static byte[] parseKey(String value) {
        if (value == null) {
            throw new IllegalArgumentException("auth.key: required");
        }
        if (value.startsWith("hex:")) {
            try {
                return HexFormat.of().parseHex(value.substring(4));
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("auth.key: not valid hex after 'hex:' (" + e.getMessage() + ")");
            }
        }
        return value.getBytes(StandardCharsets.UTF_8);
    }

    private final SecretKeySpec key;
    /** Mac instances are not thread-safe and costly to look up: one per thread, initialized once. */
    private final ThreadLocal<Mac> macs = ThreadLocal.withInitial(this::newMac);
    /** During a key rotation: the tokens of the previous key, still accepted by {@link #verify}; else null. */
    private final OrderTokens previous;

    /** @param secret at least 16 bytes */
    public OrderTokens(byte[] secret) {
        this(secret, (OrderTokens) null);
    }

    /**
     * Signs with {@code secret} and, during a rotation, also accepts tokens signed with {@code previous}
     * ({@code auth.key.previous}): a worker given both accepts the orders of deciders still on the old key and of those
     * already on the new one, so a rolling change of the key fails no push (docs/security.md, "Rotating the order key").
     * {@code previous} null: no rotation under way.
     */
    public OrderTokens(byte[] secret, byte[] previous) {
        this(secret, previous == null ? null : new OrderTokens(previous));
    }

    private OrderTokens(byte[] secret, OrderTokens previous) {
        if (secret == null || secret.length < 16) {
            throw new IllegalArgumentException("auth.key: must be at least 16 bytes, got " + (secret == null ? 0 : secret.length));
        }
        this.key = new SecretKeySpec(secret.clone(), ALGORITHM);
        this.previous = previous;
    }

    /**
     * The token of an order: HMAC-SHA256 over the order id, the lease epoch, the destination engine and its instance
     * epoch, and the destination runs. Binding the engine and its instance epoch means a token cannot be replayed
     * against another engine, nor against the same engine after it restarted (its pages then belong to others).
     */
    public byte[] sign(String orderId, long leaseEpoch, String destEngineId, long destInstanceEpoch, List<BlockRun> destRuns) {
        Mac mac = macs.get();
        mac.reset();
        mac.update(orderId.getBytes(StandardCharsets.UTF_8));
        mac.update((byte) 0);
        mac.update(destEngineId.getBytes(StandardCharsets.UTF_8));
        mac.update((byte) 0);
        ByteBuffer b = ByteBuffer.allocate(16 + 8 * destRuns.size());
        b.putLong(leaseEpoch).putLong(destInstanceEpoch);
        for (BlockRun r : destRuns) {
            b.putInt(r.getStart()).putInt(r.getCount());
        }
        mac.update(b.array());
        return mac.doFinal();
    }

    private Mac newMac() {
        try {
            Mac mac = Mac.getInstance(ALGORITHM);
            mac.init(key);
            return mac;
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException(ALGORITHM + " unavailable", e);
        }
    }

    /** Constant-time check of a presented token, against the current key and, during a rotation, the previous one. */
    public boolean verify(String orderId, long leaseEpoch, String destEngineId, long destInstanceEpoch, List<BlockRun> destRuns,
                          byte[] token) {
        if (token == null) {
            return false;
        }
        boolean current = MessageDigest.isEqual(sign(orderId, leaseEpoch, destEngineId, destInstanceEpoch, destRuns), token);
        boolean old = previous != null && previous.verify(orderId, leaseEpoch, destEngineId, destInstanceEpoch, destRuns, token);
        return current | old; // both computed: the time says nothing about which key signed
    }
}
