package io.orbitkv.pd.mooncake.internal;

import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import io.orbitkv.pd.transport.tcp.wire.FrameException;
import io.orbitkv.pd.transport.tcp.wire.Wire;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;

/**
 * The mooncake transport's admission protocol: the small TCP conversation beside the one-sided writes. The page
 * bytes never travel here; this is where the receiver checks a push (token, epochs, fences, bounds) before a single
 * WRITE is issued, and where the sender confirms completion so the receiver can fence.
 *
 * <p>Frames reuse the tcp transport's layout and bodies ({@link Wire}: 24-byte header, BEGIN carrying the order's
 * credentials and runs, ERROR carrying a {@link TransferError} code and message) under their own magic, {@code "OKVM"},
 * so that neither listener mistakes the other's stream for its own:
 * <pre>
 *   0  u32 magic 0x4F4B564D ("OKVM")  4  u8 version (1)  5  u8 type  6  u16 flags (0)
 *   8  u32 push id                   12  u32 body length  16  u64 reserved (0)
 * </pre>
 * <pre>
 *   sender                                   receiver
 *   HELLO(sender, engine)              →
 *                                      ←     HELLO_OK(engine, instance epoch, segment, protocol, regions)
 *   BEGIN(order, layout, bytes)        →     PushGate.open: token, epochs, fences, runs in the pool
 *                                      ←     BEGIN_OK | ERROR(kind, why)
 *   ... one-sided WRITEs through the engine, many runs per batch ...
 *                                      ←     STOP(kind, why)    (only if a fence hit the push meanwhile)
 *   END(bytes)   (every write finished)→
 *                                      ←     ACK(bytes) | ERROR(kind, why)
 *   ABORT(why)   (instead of END)      →
 *                                      ←     ABORTED
 * </pre>
 */
public final class AdmissionWire {

    public static final int MAGIC = 0x4F4B564D;
    public static final byte VERSION = 1;
    public static final int HEADER_BYTES = 24;
    /** Largest body accepted: a BEGIN with 65,536 runs is ~520 KiB. */
    public static final int MAX_BODY = 1 << 20;

    public static final byte HELLO = 1;
    public static final byte HELLO_OK = 2;
    public static final byte BEGIN = 3;
    public static final byte BEGIN_OK = 4;
    public static final byte END = 6;
    public static final byte ACK = 7;
    public static final byte ABORT = 8;
    public static final byte ABORTED = 9;
    public static final byte ERROR = 10;
    public static final byte STOP = 11;

    private AdmissionWire() { }

    public static String typeName(int type) {
        return switch (type) {
            case HELLO -> "HELLO";
            case HELLO_OK -> "HELLO_OK";
            case BEGIN -> "BEGIN";
            case BEGIN_OK -> "BEGIN_OK";
            case END -> "END";
            case ACK -> "ACK";
            case ABORT -> "ABORT";
            case ABORTED -> "ABORTED";
            case ERROR -> "ERROR";
            case STOP -> "STOP";
            default -> "unknown type " + type;
        };
    }

    /** One frame: its type, push id and body. */
    public record Frame(int type, int push, ByteBuffer body) { }

    /** Writes one frame (header and body in one write) and flushes. */
    public static void write(OutputStream out, byte type, int push, ByteBuffer body) throws IOException {
        int len = body == null ? 0 : body.remaining();
        byte[] frame = new byte[HEADER_BYTES + len];
        ByteBuffer b = ByteBuffer.wrap(frame);
        b.putInt(MAGIC).put(VERSION).put(type).putShort((short) 0).putInt(push).putInt(len).putLong(0);
        if (body != null) {
            b.put(body.duplicate());
        }
        out.write(frame);
        out.flush();
    }

    /** Called while a read waits for the first byte of a frame (the socket's read timeout expired). */
    @FunctionalInterface
    public interface Idle {
        void idle() throws IOException;
    }

