package io.orbitkv.pd.transport.tcp.internal;

import java.io.EOFException;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SocketChannel;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.SSLEngineResult;
import javax.net.ssl.SSLException;
import javax.net.ssl.SSLParameters;

/**
 * TLS over a blocking socket channel, with the JDK's {@link SSLEngine}: a gathering write encrypts straight from the
 * page slices it is given, a scattering read decrypts straight into the destination pages when a whole record fits
 * (else through a record-sized buffer). The handshake runs when the link is made, on the caller's thread, under the
 * connection's io-timeout watchdog like every other read and write.
 */
public final class TlsLink implements Link {

    private final SocketChannel ch;
    private final SSLEngine engine;
    private ByteBuffer netIn;
    private ByteBuffer netOut;
    private ByteBuffer appIn;
    private boolean eof;

    private TlsLink(SocketChannel ch, SSLEngine engine) {
        this.ch = ch;
        this.engine = engine;
        int packet = engine.getSession().getPacketBufferSize();
        this.netIn = ByteBuffer.allocateDirect(packet);
        this.netOut = ByteBuffer.allocateDirect(packet);
        this.appIn = ByteBuffer.allocateDirect(engine.getSession().getApplicationBufferSize());
        netIn.flip(); // empty, ready to read from
        appIn.flip();
    }

    /** The sender's side: checks that the receiver's certificate is valid for {@code host}. */
    public static TlsLink client(SocketChannel ch, SSLContext ctx, String host, int port) throws IOException {
        SSLEngine e = ctx.createSSLEngine(host, port);
        e.setUseClientMode(true);
        SSLParameters p = e.getSSLParameters();
        p.setEndpointIdentificationAlgorithm("HTTPS");
        e.setSSLParameters(p);
        TlsLink l = new TlsLink(ch, e);
        l.handshake();
        return l;
    }

    /** The receiver's side. */
    public static TlsLink server(SocketChannel ch, SSLContext ctx) throws IOException {
        SSLEngine e = ctx.createSSLEngine();
        e.setUseClientMode(false);
        TlsLink l = new TlsLink(ch, e);
        l.handshake();
        return l;
    }

    private void handshake() throws IOException {
        engine.beginHandshake();
        ByteBuffer none = ByteBuffer.allocate(0);
        while (true) {
            switch (engine.getHandshakeStatus()) {
                case NEED_WRAP -> wrap(new ByteBuffer[] {none}, 0, 1);
                case NEED_UNWRAP, NEED_UNWRAP_AGAIN -> {
                    appIn.compact();
                    try {
                        SSLEngineResult r = unwrap(new ByteBuffer[] {appIn}, 0, 1);
                        if (r == null) {
                            throw new EOFException("connection closed during the TLS handshake");
                        }
                    } finally {
                        appIn.flip();
                    }
                }
                case NEED_TASK -> {
                    Runnable t;
                    while ((t = engine.getDelegatedTask()) != null) {
                        t.run();
                    }
                }
                case FINISHED, NOT_HANDSHAKING -> {
                    return;
                }
            }
        }
    }

    /** Encrypts one record from {@code srcs} and writes it; returns the plaintext bytes consumed. */
    private long wrap(ByteBuffer[] srcs, int offset, int length) throws IOException {
        netOut.clear();
        SSLEngineResult r = engine.wrap(srcs, offset, length, netOut);
        while (r.getStatus() == SSLEngineResult.Status.BUFFER_OVERFLOW) {
            netOut = ByteBuffer.allocateDirect(Math.max(netOut.capacity() * 2, engine.getSession().getPacketBufferSize()));
            r = engine.wrap(srcs, offset, length, netOut);
        }
        if (r.getStatus() == SSLEngineResult.Status.CLOSED && r.bytesProduced() == 0) {
            throw new SSLException("TLS session closed");
        }
        netOut.flip();
        while (netOut.hasRemaining()) {
            ch.write(netOut);
        }
        return r.bytesConsumed();
    }

    /**
     * Decrypts one record into {@code dsts} (reading from the socket as needed); null at the end of the stream with
     * nothing buffered.
     */
    private SSLEngineResult unwrap(ByteBuffer[] dsts, int offset, int length) throws IOException {
        while (true) {
            SSLEngineResult r = engine.unwrap(netIn, dsts, offset, length);
            switch (r.getStatus()) {
                case OK -> {
                    if (r.bytesProduced() > 0 || r.getHandshakeStatus() != SSLEngineResult.HandshakeStatus.NEED_UNWRAP) {
                        return r;
                    }
                }
                case BUFFER_UNDERFLOW -> {
                    netIn.compact();
                    if (netIn.remaining() == 0) {
                        ByteBuffer bigger = ByteBuffer.allocateDirect(netIn.capacity() * 2);
                        netIn.flip();
                        bigger.put(netIn);
                        netIn = bigger;
                    }
                    int n = ch.read(netIn);
                    netIn.flip();
                    if (n < 0) {
                        eof = true;
                        return null;
                    }
                }
                case BUFFER_OVERFLOW -> {
                    return r; // the caller's buffers cannot hold a record: it decrypts into appIn instead
                }
                case CLOSED -> {
                    eof = true;
                    return null;
                }
            }
        }
    }

    @Override
    public long read(ByteBuffer[] dsts, int offset, int length) throws IOException {
        if (appIn.hasRemaining()) {
            return drainAppIn(dsts, offset, length);
        }
        if (eof) {
            return -1;
        }
        SSLEngineResult r = unwrap(dsts, offset, length);
        if (r == null) {
            return -1;
        }
        if (r.getStatus() == SSLEngineResult.Status.BUFFER_OVERFLOW) {
            appIn.compact();
            try {
                r = unwrap(new ByteBuffer[] {appIn}, 0, 1);
            } finally {
                appIn.flip();
            }
            if (r == null) {
                return -1;
            }
            return drainAppIn(dsts, offset, length);
        }
        return r.bytesProduced();
    }

    private long drainAppIn(ByteBuffer[] dsts, int offset, int length) {
        long n = 0;
        for (int i = offset; i < offset + length && appIn.hasRemaining(); i++) {
            ByteBuffer d = dsts[i];
            int k = Math.min(d.remaining(), appIn.remaining());
            ByteBuffer slice = appIn.slice(appIn.position(), k);
            d.put(slice);
            appIn.position(appIn.position() + k);
            n += k;
        }
        return n;
    }

    @Override
    public int read(ByteBuffer dst) throws IOException {
        return (int) read(new ByteBuffer[] {dst}, 0, 1);
    }

    @Override
    public long write(ByteBuffer[] srcs, int offset, int length) throws IOException {
        return wrap(srcs, offset, length);
    }

    @Override
    public int write(ByteBuffer src) throws IOException {
        return (int) write(new ByteBuffer[] {src}, 0, 1);
    }

    @Override
    public boolean isOpen() {
        return ch.isOpen();
    }

    /** Sends close_notify when it can, then closes the socket. */
    @Override
    public void close() throws IOException {
        try {
            engine.closeOutbound();
            if (ch.isOpen()) {
                wrap(new ByteBuffer[] {ByteBuffer.allocate(0)}, 0, 1);
            }
        } catch (IOException ignored) {
            // the peer is gone: nothing to say goodbye to
        } finally {
            ch.close();
        }
    }
}
