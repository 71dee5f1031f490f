package io.orbitkv.pd.transport.tcp.internal;

import io.orbitkv.pd.transport.tcp.wire.Wire;
import io.orbitkv.pd.transport.tcp.wire.FrameException;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.ReceiveSession;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import io.orbitkv.pd.transport.tcp.TcpConfig;
import java.io.IOException;
import java.lang.foreign.MemorySegment;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.nio.channels.SocketChannel;
import java.util.HashMap;
import java.util.Map;
import java.util.function.Consumer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One accepted connection, served by one thread: reads frames, admits stripes through the {@link PushGate}, checks
 * every WRITE's segments before it reads the payload straight into the pool, and acknowledges a stripe at its END
 * only when every byte it announced is in place.
 *
 * <p>A frame that breaks the format (bad magic, impossible lengths, frames out of order, a stream ending mid-frame)
 * or a write outside the admitted pages closes this connection with a logged reason and, where the socket still
 * takes it, an ERROR frame; sessions of this connection are dropped unacknowledged. Nothing else is affected.
 * A refusal at BEGIN (token, epoch, bounds, layout) is answered with ERROR and the connection stays usable.
 */
public final class ReceiverConnection implements Runnable {

    private static final Logger log = LoggerFactory.getLogger(ReceiverConnection.class);
    private static final int MAX_SESSIONS = 16;
    private static final int MAX_BODY_BYTES = 1 << 20;
    private static final int MAX_RUNS = 65_536;

    private final SocketChannel ch;
    private final Link link;
    private final PushGate gate;
    private final TcpConfig config;
    private final Watchdog.Activity activity;
    private final Consumer<ReceiverConnection> onClose;
    private final String peer;
    private final ByteBuffer header = ByteBuffer.allocateDirect(Wire.HEADER_BYTES);
    private final ByteBuffer out = ByteBuffer.allocateDirect(Wire.HEADER_BYTES + 4096);
    private final ByteBuffer body = ByteBuffer.allocateDirect(64 * 1024);
    private ByteBuffer scratch;
    private final ByteBuffer[] targets;
    private final Map<Integer, Stripe> stripes = new HashMap<>();
    private final Map<Integer, TransferException> refused = new HashMap<>();
    private boolean helloDone;

    private record Stripe(ReceiveSession session, long announcedBytes) { }

    /** @param link the connection's byte stream: the socket, or TLS over it (its handshake done) */
    public ReceiverConnection(SocketChannel ch, Link link, PushGate gate, TcpConfig config, Watchdog watchdog,
                              Consumer<ReceiverConnection> onClose) {
        this.ch = ch;
        this.link = link;
        this.gate = gate;
        this.config = config;
        this.activity = watchdog.watch(ch);
        this.onClose = onClose;
        this.targets = new ByteBuffer[config.maxSegments()];
        String p;
        try {
            p = String.valueOf(ch.getRemoteAddress());
        } catch (IOException e) {
            p = "?";
        }
        this.peer = p;
    }

    public String peer() {
        return peer;
    }

    public void close() {
        try {
            ch.close();
        } catch (IOException ignored) {
            // already closed
        }
    }

    @Override
    public void run() {
        String why = null;
        TransferError kind = null;
        try {
            while (frame()) {
                activity.busy(false);
            }
        } catch (FrameException e) {
            kind = TransferError.PROTOCOL;
            why = e.getMessage();
        } catch (TransferException e) {
            kind = e.kind();
            why = e.getMessage();
        } catch (ClosedChannelException e) {
            why = activity.fired() ? "no progress for " + config.ioTimeout().toMillis() + " ms inside a frame: connection closed" : null;
        } catch (IOException e) {
            why = "connection error: " + e.getMessage();
        } catch (RuntimeException e) {
            kind = TransferError.INTERNAL;
            why = "internal error: " + e;
            log.atError().setCause(e).addKeyValue("peer", peer).log("receiver connection failed");
        } finally {
            if (kind != null && ch.isOpen()) {
                sendQuietly(Wire.ERROR, 0, Wire.error(kind, why));
            }
            for (Stripe s : stripes.values()) {
                s.session().close();
            }
            stripes.clear();
            close();
            onClose.accept(this);
        }
        if (why != null) {
            log.atWarn().addKeyValue("peer", peer).addKeyValue("engineId", gate.engineId())
                    .log("closed transfer connection: " + (kind == null ? "" : kind + ": ") + why);
        }
    }

