package io.orbitkv.pd.transport.tcp.wire;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.kv.BlockRuns;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

/**
 * The tcp transport's wire format (documented in {@code docs/worker.md}). Every frame starts with a 24-byte
 * header, big-endian:
 * <pre>
 *   0  u32 magic 0x4F4B5654 ("OKVT")    4  u8 version (1)    5  u8 type    6  u16 flags
 *   8  u32 stream id                   12  u32 body length  16  u64 payload length (WRITE only)
 * </pre>
 * followed by the body (control data) and, for WRITE frames only, the payload: the page bytes themselves,
 * which the receiver reads straight into its pool. Decoders check every length against the bytes present and
 * against the receiver's limits before trusting it.
 *
 * <p>Flags are 0 except bit 0 of a BEGIN, {@link #FLAG_PIPELINED}: the sender streams the stripe's WRITE frames right
 * behind the BEGIN instead of waiting for BEGIN_OK; the receiver still admits before it writes a byte, sends no
 * BEGIN_OK, and answers a refusal at END (discarding the stripe's frames) instead of at once. A sender sets it only
 * for a receiver that announces {@code pipelined-begin=true} in its endpoint's attributes (older receivers refuse
 * unknown flags).
 */
public final class Wire {

    public static final int MAGIC = 0x4F4B5654;
    public static final byte VERSION = 1;
    public static final int HEADER_BYTES = 24;
    /** One WRITE segment: u32 region, u32 length, u64 destination offset. */
    public static final int SEGMENT_BYTES = 16;
    public static final int MAX_STRING_BYTES = 4096;
    public static final int MAX_TOKEN_BYTES = 1024;

    public static final byte HELLO = 1;
    public static final byte HELLO_OK = 2;
    public static final byte BEGIN = 3;
    public static final byte BEGIN_OK = 4;
    public static final byte WRITE = 5;
    public static final byte END = 6;
    public static final byte ACK = 7;
    public static final byte ABORT = 8;
    public static final byte ABORTED = 9;
    public static final byte ERROR = 10;

    private static final String[] NAMES = {"?", "HELLO", "HELLO_OK", "BEGIN", "BEGIN_OK", "WRITE", "END", "ACK", "ABORT", "ABORTED", "ERROR"};

    private Wire() { }

    public static String typeName(int type) {
        return type > 0 && type < NAMES.length ? NAMES[type] : "unknown type " + type;
    }

    /** BEGIN flag: WRITE frames follow without waiting for BEGIN_OK; a refusal is answered at END. */
    public static final int FLAG_PIPELINED = 1;
    /**
     * Endpoint attribute of a receiver (tcp, mooncake) that reads a BEGIN's optional first token: after the token,
     * {@code u8 1, i32 first token}. A sender appends it only for a receiver announcing {@code first-token=true}
     * (older receivers refuse trailing bytes; {@link PushRequest#forPeer}).
     */
    public static final String FIRST_TOKEN = PushRequest.FIRST_TOKEN_ATTRIBUTE;

    /** A parsed frame header. */
    public record Header(int type, int stream, int bodyLength, long payloadLength, int flags) {
        public Header(int type, int stream, int bodyLength, long payloadLength) {
            this(type, stream, bodyLength, payloadLength, 0);
        }

        public boolean pipelined() {
            return (flags & FLAG_PIPELINED) != 0;
        }
    }

    public static void putHeader(ByteBuffer b, byte type, int stream, int bodyLength, long payloadLength) {
        putHeader(b, type, 0, stream, bodyLength, payloadLength);
    }

    public static void putHeader(ByteBuffer b, byte type, int flags, int stream, int bodyLength, long payloadLength) {
        b.putInt(MAGIC).put(VERSION).put(type).putShort((short) flags).putInt(stream).putInt(bodyLength).putLong(payloadLength);
    }

