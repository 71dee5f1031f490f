package io.orbitkv.pd.harness;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;

/**
 * A fault-injecting TCP relay on the data plane: a worker advertises the relay's port, so every push to it crosses
 * the relay, which forwards both ways byte for byte — until told to {@link #cut()} every connection (both sides closed
 * mid-stream, as a network or a peer's kernel would) or to {@link #stall} (bytes held back, connections open: a
 * gray network failure).
 */
public final class FaultRelay implements AutoCloseable {

    private final ServerSocket server;
    private final InetSocketAddress target;
    private final Set<Socket> sockets = ConcurrentHashMap.newKeySet();
    private final Object gate = new Object();
    private final AtomicLong connections = new AtomicLong();
    private final AtomicLong bytes = new AtomicLong();
    private volatile long stalledUntil;
    private volatile boolean closed;

    /** Listens on {@code port} of the loopback interface and relays to {@code target}. */
    public FaultRelay(int port, InetSocketAddress target) throws IOException {
        this.server = new ServerSocket(port, 128, InetAddress.getLoopbackAddress());
        this.target = target;
        Thread.ofVirtual().name("relay-accept").start(this::accept);
    }

    private void accept() {
        while (!closed) {
            try {
                Socket in = server.accept();
                Socket out = new Socket();
                try {
                    out.connect(target, 2000);
                } catch (IOException e) {
                    in.close();
                    continue;
                }
                in.setTcpNoDelay(true);
                out.setTcpNoDelay(true);
                sockets.add(in);
                sockets.add(out);
                connections.incrementAndGet();
                Thread.ofVirtual().start(() -> pump(in, out));
                Thread.ofVirtual().start(() -> pump(out, in));
            } catch (IOException e) {
                if (!closed) {
                    continue;
                }
                return;
            }
        }
    }

    private void pump(Socket from, Socket to) {
        byte[] buf = new byte[256 << 10];
        try (InputStream in = from.getInputStream(); OutputStream out = to.getOutputStream()) {
            int n;
            while ((n = in.read(buf)) >= 0) {
                awaitFlow();
                out.write(buf, 0, n);
                bytes.addAndGet(n);
            }
        } catch (IOException | InterruptedException e) {
            // cut, closed or reset: close both sides below
        } finally {
            close(from);
            close(to);
        }
    }

    private void awaitFlow() throws InterruptedException {
        synchronized (gate) {
            long left;
            while ((left = stalledUntil - System.currentTimeMillis()) > 0) {
                gate.wait(left);
            }
        }
    }

    /** Closes every relayed connection now; new ones are relayed again. Returns how many were cut. */
    public int cut() {
        int n = 0;
        for (Socket s : sockets) {
            close(s);
            n++;
        }
        return n / 2;
    }

    /** Holds every byte back for {@code millis} (connections stay open), then lets them flow again. */
    public void stall(long millis) {
        synchronized (gate) {
            stalledUntil = System.currentTimeMillis() + millis;
        }
    }

    public long connections() {
        return connections.get();
    }

    public long bytes() {
        return bytes.get();
    }

    private void close(Socket s) {
        sockets.remove(s);
        try {
            s.close();
        } catch (IOException e) {
            // already closed
        }
    }

    @Override
    public void close() {
        closed = true;
        try {
            server.close();
        } catch (IOException e) {
            // already closed
        }
        cut();
    }
}
