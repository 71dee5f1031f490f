package io.orbitkv.pd.transport.tcp.internal;

import io.orbitkv.pd.transport.tcp.wire.FrameException;
import java.io.IOException;
import java.nio.ByteBuffer;

/** Blocking read/write loops over a connection's {@link Link} (the socket, or TLS over it). */
public final class Io {

    /**
     * Bytes offered to one scattering read or gathering write. NIO rebuilds the iovec and pins every buffer it is
     * given on each call, and a call moves only what fits in the socket buffers, so offering a whole frame of small
     * pages would redo that work for hundreds of buffers per call. 256 KiB measured best on 2 cores (docs/worker.md);
     * {@code -Dorbitkv.tcp.window-bytes} overrides it for experiments.
     */
    static final long WINDOW_BYTES = Long.getLong("orbitkv.tcp.window-bytes", 256L << 10);

    private Io() { }

    /** How many buffers from {@code i} make up about {@link #WINDOW_BYTES}. */
    private static int window(ByteBuffer[] bufs, int i, int count) {
        long sum = 0;
        int j = i;
        while (j < count && (sum < WINDOW_BYTES || j == i)) {
            sum += bufs[j].remaining();
            j++;
        }
        return j - i;
    }

    /**
     * Fills {@code b}. Returns false on a clean end of stream before the first byte when {@code eofOk}.
     *
     * @throws FrameException when the stream ends part-way ("truncated")
     */
    public static boolean readFully(Link ch, ByteBuffer b, boolean eofOk, String what, Watchdog.Activity a) throws IOException {
        int wanted = b.remaining();
        while (b.hasRemaining()) {
            int n = ch.read(b);
            if (n < 0) {
                int got = wanted - b.remaining();
                if (got == 0 && eofOk) {
                    return false;
                }
                throw new FrameException("truncated frame: connection closed after " + got + " of " + wanted + " bytes of " + what);
            }
            if (n > 0 && a != null) {
                a.progress();
            }
        }
        return true;
    }

    /** Fills {@code bufs[0..count)} with exactly {@code total} bytes. */
    public static void readFully(Link ch, ByteBuffer[] bufs, int count, long total, String what, Watchdog.Activity a)
            throws IOException {
        int i = 0;
        long got = 0;
        while (got < total) {
            while (i < count && !bufs[i].hasRemaining()) {
                i++;
            }
            long n = ch.read(bufs, i, window(bufs, i, count));
            if (n < 0) {
                throw new FrameException("truncated frame: connection closed after " + got + " of " + total + " payload bytes of " + what);
            }
            got += n;
            if (n > 0 && a != null) {
                a.progress();
            }
        }
    }

    /** Writes all of {@code bufs[0..count)}. */
    public static void writeFully(Link ch, ByteBuffer[] bufs, int count, Watchdog.Activity a) throws IOException {
        int i = 0;
        while (i < count) {
            long n = ch.write(bufs, i, window(bufs, i, count));
            if (n > 0 && a != null) {
                a.progress();
            }
            while (i < count && !bufs[i].hasRemaining()) {
                i++;
            }
        }
    }

    public static void writeFully(Link ch, ByteBuffer b, Watchdog.Activity a) throws IOException {
        while (b.hasRemaining()) {
            if (ch.write(b) > 0 && a != null) {
                a.progress();
            }
        }
    }
}