    /** Reads a header from the next 24 bytes of {@code b}. */
    public static Header parseHeader(ByteBuffer b) throws FrameException {
        int magic = b.getInt();
        if (magic != MAGIC) {
            throw new FrameException(String.format("bad magic 0x%08X (expected 0x%08X \"OKVT\"): not an OrbitKV transfer stream", magic, MAGIC));
        }
        int version = b.get() & 0xFF;
        if (version != VERSION) {
            throw new FrameException("unsupported wire version " + version + " (this worker speaks " + VERSION + ")");
        }
        int type = b.get() & 0xFF;
        int flags = b.getShort() & 0xFFFF;
        if (flags != 0 && !(type == BEGIN && flags == FLAG_PIPELINED)) {
            throw new FrameException("flags " + flags + " set in a " + typeName(type) + " frame; version 1 defines only bit 0 of BEGIN"
                    + " (pipelined)");
        }
        int stream = b.getInt();
        int body = b.getInt();
        long payload = b.getLong();
        if (body < 0) {
            throw new FrameException("negative body length " + (body & 0xFFFF_FFFFL) + " in a " + typeName(type) + " frame");
        }
        if (payload < 0 || (payload != 0 && type != WRITE)) {
            throw new FrameException("payload length " + payload + " in a " + typeName(type) + " frame (only WRITE frames carry payload)");
        }
        return new Header(type, stream, body, payload, flags);
    }

    // ---- strings -------------------------------------------------------------------------------------------

    public static int stringBytes(String s) {
        return 2 + s.getBytes(StandardCharsets.UTF_8).length;
    }

    public static void putString(ByteBuffer b, String s) {
        byte[] bytes = s.getBytes(StandardCharsets.UTF_8);
        if (bytes.length > MAX_STRING_BYTES) {
            throw new IllegalArgumentException("string of " + bytes.length + " bytes is longer than the wire limit " + MAX_STRING_BYTES);
        }
        b.putShort((short) bytes.length).put(bytes);
    }

    public static String getString(ByteBuffer b, String field) throws FrameException {
        need(b, 2, field);
        int n = b.getShort() & 0xFFFF;
        if (n > MAX_STRING_BYTES) {
            throw new FrameException(field + ": " + n + " bytes, more than the limit of " + MAX_STRING_BYTES);
        }
        need(b, n, field);
        ByteBuffer slice = b.slice(b.position(), n);
        b.position(b.position() + n);
        try {
            return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                    .onUnmappableCharacter(CodingErrorAction.REPORT).decode(slice).toString();
        } catch (CharacterCodingException e) {
            throw new FrameException(field + ": not valid UTF-8");
        }
    }

    private static void need(ByteBuffer b, int n, String field) throws FrameException {
        if (b.remaining() < n) {
            throw new FrameException(field + ": needs " + n + " more bytes, the body has " + b.remaining());
        }
    }

    private static void end(ByteBuffer b, String frame) throws FrameException {
        if (b.hasRemaining()) {
            throw new FrameException(b.remaining() + " unexpected trailing bytes in a " + frame + " body");
        }
    }

    // ---- HELLO / HELLO_OK ----------------------------------------------------------------------------------

    /** HELLO: the sender's id and the engine it means to push to. */
    public record Hello(String senderId, String engineId) { }

    public static ByteBuffer hello(String senderId, String engineId) {
        ByteBuffer b = ByteBuffer.allocate(stringBytes(senderId) + stringBytes(engineId));
        putString(b, senderId);
        putString(b, engineId);
        return b.flip();
    }

    public static Hello parseHello(ByteBuffer b) throws FrameException {
        Hello h = new Hello(getString(b, "HELLO.sender"), getString(b, "HELLO.engine"));
        end(b, "HELLO");
        return h;
    }

    /** HELLO_OK: the receiver's engine, instance epoch and limits. */
    public record HelloOk(String engineId, long instanceEpoch, int maxPayloadBytes, int maxSegments) { }

