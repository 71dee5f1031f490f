package io.orbitkv.pd.mooncake.internal;

import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.transport.PeerEndpoint;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import io.orbitkv.pd.transport.tcp.wire.FrameException;
import io.orbitkv.pd.transport.tcp.wire.Wire;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.time.Duration;

/**
 * The sending end of one admission connection to a peer worker ({@link AdmissionWire}): HELLO once (learning the
 * peer's instance epoch, segment and region addresses), then pushes one at a time. Used by one push at a time;
 * pooled between pushes.
 */
public final class AdmissionClient implements AutoCloseable, io.orbitkv.pd.transport.PeerConnectionPool.Pooled {

    private final Socket socket;
    private final InputStream in;
    private final OutputStream out;
    private final PeerEndpoint peer;
    private final long generation;
    private final long ioNanos;
    private AdmissionWire.HelloOk hello;
    private TransferException stop;

    private AdmissionClient(Socket socket, PeerEndpoint peer, long generation, Duration ioTimeout) throws IOException {
        this.socket = socket;
        this.peer = peer;
        this.generation = generation;
        this.ioNanos = ioTimeout.toNanos();
        this.in = new BufferedInputStream(socket.getInputStream(), 8192);
        this.out = new BufferedOutputStream(socket.getOutputStream(), 64 * 1024);
    }

    /**
     * Connects to {@code control} ({@code host:port}) and says HELLO.
     *
     * @throws TransferException {@link TransferError#PEER_UNREACHABLE} when nobody listens, {@link TransferError#WRONG_ENGINE}
     *                           when another engine answers, {@link TransferError#CONNECTION_LOST} when the handshake breaks
     */
    public static AdmissionClient open(PeerEndpoint peer, String control, long generation, String senderId, Duration connectTimeout,
                                       Duration ioTimeout) {
        InetSocketAddress addr = address(peer, control);
        Socket s = new Socket();
        try {
            s.setTcpNoDelay(true);
            s.connect(addr, (int) Math.max(1, connectTimeout.toMillis()));
            s.setSoTimeout((int) Math.max(1, ioTimeout.toMillis()));
        } catch (IOException e) {
            closeQuietly(s);
            throw new TransferException(TransferError.PEER_UNREACHABLE, "cannot reach the mooncake admission listener of " + peer + " at " + control
                    + ": " + e.getMessage(), e);
        }
        AdmissionClient c;
        try {
            c = new AdmissionClient(s, peer, generation, ioTimeout);
        } catch (IOException e) {
            closeQuietly(s);
            throw new TransferException(TransferError.CONNECTION_LOST, "admission connection to " + peer + ": " + e.getMessage(), e);
        }
        try {
            AdmissionWire.write(c.out, AdmissionWire.HELLO, 0, Wire.hello(senderId, peer.engineId()));
            c.hello = AdmissionWire.parseHelloOk(c.await(AdmissionWire.HELLO_OK, 0));
            if (!c.hello.engineId().equals(peer.engineId())) {
                throw new TransferException(TransferError.WRONG_ENGINE, peer + " answers as engine '" + c.hello.engineId() + "'");
            }
            return c;
        } catch (IOException e) {
            c.close();
            throw new TransferException(TransferError.CONNECTION_LOST, "admission handshake with " + peer + " failed: " + e.getMessage(), e);
        } catch (RuntimeException e) {
            c.close();
            throw e;
        }
    }

    private static InetSocketAddress address(PeerEndpoint peer, String control) {
        int colon = control == null ? -1 : control.lastIndexOf(':');
        if (colon <= 0) {
            throw new TransferException(TransferError.PEER_UNREACHABLE, peer + ": the endpoint's 'control' attribute must be host:port, got '"
                    + control + "'");
        }
        try {
            String host = control.substring(0, colon);
            if (host.startsWith("[") && host.endsWith("]")) {
                host = host.substring(1, host.length() - 1);
            }
            return new InetSocketAddress(host, Integer.parseInt(control.substring(colon + 1)));
        } catch (IllegalArgumentException e) {
            throw new TransferException(TransferError.PEER_UNREACHABLE, peer + ": bad admission address '" + control + "': " + e.getMessage());
        }
    }

    public PeerEndpoint peer() {
        return peer;
    }

    public long generation() {
        return generation;
    }

    /** What the peer said in HELLO_OK. */
    public AdmissionWire.HelloOk hello() {
        return hello;
    }

    public boolean isOpen() {
        return !socket.isClosed();
    }

    /** Asks to push; returns when admitted, throws the receiver's refusal otherwise. */
    public void begin(int push, PushRequest r, KvGeometry g, long bytes) throws IOException {
        stop = null;
        AdmissionWire.write(out, AdmissionWire.BEGIN, push, Wire.begin(r, g, bytes));
        await(AdmissionWire.BEGIN_OK, push);
    }

    /**
     * The receiver's STOP for this push, if one arrived (non-blocking): a fence hit the push, stop writing.
     */
    public TransferException stopped(int push) throws IOException {
        if (stop == null && in.available() >= AdmissionWire.HEADER_BYTES) {
            AdmissionWire.Frame f = AdmissionWire.read(in, null, ioNanos);
            if (f == null) {
                throw new EOFException("admission connection closed by " + peer + " during the push");
            }
            if (f.type() != AdmissionWire.STOP || f.push() != push) {
                throw new FrameException("expected nothing or STOP for push " + push + ", got " + AdmissionWire.typeName(f.type()) + " for push "
                        + f.push());
            }
            stop = AdmissionWire.parseError(f.body(), peer.toString());
        }
        return stop;
    }

    /** Ends a push whose writes all finished; returns the bytes the receiver acknowledged, or throws its refusal. */
    public long end(int push, long bytes) throws IOException {
        AdmissionWire.write(out, AdmissionWire.END, push, Wire.longBody(bytes));
        return Wire.parseLong(await(AdmissionWire.ACK, push), "ACK");
    }

    /** Abandons a push whose writes all finished (or were never issued). */
    public void abort(int push, String reason) throws IOException {
        AdmissionWire.write(out, AdmissionWire.ABORT, push, Wire.stringBody(reason.length() > 500 ? reason.substring(0, 500) : reason));
        await(AdmissionWire.ABORTED, push);
    }

    /** The reply to a request frame: {@code expected}, or ERROR thrown as the receiver's reason; a STOP before it is noted. */
    private java.nio.ByteBuffer await(byte expected, int push) throws IOException {
        while (true) {
            AdmissionWire.Frame f = AdmissionWire.read(in, null, ioNanos);
            if (f == null) {
                throw new EOFException("admission connection closed by " + peer + " before its " + AdmissionWire.typeName(expected));
            }
            if (f.push() != push) {
                throw new FrameException("expected " + AdmissionWire.typeName(expected) + " for push " + push + ", got "
                        + AdmissionWire.typeName(f.type()) + " for push " + f.push());
            }
            if (f.type() == AdmissionWire.STOP) {
                stop = AdmissionWire.parseError(f.body(), peer.toString());
                continue;
            }
            if (f.type() == AdmissionWire.ERROR) {
                throw AdmissionWire.parseError(f.body(), peer.toString());
            }
            if (f.type() != expected) {
                throw new FrameException("expected " + AdmissionWire.typeName(expected) + ", got " + AdmissionWire.typeName(f.type()));
            }
            return f.body();
        }
    }

    @Override
    public void close() {
        closeQuietly(socket);
    }

    private static void closeQuietly(Socket s) {
        try {
            s.close();
        } catch (IOException ignored) {
            // already closed
        }
    }
}
