package io.orbitkv.pd.mooncake.internal;

import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.ReceiveSession;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import io.orbitkv.pd.transport.tcp.wire.FrameException;
import io.orbitkv.pd.transport.tcp.wire.Wire;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.SocketException;
import java.time.Duration;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The receiving worker's admission listener. A one-sided WRITE bypasses this process's CPU, so the {@link PushGate}
 * cannot look at each write as the tcp transport's receiver does; instead every push is admitted here before its
 * sender issues a single WRITE, and held open here until the sender confirms that every write finished:
 *
 * <ul>
 *   <li>BEGIN: {@link PushGate#open} checks the token, the instance and lease epochs, aborts and request fences, that
 *       every destination run lies inside the pool, and the page shape; refusals go back as ERROR with their kind.</li>
 *   <li>While the push is open its {@link ReceiveSession} stays inside a frame, so a fence ({@code releaseLease},
 *       {@code abortAttempt}, ...) waits for it; this thread notices the fence within {@value #STOP_CHECK_MS} ms and
 *       sends STOP, and the sender stops submitting, waits for its in-flight writes and ends the push.</li>
 *   <li>END: acknowledged (ACK) only if nothing fenced the push meanwhile; otherwise ERROR with the fence's reason.
 *       The session leaves its frame only then, so a fence returns only after the sender said its writes are done.</li>
 * </ul>
 *
 * What this cannot do, and what bounds it, is in {@code docs/mooncake.md} (fencing and security).
 */
public final class AdmissionServer implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(AdmissionServer.class);
    /** How often an open push's connection looks for a fence to pass on as STOP. */
    static final int STOP_CHECK_MS = 5;
    /** BEGIN bodies are parsed with the largest run count any worker accepts; the gate applies its own limit. */
    private static final int MAX_RUNS = 65_536;
    private static final int MAX_CONNECTIONS = 1024;

    private final PushGate gate;
    private final Supplier<AdmissionWire.HelloOk> hello;
    private final Duration ioTimeout;
    private final ServerSocket server;
    private final Thread acceptor;
    private final Set<Socket> connections = ConcurrentHashMap.newKeySet();
    private final Set<Thread> threads = ConcurrentHashMap.newKeySet();
    private final AtomicInteger count = new AtomicInteger();
    private volatile boolean closed;

    /**
     * @param hello what HELLO_OK says (read for every connection: the instance epoch is current)
     */
    public AdmissionServer(String host, int port, PushGate gate, Supplier<AdmissionWire.HelloOk> hello, Duration ioTimeout) {
        this.gate = gate;
        this.hello = hello;
        this.ioTimeout = ioTimeout;
        try {
            server = new ServerSocket();
            server.setReuseAddress(true);
            server.bind(new InetSocketAddress(host, port), 128);
        } catch (IOException e) {
            throw new UncheckedIOException("transfer.mooncake.host/control-port: cannot listen on " + host + ":" + port + ": " + e.getMessage(), e);
        }
        acceptor = Thread.ofPlatform().daemon().name("kv-mooncake-admit").start(this::acceptLoop);
    }

    public InetSocketAddress localAddress() {
        return (InetSocketAddress) server.getLocalSocketAddress();
    }

    private void acceptLoop() {
        while (!closed) {
            Socket s;
            try {
                s = server.accept();
            } catch (IOException e) {
                if (!closed) {
                    log.atError().log("accepting an admission connection failed: " + e.getMessage());
                }
                continue;
            }
            if (connections.size() >= MAX_CONNECTIONS) {
                log.atWarn().addKeyValue("peer", s.getRemoteSocketAddress()).log("refusing an admission connection: " + MAX_CONNECTIONS + " open");
                closeQuietly(s);
                continue;
            }
            connections.add(s);
            Thread t = Thread.ofPlatform().daemon().name("kv-mooncake-rx-" + count.incrementAndGet()).unstarted(() -> {
                try {
                    serve(s);
                } finally {
                    connections.remove(s);
                    closeQuietly(s);
                    threads.remove(Thread.currentThread());
                }
            });
            threads.add(t);
            t.start();
        }
    }

    private void serve(Socket s) {
        String peer = String.valueOf(s.getRemoteSocketAddress());
        try {
            s.setTcpNoDelay(true);
            s.setSoTimeout((int) Math.max(1, ioTimeout.toMillis()));
            InputStream in = new BufferedInputStream(s.getInputStream(), 64 * 1024);
            OutputStream out = new BufferedOutputStream(s.getOutputStream(), 8192);
            AdmissionWire.Frame f = AdmissionWire.read(in, null, ioTimeout.toNanos());
            if (f == null) {
                return;
            }
            if (f.type() != AdmissionWire.HELLO) {
                throw new FrameException("expected HELLO, got " + AdmissionWire.typeName(f.type()));
            }
            Wire.Hello h = Wire.parseHello(f.body());
            if (!gate.engineId().equals(h.engineId())) {
                AdmissionWire.write(out, AdmissionWire.ERROR, 0, AdmissionWire.error(TransferError.WRONG_ENGINE, "this worker serves engine '"
                        + gate.engineId() + "', not '" + h.engineId() + "'"));
                return;
            }
            peer = h.senderId() + " (" + peer + ")";
            AdmissionWire.write(out, AdmissionWire.HELLO_OK, 0, AdmissionWire.helloOk(hello.get()));
            while (!closed) {
                s.setSoTimeout(0); // idle between pushes: a pooled connection may wait for the next order for long
                f = AdmissionWire.read(in, null, ioTimeout.toNanos());
                if (f == null) {
                    return;
                }
                if (f.type() != AdmissionWire.BEGIN) {
                    throw new FrameException("unexpected " + AdmissionWire.typeName(f.type()) + " outside a push");
                }
                push(s, in, out, f, peer);
            }
        } catch (FrameException e) {
            log.atWarn().addKeyValue("peer", peer).log("admission connection closed: " + e.getMessage());
        } catch (IOException e) {
            if (!closed && !(e instanceof SocketException && "Socket closed".equals(e.getMessage()))) {
                log.atInfo().addKeyValue("peer", peer).log("admission connection ended: " + e.getMessage());
            }
        } catch (RuntimeException e) {
            log.atError().setCause(e).addKeyValue("peer", peer).log("admission connection failed");
        }
    }

    /** One push, from its BEGIN to its END or ABORT (or the connection's end). */
    private void push(Socket s, InputStream in, OutputStream out, AdmissionWire.Frame beginFrame, String peer) throws IOException {
        int id = beginFrame.push();
        Wire.Begin b;
        try {
            b = Wire.parseBegin(beginFrame.body(), MAX_RUNS);
        } catch (TransferException e) {
            AdmissionWire.write(out, AdmissionWire.ERROR, id, AdmissionWire.error(e.kind(), e.getMessage()));
            return;
        }
        ReceiveSession session;
        try {
            session = gate.open(MooncakeNames.TRANSPORT, b.request(), b.geometry());
        } catch (TransferException e) {
            AdmissionWire.write(out, AdmissionWire.ERROR, id, AdmissionWire.error(e.kind(), e.getMessage()));
            return;
        }
        long written = 0;
        try {
            try {
                // Held until END: a fence that hits this push waits until the sender says its writes are over.
                session.beginFrame();
            } catch (TransferException e) {
                session.close();
                AdmissionWire.write(out, AdmissionWire.ERROR, id, AdmissionWire.error(e.kind(), e.getMessage()));
                return;
            }
            try {
                AdmissionWire.write(out, AdmissionWire.BEGIN_OK, id, null);
                s.setSoTimeout(STOP_CHECK_MS);
                boolean[] stopSent = {false};
                AdmissionWire.Idle watch = () -> {
                    TransferException why = session.stoppedBy();
                    if (why != null && !stopSent[0]) {
                        stopSent[0] = true;
                        AdmissionWire.write(out, AdmissionWire.STOP, id, AdmissionWire.error(why.kind(), why.getMessage()));
                    }
                };
                while (true) {
                    AdmissionWire.Frame f = AdmissionWire.read(in, watch, ioTimeout.toNanos());
                    if (f == null) {
                        log.atWarn().addKeyValue("orderId", b.request().orderId()).addKeyValue("peer", peer)
                                .log("sender closed the admission connection in the middle of a push");
                        return;
                    }
                    if (f.push() != id) {
                        throw new FrameException(AdmissionWire.typeName(f.type()) + " for push " + f.push() + " inside push " + id);
                    }
                    switch (f.type()) {
                        case AdmissionWire.END -> {
                            long claimed = Wire.parseLong(f.body(), "END");
                            TransferException why = session.stoppedBy();
                            if (why != null) {
                                AdmissionWire.write(out, AdmissionWire.ERROR, id, AdmissionWire.error(why.kind(), why.getMessage()));
                            } else if (claimed != b.stripeBytes()) {
                                AdmissionWire.write(out, AdmissionWire.ERROR, id, AdmissionWire.error(TransferError.PROTOCOL, "END claims " + claimed
                                        + " bytes, BEGIN announced " + b.stripeBytes()));
                            } else {
                                written = claimed;
                                TransferException twice = session.complete();
                                if (twice == null) {
                                    AdmissionWire.write(out, AdmissionWire.ACK, id, Wire.longBody(claimed));
                                } else {
                                    AdmissionWire.write(out, AdmissionWire.ERROR, id, AdmissionWire.error(twice.kind(), twice.getMessage()));
                                }
                            }
                            return;
                        }
                        case AdmissionWire.ABORT -> {
                            String reason = Wire.parseStringBody(f.body(), "ABORT");
                            log.atInfo().addKeyValue("orderId", b.request().orderId()).addKeyValue("peer", peer).log("push aborted by its sender: "
                                    + reason);
                            AdmissionWire.write(out, AdmissionWire.ABORTED, id, null);
                            return;
                        }
                        default -> throw new FrameException("unexpected " + AdmissionWire.typeName(f.type()) + " inside a push");
                    }
                }
            } finally {
                session.endFrame(written);
            }
        } finally {
            session.close();
        }
    }

    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        closeQuietly(server);
        connections.forEach(AdmissionServer::closeQuietly);
        try {
            acceptor.join(Duration.ofSeconds(5));
            for (Thread t : threads) {
                t.join(Duration.ofSeconds(5));
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    private static void closeQuietly(java.io.Closeable c) {
        try {
            c.close();
        } catch (IOException ignored) {
            // already closed
        }
    }
}