    /**
     * Handles one frame; false on a clean end of stream between frames. Only a sender that said HELLO may sit idle
     * between frames: before it, and from a frame's first byte on, a stall is timed out (transfer.tcp.io-timeout),
     * so peers that connect and go silent, or stop inside a header, cannot hold the worker's connections.
     */
    private boolean frame() throws IOException {
        activity.busy(!helloDone);
        header.clear().limit(1);
        if (!Io.readFully(link, header, true, "a frame header", activity)) {
            return false;
        }
        activity.busy(true);
        header.limit(Wire.HEADER_BYTES);
        Io.readFully(link, header, false, "a frame header", activity);
        Wire.Header h = Wire.parseHeader(header.flip());
        if (!helloDone && h.type() != Wire.HELLO) {
            throw new FrameException("first frame must be HELLO, got " + Wire.typeName(h.type()));
        }
        if (h.bodyLength() > MAX_BODY_BYTES) {
            throw new FrameException(Wire.typeName(h.type()) + " body of " + h.bodyLength() + " bytes, the limit is " + MAX_BODY_BYTES);
        }
        if (h.payloadLength() > config.maxPayloadBytes()) {
            throw new FrameException("WRITE payload of " + h.payloadLength() + " bytes, the limit is " + config.maxPayloadBytes());
        }
        ByteBuffer b = readBody(h);
        switch (h.type()) {
            case Wire.HELLO -> hello(b);
            case Wire.BEGIN -> begin(h, b);
            case Wire.WRITE -> write(h, b);
            case Wire.END -> end(h, b);
            case Wire.ABORT -> abort(h, b);
            case Wire.HELLO_OK, Wire.BEGIN_OK, Wire.ACK, Wire.ABORTED, Wire.ERROR ->
                    throw new FrameException("unexpected " + Wire.typeName(h.type()) + " frame from a sender");
            default -> throw new FrameException("unknown frame type " + h.type());
        }
        return true;
    }

    private ByteBuffer readBody(Wire.Header h) throws IOException {
        String what = "a " + Wire.typeName(h.type()) + " body";
        if (h.bodyLength() <= body.capacity()) {
            body.clear().limit(h.bodyLength());
            Io.readFully(link, body, false, what, activity);
            return body.flip();
        }
        // Rare (BEGIN with tens of thousands of runs): through the small direct buffer into the heap, so that many
        // connections announcing large bodies cannot exhaust direct memory.
        ByteBuffer large = ByteBuffer.allocate(h.bodyLength());
        while (large.hasRemaining()) {
            body.clear().limit(Math.min(body.capacity(), large.remaining()));
            Io.readFully(link, body, false, what, activity);
            large.put(body.flip());
        }
        return large.flip();
    }

    private void hello(ByteBuffer b) throws IOException {
        if (helloDone) {
            throw new FrameException("second HELLO on one connection");
        }
        Wire.Hello hello = Wire.parseHello(b);
        if (!hello.engineId().equals(gate.engineId())) {
            throw new TransferException(TransferError.WRONG_ENGINE, "sender " + hello.senderId() + " wants engine '" + hello.engineId()
                    + "' but this worker serves '" + gate.engineId() + "'");
        }
        helloDone = true;
        send(Wire.HELLO_OK, 0, Wire.helloOk(gate.engineId(), gate.instanceEpoch(), config.maxPayloadBytes(), config.maxSegments()));
    }

    private void begin(Wire.Header h, ByteBuffer b) throws IOException {
        if (stripes.containsKey(h.stream()) || refused.containsKey(h.stream())) {
            throw new FrameException("BEGIN on stream " + h.stream() + ", which is already open");
        }
        try {
            Wire.Begin begin = Wire.parseBegin(b, MAX_RUNS);
            if (stripes.size() >= MAX_SESSIONS) {
                throw new TransferException(TransferError.BUSY, MAX_SESSIONS + " pushes already open on this connection");
            }
            ReceiveSession s = gate.open("tcp", begin.request(), begin.geometry());
            stripes.put(h.stream(), new Stripe(s, begin.stripeBytes()));
            if (!h.pipelined()) {
                send(Wire.BEGIN_OK, h.stream(), ByteBuffer.allocate(0));
            }
        } catch (TransferException e) {
            if (h.pipelined()) {
                refused.put(h.stream(), e); // its frames are already on the way: drop them, answer at END
            } else {
                send(Wire.ERROR, h.stream(), Wire.error(e.kind(), e.getMessage()));
            }
        }
    }

