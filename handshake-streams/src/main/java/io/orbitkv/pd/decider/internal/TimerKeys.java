package io.orbitkv.pd.decider.internal;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.utils.Bytes;

/**
 * Keys of the timer index: 8-byte big-endian deadline, then the request id. Stores order keys as unsigned bytes,
 * so a range scan from {@link #from} to {@link #until} visits due timers in deadline order.
 */
final class TimerKeys {

    private TimerKeys() { }

    static Bytes of(long deadline, String requestId) {
        byte[] id = requestId.getBytes(StandardCharsets.UTF_8);
        return Bytes.wrap(ByteBuffer.allocate(8 + id.length).putLong(deadline).put(id).array());
    }

    static Bytes from(long deadline) {
        return Bytes.wrap(ByteBuffer.allocate(8).putLong(Math.max(0, deadline)).array());
    }

    /** Upper bound (inclusive) covering every key with a deadline up to {@code now}. */
    static Bytes until(long now) {
        // Request ids are UTF-8 and never contain 0xff, so deadline + 0xff sorts after every key of that deadline.
        return Bytes.wrap(ByteBuffer.allocate(9).putLong(Math.max(0, now)).put((byte) 0xff).array());
    }

    static long deadline(Bytes key) {
        return ByteBuffer.wrap(key.get()).getLong();
    }

    static String requestId(Bytes key) {
        byte[] k = key.get();
        return new String(k, 8, k.length - 8, StandardCharsets.UTF_8);
    }
}
