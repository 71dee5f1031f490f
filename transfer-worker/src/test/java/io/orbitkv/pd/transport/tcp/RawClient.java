package io.orbitkv.pd.transport.tcp;

import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.tcp.wire.Wire;
import java.io.DataInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.SocketTimeoutException;
import java.nio.ByteBuffer;

/** A hand-driven peer for hostile-input tests: writes whatever bytes it is told, reads frames with a timeout. */
final class RawClient implements AutoCloseable {

    record Frame(Wire.Header header, ByteBuffer body) { }

    private final Socket socket;
    private final OutputStream out;
    private final DataInputStream in;

    RawClient(InetSocketAddress address) throws IOException {
        socket = new Socket();
        socket.connect(address, 3000);
        socket.setSoTimeout(15_000);
        out = socket.getOutputStream();
        in = new DataInputStream(socket.getInputStream());
    }

    void send(byte[] bytes) throws IOException {
        out.write(bytes);
        out.flush();
    }

    void send(byte type, int stream, ByteBuffer body, long payloadLength) throws IOException {
        ByteBuffer b = ByteBuffer.allocate(Wire.HEADER_BYTES + body.remaining());
        Wire.putHeader(b, type, stream, body.remaining(), payloadLength);
        b.put(body.duplicate());
        send(b.array());
    }

    Frame read() throws IOException {
        byte[] h = new byte[Wire.HEADER_BYTES];
        in.readFully(h);
        Wire.Header header = Wire.parseHeader(ByteBuffer.wrap(h));
        byte[] body = new byte[header.bodyLength()];
        in.readFully(body);
        return new Frame(header, ByteBuffer.wrap(body));
    }

    Frame hello(String engine) throws IOException {
        send(Wire.HELLO, 0, Wire.hello("raw-client", engine), 0);
        return read();
    }

    Frame begin(int stream, PushRequest r, KvGeometry g, long stripeBytes) throws IOException {
        send(Wire.BEGIN, stream, Wire.begin(r, g, stripeBytes), 0);
        return read();
    }

    /** A WRITE header and segment table; the payload follows separately (or not at all). */
    void writeHeader(int stream, int region, long offset, int length) throws IOException {
        ByteBuffer t = ByteBuffer.allocate(4 + Wire.SEGMENT_BYTES).putInt(1).putInt(region).putInt(length).putLong(offset).flip();
        send(Wire.WRITE, stream, t, length);
    }

    /** True when the peer closed the connection (after any frames it still sent, which are skipped). */
    boolean closedByPeer() throws IOException {
        try {
            while (in.read() >= 0) {
                // drain what the peer sent before closing
            }
            return true;
        } catch (SocketTimeoutException e) {
            return false;
        } catch (EOFException | java.net.SocketException e) {
            return true;
        }
    }

    @Override
    public void close() throws IOException {
        socket.close();
    }
}