    public static ByteBuffer helloOk(String engineId, long instanceEpoch, int maxPayload, int maxSegments) {
        ByteBuffer b = ByteBuffer.allocate(stringBytes(engineId) + 16);
        putString(b, engineId);
        b.putLong(instanceEpoch).putInt(maxPayload).putInt(maxSegments);
        return b.flip();
    }

    public static HelloOk parseHelloOk(ByteBuffer b) throws FrameException {
        String engine = getString(b, "HELLO_OK.engine");
        need(b, 16, "HELLO_OK limits");
        HelloOk h = new HelloOk(engine, b.getLong(), b.getInt(), b.getInt());
        end(b, "HELLO_OK");
        if (h.maxPayloadBytes() < 1 || h.maxSegments() < 1) {
            throw new FrameException("HELLO_OK: limits must be positive, got payload " + h.maxPayloadBytes() + ", segments " + h.maxSegments());
        }
        return h;
    }

    // ---- BEGIN ---------------------------------------------------------------------------------------------

    /** BEGIN: one stripe of a push, with everything the receiver checks before admitting it. */
    public record Begin(PushRequest request, KvGeometry geometry, long stripeBytes) { }

    public static ByteBuffer begin(PushRequest r, KvGeometry g, long stripeBytes) {
        byte[] token = r.token();
        int size = stringBytes(r.requestId()) + stringBytes(r.orderId()) + 4 + stringBytes(r.leaseId()) + 8 + stringBytes(r.destEngineId()) + 8
                + stringBytes(r.senderId()) + 4 + 1 + 4 + 4 + 4 + 1 + 4 + 8 + 8 + 4 + 8 * r.destRuns().size() + 2 + token.length
                + (r.firstToken() == null ? 0 : 5);
        ByteBuffer b = ByteBuffer.allocate(size);
        putString(b, r.requestId());
        putString(b, r.orderId());
        b.putInt(r.attempt());
        putString(b, r.leaseId());
        b.putLong(r.leaseEpoch());
        putString(b, r.destEngineId());
        b.putLong(r.destInstanceEpoch());
        putString(b, r.senderId());
        b.putInt(g.numLayers()).put((byte) g.split().ordinal()).putInt(g.blockSizeTokens()).putInt(g.numKvHeads()).putInt(g.headDim())
                .put((byte) g.dtype().ordinal()).putInt(g.pageBytes());
        b.putLong(r.deadlineMs()).putLong(stripeBytes);
        b.putInt(r.destRuns().size());
        for (BlockRun run : r.destRuns()) {
            b.putInt(run.getStart()).putInt(run.getCount());
        }
        b.putShort((short) token.length).put(token);
        if (r.firstToken() != null) {
            b.put((byte) 1).putInt(r.firstToken());
        }
        return b.flip();
    }

