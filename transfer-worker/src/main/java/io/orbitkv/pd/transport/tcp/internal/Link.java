package io.orbitkv.pd.transport.tcp.internal;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.GatheringByteChannel;
import java.nio.channels.ScatteringByteChannel;
import java.nio.channels.SocketChannel;

/**
 * The byte stream a tcp connection's frames go over: the socket itself, or TLS over it ({@link TlsLink}). Blocking,
 * scattering and gathering, as {@link Io} drives it.
 */
public interface Link extends ScatteringByteChannel, GatheringByteChannel {

    @Override
    default long read(ByteBuffer[] dsts) throws IOException {
        return read(dsts, 0, dsts.length);
    }

    @Override
    default long write(ByteBuffer[] srcs) throws IOException {
        return write(srcs, 0, srcs.length);
    }

    /** The socket as it is. */
    static Link plain(SocketChannel ch) {
        return new Link() {
            @Override
            public long read(ByteBuffer[] dsts, int offset, int length) throws IOException {
                return ch.read(dsts, offset, length);
            }

            @Override
            public int read(ByteBuffer dst) throws IOException {
                return ch.read(dst);
            }

            @Override
            public long write(ByteBuffer[] srcs, int offset, int length) throws IOException {
                return ch.write(srcs, offset, length);
            }

            @Override
            public int write(ByteBuffer src) throws IOException {
                return ch.write(src);
            }

            @Override
            public boolean isOpen() {
                return ch.isOpen();
            }

            @Override
            public void close() throws IOException {
                ch.close();
            }
        };
    }
}