    private void write(Wire.Header h, ByteBuffer b) throws IOException {
        if (b.remaining() < 4) {
            throw new FrameException("WRITE body of " + b.remaining() + " bytes has no segment count");
        }
        int n = b.getInt();
        if (n < 1 || n > config.maxSegments() || h.bodyLength() != 4 + (long) Wire.SEGMENT_BYTES * n) {
            throw new FrameException("WRITE with " + n + " segments in a body of " + h.bodyLength() + " bytes (limit "
                    + config.maxSegments() + " segments of " + Wire.SEGMENT_BYTES + " bytes)");
        }
        int[] regions = new int[n];
        long[] lengths = new long[n];
        long[] offsets = new long[n];
        long sum = 0;
        for (int i = 0; i < n; i++) {
            regions[i] = b.getInt();
            lengths[i] = b.getInt() & 0xFFFF_FFFFL;
            offsets[i] = b.getLong();
            if (lengths[i] == 0) {
                throw new FrameException("WRITE segment " + i + " has length 0");
            }
            sum += lengths[i];
        }
        if (sum != h.payloadLength()) {
            throw new FrameException("WRITE segments add up to " + sum + " bytes but the frame carries " + h.payloadLength());
        }
        Stripe stripe = stripes.get(h.stream());
        if (stripe == null) {
            if (refused.containsKey(h.stream())) {
                discard(h.payloadLength());
                return;
            }
            throw new FrameException("WRITE on stream " + h.stream() + ", which has no admitted push");
        }
        ReceiveSession s = stripe.session();
        try {
            s.beginFrame();
        } catch (TransferException fenced) {
            // Fenced after admission (lease released, attempt aborted): drop the rest of the stripe, answer at END.
            stripes.remove(h.stream());
            s.close();
            refused.put(h.stream(), fenced);
            discard(h.payloadLength());
            return;
        }
        long written = 0;
        try {
            for (int i = 0; i < n; i++) {
                MemorySegment dst = s.target(regions[i], offsets[i], lengths[i]);
                targets[i] = dst.asByteBuffer();
            }
            Io.readFully(link, targets, n, h.payloadLength(), "a WRITE frame", activity);
            written = h.payloadLength();
        } finally {
            s.endFrame(written);
            java.util.Arrays.fill(targets, 0, n, null);
        }
    }

    private void end(Wire.Header h, ByteBuffer b) throws IOException {
        long claimed = Wire.parseLong(b, "END");
        Stripe stripe = stripes.remove(h.stream());
        if (stripe == null) {
            TransferException e = refused.remove(h.stream());
            if (e == null) {
                throw new FrameException("END on stream " + h.stream() + ", which has no admitted push");
            }
            send(Wire.ERROR, h.stream(), Wire.error(e.kind(), e.getMessage()));
            return;
        }
        try (ReceiveSession s = stripe.session()) {
            TransferException stopped = s.stoppedBy();
            long got = s.bytesWritten();
            if (stopped != null) {
                send(Wire.ERROR, h.stream(), Wire.error(stopped.kind(), stopped.getMessage()));
            } else if (got != claimed || got != stripe.announcedBytes()) {
                send(Wire.ERROR, h.stream(), Wire.error(TransferError.PROTOCOL, s.request().describe() + ": stripe carried " + got
                        + " bytes, BEGIN announced " + stripe.announcedBytes() + " and END " + claimed));
            } else {
                TransferException twice = s.complete();
                if (twice == null) {
                    send(Wire.ACK, h.stream(), Wire.longBody(got));
                } else {
                    send(Wire.ERROR, h.stream(), Wire.error(twice.kind(), twice.getMessage()));
                }
            }
        }
    }

    private void abort(Wire.Header h, ByteBuffer b) throws IOException {
        String reason = Wire.parseStringBody(b, "ABORT");
        Stripe stripe = stripes.remove(h.stream());
        refused.remove(h.stream());
        if (stripe != null) {
            log.atInfo().addKeyValue("orderId", stripe.session().request().orderId()).log("sender aborted the push: " + reason);
            stripe.session().close();
        }
        send(Wire.ABORTED, h.stream(), ByteBuffer.allocate(0));
    }

    private void discard(long bytes) throws IOException {
        if (scratch == null) {
            scratch = ByteBuffer.allocateDirect(64 * 1024);
        }
        long left = bytes;
        while (left > 0) {
            scratch.clear().limit((int) Math.min(scratch.capacity(), left));
            Io.readFully(link, scratch, false, "a discarded WRITE payload", activity);
            left -= scratch.limit();
        }
    }

    private void send(byte type, int stream, ByteBuffer bodyBytes) throws IOException {
        out.clear();
        Wire.putHeader(out, type, stream, bodyBytes.remaining(), 0);
        ByteBuffer frame;
        if (bodyBytes.remaining() <= out.remaining()) {
            out.put(bodyBytes);
            frame = out.flip();
            Io.writeFully(link, frame, activity);
        } else {
            Io.writeFully(link, new ByteBuffer[] {out.flip(), bodyBytes}, 2, activity);
        }
    }

    private void sendQuietly(byte type, int stream, ByteBuffer bodyBytes) {
        try {
            send(type, stream, bodyBytes);
        } catch (IOException | RuntimeException ignored) {
            // the connection is going away anyway
        }
    }
}
