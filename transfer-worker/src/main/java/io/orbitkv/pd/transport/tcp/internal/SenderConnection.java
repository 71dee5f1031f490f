package io.orbitkv.pd.transport.tcp.internal;

import io.orbitkv.pd.transport.tcp.wire.Wire;
import io.orbitkv.pd.transport.tcp.wire.FrameException;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.transport.PeerEndpoint;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import io.orbitkv.pd.transport.tcp.TcpConfig;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;

/**
 * The sending end of one connection to a peer worker: HELLO once, then stripes of pushes (BEGIN, WRITE…, END),
 * one at a time. Control frames wait for their reply; WRITE frames stream without waiting, each one gathering
 * write of its header, its segment table and the page slices straight from the source pool.
 */
public final class SenderConnection implements AutoCloseable, io.orbitkv.pd.transport.PeerConnectionPool.Pooled {

    private final SocketChannel ch;
    private final Link link;
    private final PeerEndpoint peer;
    private final long generation;
    private final Watchdog watchdog;
    private final Watchdog.Activity activity;
    private final ByteBuffer header = ByteBuffer.allocateDirect(Wire.HEADER_BYTES);
    private final ByteBuffer control = ByteBuffer.allocateDirect(Wire.HEADER_BYTES + 4096);
    private final ByteBuffer table;
    private final ByteBuffer[] gather;
    private int maxPayload;
    private int maxSegments;
    private long peerInstanceEpoch;
    private ByteBuffer reply = ByteBuffer.allocateDirect(8192);
    /** When the connection last finished a push ({@link System#nanoTime()}); its opening counts as one. */
    private volatile long lastUsedNanos = System.nanoTime();
    private final long openedNanos = System.nanoTime();

    private SenderConnection(SocketChannel ch, Link link, PeerEndpoint peer, long generation, Watchdog watchdog, TcpConfig config) {
        this.ch = ch;
        this.link = link;
        this.peer = peer;
        this.generation = generation;
        this.watchdog = watchdog;
        this.activity = watchdog.watch(ch);
        this.maxPayload = config.frameBytes();
        this.maxSegments = config.maxSegments();
        this.table = ByteBuffer.allocateDirect(Wire.HEADER_BYTES + 4 + Wire.SEGMENT_BYTES * maxSegments);
        this.gather = new ByteBuffer[1 + maxSegments];
    }

    /** Connects and says HELLO; the peer's answer names its engine, its instance epoch and its limits. */
    public static SenderConnection open(PeerEndpoint peer, long generation, String senderId, TcpConfig config, Watchdog watchdog,
                                        javax.net.ssl.SSLContext tls) {
        InetSocketAddress addr = address(peer);
        SocketChannel ch = null;
        try {
            ch = SocketChannel.open();
            ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
            io.orbitkv.pd.transport.tcp.TcpTransport.keepalive(ch, config);
            if (config.socketBufferBytes() > 0) {
                ch.setOption(StandardSocketOptions.SO_SNDBUF, config.socketBufferBytes());
                ch.setOption(StandardSocketOptions.SO_RCVBUF, config.socketBufferBytes());
            }
            ch.socket().connect(addr, (int) config.connectTimeout().toMillis());
        } catch (IOException e) {
            closeQuietly(ch);
            throw new TransferException(TransferError.PEER_UNREACHABLE, "cannot connect to " + peer + ": " + e.getMessage(), e);
        }
        Link link = Link.plain(ch);
        if (tls != null) {
            Watchdog.Activity handshake = watchdog.watch(ch);
            try {
                handshake.busy(true); // a peer that stalls the TLS handshake is cut after the io-timeout, like any other stall
                link = TlsLink.client(ch, tls, addr.getHostString(), addr.getPort());
            } catch (IOException e) {
                closeQuietly(ch);
                throw new TransferException(TransferError.CONNECTION_LOST, "TLS handshake with " + peer + " failed: " + e.getMessage(), e);
            } finally {
                watchdog.unwatch(handshake);
            }
        }
        SenderConnection c = new SenderConnection(ch, link, peer, generation, watchdog, config);
        try {
            c.activity.busy(true);
            c.sendControl(Wire.HELLO, 0, 0, Wire.hello(senderId, peer.engineId()));
            Wire.HelloOk ok = Wire.parseHelloOk(c.await(Wire.HELLO_OK, 0));
            if (!ok.engineId().equals(peer.engineId())) {
                throw new TransferException(TransferError.WRONG_ENGINE, peer + " answers as engine '" + ok.engineId() + "'");
            }
            c.maxPayload = Math.min(config.frameBytes(), ok.maxPayloadBytes());
            c.maxSegments = Math.min(config.maxSegments(), ok.maxSegments());
            c.peerInstanceEpoch = ok.instanceEpoch();
            c.activity.busy(false);
            return c;
        } catch (IOException e) {
            c.close();
            throw new TransferException(TransferError.CONNECTION_LOST, "handshake with " + peer + " failed: " + e.getMessage(), e);
        } catch (RuntimeException e) {
            c.close();
            throw e;
        }
    }

    private static InetSocketAddress address(PeerEndpoint peer) {
        String a = peer.address();
        int colon = a.lastIndexOf(':');
        if (colon <= 0) {
            throw new TransferException(TransferError.PEER_UNREACHABLE, peer + ": tcp address must be host:port");
        }
        try {
            String host = a.substring(0, colon);
            if (host.startsWith("[") && host.endsWith("]")) {
                host = host.substring(1, host.length() - 1);
            }
            return new InetSocketAddress(host, Integer.parseInt(a.substring(colon + 1)));
        } catch (IllegalArgumentException e) {
            throw new TransferException(TransferError.PEER_UNREACHABLE, peer + ": bad tcp address: " + e.getMessage());
        }
    }