    /**
     * @throws FrameException    when the body is not a BEGIN body
     * @throws TransferException {@link TransferError#LAYOUT_MISMATCH} when it is, but its page shape is invalid
     */
    public static Begin parseBegin(ByteBuffer b, int maxRuns) throws FrameException {
        String requestId = getString(b, "BEGIN.request_id");
        String orderId = getString(b, "BEGIN.order_id");
        need(b, 4, "BEGIN.attempt");
        int attempt = b.getInt();
        String leaseId = getString(b, "BEGIN.lease_id");
        need(b, 8, "BEGIN.lease_epoch");
        long leaseEpoch = b.getLong();
        String engine = getString(b, "BEGIN.dest_engine_id");
        need(b, 8, "BEGIN.dest_instance_epoch");
        long instanceEpoch = b.getLong();
        String sender = getString(b, "BEGIN.sender");
        need(b, 22 + 16 + 4, "BEGIN.layout");
        int layers = b.getInt();
        int split = b.get() & 0xFF;
        int blockSize = b.getInt();
        int heads = b.getInt();
        int headDim = b.getInt();
        int dtype = b.get() & 0xFF;
        int pageBytes = b.getInt();
        long deadline = b.getLong();
        long stripeBytes = b.getLong();
        int runs = b.getInt();
        if (runs < 0 || runs > maxRuns) {
            throw new FrameException("BEGIN: " + (runs & 0xFFFF_FFFFL) + " destination runs, the limit is " + maxRuns);
        }
        need(b, 8 * runs, "BEGIN.dest_runs");
        List<BlockRun> list = new ArrayList<>(runs);
        for (int i = 0; i < runs; i++) {
            list.add(BlockRuns.run(b.getInt(), b.getInt()));
        }
        need(b, 2, "BEGIN.token");
        int tokenLen = b.getShort() & 0xFFFF;
        if (tokenLen > MAX_TOKEN_BYTES) {
            throw new FrameException("BEGIN: token of " + tokenLen + " bytes, the limit is " + MAX_TOKEN_BYTES);
        }
        need(b, tokenLen, "BEGIN.token");
        byte[] token = new byte[tokenLen];
        b.get(token);
        Integer firstToken = null;
        if (b.remaining() >= 5 && b.get(b.position()) == 1) {
            b.get();
            firstToken = b.getInt();
        }
        end(b, "BEGIN");
        if (stripeBytes < 0) {
            throw new FrameException("BEGIN: negative stripe length " + stripeBytes);
        }
        if (split >= KvSplit.values().length || dtype >= Dtype.values().length) {
            throw new FrameException("BEGIN: unknown kv_split " + split + " or dtype " + dtype);
        }
        PushRequest r = new PushRequest(requestId, orderId, attempt, leaseId, leaseEpoch, engine, instanceEpoch, list, token, deadline, sender,
                firstToken);
        KvGeometry g;
        try {
            // The sender's pool size is its own business: only the page shape must match.
            g = new KvGeometry(layers, KvSplit.values()[split], blockSize, heads, headDim, Dtype.values()[dtype], pageBytes, 1);
        } catch (IllegalArgumentException e) {
            throw new TransferException(TransferError.LAYOUT_MISMATCH, r.describe() + ": sender's layout is invalid: " + e.getMessage());
        }
        return new Begin(r, g, stripeBytes);
    }

    // ---- END / ACK / ABORT / ERROR -------------------------------------------------------------------------

    public static ByteBuffer longBody(long v) {
        return ByteBuffer.allocate(8).putLong(v).flip();
    }

    public static long parseLong(ByteBuffer b, String frame) throws FrameException {
        need(b, 8, frame);
        long v = b.getLong();
        end(b, frame);
        return v;
    }

    public static ByteBuffer stringBody(String s) {
        ByteBuffer b = ByteBuffer.allocate(stringBytes(s));
        putString(b, s);
        return b.flip();
    }

    public static String parseStringBody(ByteBuffer b, String frame) throws FrameException {
        String s = getString(b, frame);
        end(b, frame);
        return s;
    }

    public static ByteBuffer error(TransferError kind, String message) {
        String m = truncate(message);
        ByteBuffer b = ByteBuffer.allocate(2 + stringBytes(m));
        b.putShort((short) kind.code());
        putString(b, m);
        return b.flip();
    }

    /** Parses an ERROR body into the exception it reports. */
    public static TransferException parseError(ByteBuffer b, String peer) throws FrameException {
        need(b, 2, "ERROR.code");
        TransferError kind = TransferError.ofCode(b.getShort() & 0xFFFF);
        String message = getString(b, "ERROR.message");
        end(b, "ERROR");
        return new TransferException(kind, "refused by " + peer + ": " + message);
    }

    private static String truncate(String s) {
        if (s == null) {
            return "";
        }
        // Characters, not bytes: UTF-8 is at most 3 bytes per char here, so 1,300 chars always fit.
        return s.length() > 1300 ? s.substring(0, 1300) + "..." : s;
    }
}