    /**
     * Reads one frame. With a read timeout on the socket, {@code idle} runs each time the timeout expires before a
     * frame starts; a frame that stalls halfway for {@code stallNanos} is an error.
     *
     * @return the frame, or null if the peer closed the connection between frames
     */
    public static Frame read(InputStream in, Idle idle, long stallNanos) throws IOException {
        byte[] h = new byte[HEADER_BYTES];
        if (!readFully(in, h, idle, stallNanos, true)) {
            return null;
        }
        ByteBuffer b = ByteBuffer.wrap(h);
        int magic = b.getInt();
        if (magic != MAGIC) {
            throw new FrameException(String.format("bad magic 0x%08X (expected 0x%08X \"OKVM\"): not an OrbitKV mooncake admission stream", magic,
                    MAGIC));
        }
        int version = b.get() & 0xFF;
        if (version != VERSION) {
            throw new FrameException("unsupported admission protocol version " + version + " (this worker speaks " + VERSION + ")");
        }
        int type = b.get() & 0xFF;
        int flags = b.getShort() & 0xFFFF;
        int push = b.getInt();
        int len = b.getInt();
        long reserved = b.getLong();
        if (flags != 0 || reserved != 0) {
            throw new FrameException("flags " + flags + " / reserved " + reserved + " set in a " + typeName(type) + " frame; version 1 defines none");
        }
        if (len < 0 || len > MAX_BODY) {
            throw new FrameException("body of " + (len & 0xFFFF_FFFFL) + " bytes in a " + typeName(type) + " frame, the limit is " + MAX_BODY);
        }
        byte[] body = new byte[len];
        readFully(in, body, null, stallNanos, false);
        return new Frame(type, push, ByteBuffer.wrap(body));
    }

    private static boolean readFully(InputStream in, byte[] buf, Idle idle, long stallNanos, boolean eofOk) throws IOException {
        int n = 0;
        long stalledSince = 0;
        while (n < buf.length) {
            int r;
            try {
                r = in.read(buf, n, buf.length - n);
            } catch (SocketTimeoutException e) {
                if (n == 0 && idle != null) {
                    idle.idle();
                    continue;
                }
                long now = System.nanoTime();
                if (stalledSince == 0) {
                    stalledSince = now;
                } else if (now - stalledSince > stallNanos) {
                    throw new SocketTimeoutException("no progress for " + stallNanos / 1_000_000 + " ms inside a frame");
                }
                continue;
            }
            if (r < 0) {
                if (n == 0 && eofOk) {
                    return false;
                }
                throw new EOFException("connection closed after " + n + " of " + buf.length + " bytes of a frame");
            }
            n += r;
            stalledSince = 0;
        }
        return true;
    }

    // ---- bodies -------------------------------------------------------------------------------------------------

    /** HELLO_OK: who the receiver is and where its memory is, as registered with its engine. */
    public record HelloOk(String engineId, long instanceEpoch, String segment, String protocol, List<long[]> regions) {

        /** Base address of region {@code r}. */
        public long base(int r) {
            return regions.get(r)[0];
        }

        public long length(int r) {
            return regions.get(r)[1];
        }
    }

    public static ByteBuffer helloOk(HelloOk h) {
        ByteBuffer b = ByteBuffer.allocate(Wire.stringBytes(h.engineId()) + 8 + Wire.stringBytes(h.segment()) + Wire.stringBytes(h.protocol()) + 4
                + 16 * h.regions().size());
        Wire.putString(b, h.engineId());
        b.putLong(h.instanceEpoch());
        Wire.putString(b, h.segment());
        Wire.putString(b, h.protocol());
        b.putInt(h.regions().size());
        for (long[] r : h.regions()) {
            b.putLong(r[0]).putLong(r[1]);
        }
        return b.flip();
    }

    public static HelloOk parseHelloOk(ByteBuffer b) throws FrameException {
        String engine = Wire.getString(b, "HELLO_OK.engine");
        need(b, 8, "HELLO_OK.instance_epoch");
        long epoch = b.getLong();
        String segment = Wire.getString(b, "HELLO_OK.segment");
        String protocol = Wire.getString(b, "HELLO_OK.protocol");
        need(b, 4, "HELLO_OK.regions");
        int n = b.getInt();
        if (n < 0 || n > 65_536) {
            throw new FrameException("HELLO_OK: " + n + " regions");
        }
        need(b, 16L * n, "HELLO_OK.regions");
        List<long[]> regions = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            long base = b.getLong();
            long len = b.getLong();
            if (len <= 0 || base + len < base) {
                throw new FrameException("HELLO_OK: region " + i + " of " + len + " bytes at 0x" + Long.toHexString(base));
            }
            regions.add(new long[] {base, len});
        }
        if (b.hasRemaining()) {
            throw new FrameException(b.remaining() + " unexpected trailing bytes in a HELLO_OK body");
        }
        return new HelloOk(engine, epoch, segment, protocol, List.copyOf(regions));
    }

    /** ERROR and STOP bodies: the tcp transport's error body (kind code, message). */
    public static ByteBuffer error(TransferError kind, String message) {
        return Wire.error(kind, message);
    }

    public static TransferException parseError(ByteBuffer b, String peer) throws FrameException {
        return Wire.parseError(b, peer);
    }

    private static void need(ByteBuffer b, long n, String field) throws FrameException {
        if (b.remaining() < n) {
            throw new FrameException(field + ": needs " + n + " more bytes, the body has " + b.remaining());
        }
    }
}