    public PeerEndpoint peer() {
        return peer;
    }

    public long generation() {
        return generation;
    }

    public int maxPayload() {
        return maxPayload;
    }

    public int maxSegments() {
        return maxSegments;
    }

    public long peerInstanceEpoch() {
        return peerInstanceEpoch;
    }

    public boolean isOpen() {
        return ch.isOpen();
    }

    /** True when the watchdog closed the connection for lack of progress. */
    public boolean timedOut() {
        return activity.fired();
    }

    /** Inside a push: stalls now count. Leaving one marks the connection as just used. */
    public void busy(boolean b) {
        activity.busy(b);
        if (!b) {
            lastUsedNanos = System.nanoTime();
        }
    }

    /** How long since the connection was last known alive (opened, or finished a push). */
    @Override
    public long idleNanos() {
        return System.nanoTime() - lastUsedNanos;
    }

    @Override
    public long ageNanos() {
        return System.nanoTime() - openedNanos;
    }

    /** Announces a stripe; refused stripes throw the receiver's reason. */
    public void begin(int stream, PushRequest r, KvGeometry g, long stripeBytes) throws IOException {
        sendControl(Wire.BEGIN, 0, stream, Wire.begin(r, g, stripeBytes));
        await(Wire.BEGIN_OK, stream);
    }

    /**
     * Announces a stripe whose frames follow at once ({@link Wire#FLAG_PIPELINED}): no round trip before the first
     * page byte; the receiver's admission runs while the frames travel, and a refusal comes back at {@link #end}.
     */
    public void beginPipelined(int stream, PushRequest r, KvGeometry g, long stripeBytes) throws IOException {
        sendControl(Wire.BEGIN, Wire.FLAG_PIPELINED, stream, Wire.begin(r, g, stripeBytes));
    }

    /** The buffer for a WRITE frame's segment table; fill with {@link #putSegment} after {@link #startFrame}. */
    public void startFrame() {
        table.clear().position(Wire.HEADER_BYTES + 4);
    }

    /** Adds one segment: {@code slice} goes to {@code offset} in {@code region}. Returns the segments so far. */
    public int putSegment(int index, int region, long offset, ByteBuffer slice) {
        table.putInt(region).putInt(slice.remaining()).putLong(offset);
        gather[1 + index] = slice;
        return index + 1;
    }

    /** Sends the frame built since {@link #startFrame}: one gathering write of header, table and page slices. */
    public void sendFrame(int stream, int segments, long payload) throws IOException {
        int end = table.position();
        table.position(0);
        Wire.putHeader(table, Wire.WRITE, stream, 4 + Wire.SEGMENT_BYTES * segments, payload);
        table.putInt(segments);
        table.position(0).limit(end);
        gather[0] = table;
        try {
            Io.writeFully(link, gather, 1 + segments, activity);
        } finally {
            java.util.Arrays.fill(gather, 1, 1 + segments, null);
            table.limit(table.capacity());
        }
    }

    /** Ends a stripe; returns the bytes the receiver acknowledged as in place. */
    public long end(int stream, long bytes) throws IOException {
        sendControl(Wire.END, 0, stream, Wire.longBody(bytes));
        return Wire.parseLong(await(Wire.ACK, stream), "ACK");
    }

    /** Abandons a stripe; returns once the receiver dropped it (no later byte of it will be written). */
    public void abort(int stream, String reason) throws IOException {
        sendControl(Wire.ABORT, 0, stream, Wire.stringBody(reason.length() > 500 ? reason.substring(0, 500) : reason));
        await(Wire.ABORTED, stream);
    }

    private void sendControl(byte type, int flags, int stream, ByteBuffer body) throws IOException {
        control.clear();
        Wire.putHeader(control, type, flags, stream, body.remaining(), 0);
        if (body.remaining() <= control.remaining()) {
            control.put(body);
            Io.writeFully(link, control.flip(), activity);
        } else {
            Io.writeFully(link, new ByteBuffer[] {control.flip(), body}, 2, activity);
        }
    }

    /** Reads the reply to a control frame: {@code expected}, or ERROR (thrown as the receiver's reason). */
    private ByteBuffer await(byte expected, int stream) throws IOException {
        header.clear();
        if (!Io.readFully(link, header, true, "a reply header", activity)) {
            // Not a broken frame: the peer closed between frames (it restarted, or refused us before we wrote).
            // (Every reply type is its request type + 1.)
            throw new java.io.EOFException("connection closed by " + peer + " before its reply to " + Wire.typeName(expected - 1));
        }
        Wire.Header h = Wire.parseHeader(header.flip());
        if (h.bodyLength() > 1 << 20) {
            throw new FrameException("reply body of " + h.bodyLength() + " bytes");
        }
        if (reply.capacity() < h.bodyLength()) {
            reply = ByteBuffer.allocateDirect(h.bodyLength());
        }
        reply.clear().limit(h.bodyLength());
        Io.readFully(link, reply, false, "a reply body", activity);
        reply.flip();
        if (h.type() == Wire.ERROR) {
            throw Wire.parseError(reply, peer.toString());
        }
        if (h.type() != expected || h.stream() != stream) {
            throw new FrameException("expected " + Wire.typeName(expected) + " on stream " + stream + ", got " + Wire.typeName(h.type())
                    + " on stream " + h.stream());
        }
        return reply;
    }

    @Override
    public void close() {
        watchdog.unwatch(activity);
        closeQuietly(ch);
    }

    private static void closeQuietly(SocketChannel ch) {
        if (ch != null) {
            try {
                ch.close();
            } catch (IOException ignored) {
                // already closed
            }
        }
    }
}
