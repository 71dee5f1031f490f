package io.orbitkv.pd.mooncake;

import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvPool;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.mooncake.internal.AdmissionClient;
import io.orbitkv.pd.mooncake.internal.AdmissionWire;
import io.orbitkv.pd.mooncake.internal.WriteBatcher;
import io.orbitkv.pd.mooncake.te.MooncakeException;
import io.orbitkv.pd.mooncake.te.TransferEngine;
import io.orbitkv.pd.transport.AbstractTransfer;
import io.orbitkv.pd.transport.PeerConnectionPool;
import io.orbitkv.pd.transport.PeerEndpoint;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import io.orbitkv.pd.transport.TransferResult;
import io.orbitkv.pd.transport.tcp.wire.FrameException;
import java.io.IOException;
import java.lang.foreign.Arena;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One mooncake push, on its own thread from start to the last finished write: HELLO and admission (BEGIN) over a
 * pooled admission connection, the writes ({@link WritePump}), then END answered by ACK. The transport owns the
 * connections, the engine and the registered memory; the push borrows them.
 */
final class MooncakeTransfer extends AbstractTransfer {

    private static final Logger log = LoggerFactory.getLogger(MooncakeTransport.class);

    private final MooncakeTransport transport;
    private final PushRequest request;
    private final KvPool source;
    private final TransferPlan plan;
    private final PeerEndpoint peer;

    MooncakeTransfer(MooncakeTransport transport, PushRequest request, KvPool source, TransferPlan plan, PeerEndpoint peer) {
        this.transport = transport;
        this.request = request;
        this.source = source;
        this.plan = plan;
        this.peer = peer;
    }

    MooncakeConfig config() {
        return transport.config();
    }

    TransferEngine engine() {
        return transport.engine();
    }

    PushRequest request() {
        return request;
    }

    PeerEndpoint peer() {
        return peer;
    }

    /** Why the writes must stop now, or null: a cancellation, the transport closing or the order's deadline. */
    TransferException stopCause() {
        TransferException stop = stopped();
        if (stop != null) {
            return stop;
        }
        if (transport.isClosed()) {
            return new TransferException(TransferError.INTERNAL, "mooncake transport closed during the push");
        }
        if (request.deadlinePassed()) {
            return new TransferException(TransferError.TIMEOUT, "the order's deadline passed");
        }
        return null;
    }

    void run() {
        long t0 = System.nanoTime();
        AdmissionClient c = null;
        try {
            transport.ensureRegistered(source);
            int push = transport.nextPushId();
            int segment;
            for (int tries = 0; ; tries++) {
                PeerConnectionPool.Lease<AdmissionClient> l = transport.acquire(peer);
                c = l.connection();
                checkPeer(c.hello());
                segment = transport.segment(peer, c.hello().segment());
                try {
                    c.begin(push, request, plan.source(), plan.totalBytes());
                    break;
                } catch (IOException e) {
                    c.close();
                    c = null;
                    if (!l.reused() || tries > 0 || e instanceof FrameException) {
                        throw e;
                    }
                    // A pooled connection to a peer that restarted: dead on first use. One fresh try.
                }
            }
            AdmissionClient admitted = c;
            c = null; // from here on write() owns the connection: it releases or closes it
            long bytes = write(admitted, push, segment);
            succeed(new TransferResult(bytes, System.nanoTime() - t0, MooncakeTransport.NAME, 1));
        } catch (TransferException e) {
            if (c != null && e.getMessage().startsWith("refused by")) {
                transport.release(c); // refused at BEGIN: the connection is clean
                c = null;
            }
            fail(e);
        } catch (IOException e) {
            fail(new TransferException(e instanceof FrameException ? TransferError.PROTOCOL : TransferError.CONNECTION_LOST, "admission"
                    + " connection to " + peer + ": " + e.getMessage(), e));
        } catch (MooncakeException e) {
            fail(new TransferException(e.kind(), e.getMessage(), e));
        } catch (RuntimeException e) {
            log.atError().setCause(e).addKeyValue("orderId", request.orderId()).log("mooncake push failed");
            failUnexpected("mooncake push", e);
        } finally {
            if (c != null) {
                c.close();
            }
            transport.finished(this);
        }
    }

    private void checkPeer(AdmissionWire.HelloOk h) {
        String protocol = engine().protocol();
        if (!h.protocol().equals(protocol)) {
            throw new TransferException(TransferError.NO_TRANSPORT, peer + " moves bytes with Mooncake's " + h.protocol() + " transport, this"
                    + " worker with " + protocol);
        }
        KvGeometry d = plan.dest();
        if (h.regions().size() != d.regionCount()) {
            throw new TransferException(TransferError.LAYOUT_MISMATCH, peer + " registered " + h.regions().size() + " regions, its layout has "
                    + d.regionCount());
        }
    }

    /** Issues every write, waits for all of them, ends the push; releases or closes {@code c}. Returns the bytes acknowledged. */
    private long write(AdmissionClient c, int push, int segment) {
        AdmissionWire.HelloOk h = c.hello();
        int regions = plan.source().regionCount();
        long[] src = new long[regions];
        for (int r = 0; r < regions; r++) {
            src[r] = source.baseAddress(r);
        }
        long[] dst = new long[h.regions().size()];
        long[] len = new long[dst.length];
        for (int r = 0; r < dst.length; r++) {
            dst[r] = h.base(r);
            len[r] = h.length(r);
        }
        MooncakeConfig config = config();
        WritePump p;
        try (Arena arena = Arena.ofConfined()) {
            p = new WritePump(this, arena, c, push, new WriteBatcher(plan, src, dst, len, segment, config.maxRequestBytes()));
            p.run();
        } catch (TransferException e) {
            // Nothing was submitted: the plan does not fit the receiver's regions.
            abortQuietly(c, push, e.reason());
            throw e;
        }
        if (p.leaked > 0) {
            // Writes may still land: do not tell the receiver the push is over. Closing the connection ends the
            // push there; the log says what happened.
            log.atError().addKeyValue("orderId", request.orderId()).addKeyValue("peer", peer.toString())
                    .log(p.leaked + " Mooncake writes still unfinished " + config.drainTimeout().toMillis() + " ms after the push stopped");
            c.close();
            throw p.failure;
        }
        try {
            if (p.failure == null) {
                long ack = c.end(push, p.completed);
                if (ack != plan.totalBytes()) {
                    throw new TransferException(TransferError.PROTOCOL, peer + " acknowledged " + ack + " of " + plan.totalBytes() + " bytes");
                }
                transport.release(c);
                return ack;
            }
            if (p.stoppedByReceiver) {
                // The receiver fenced the push: END gets its reason back as ERROR.
                c.end(push, p.completed);
                throw new TransferException(TransferError.PROTOCOL, peer + " acknowledged a push it had stopped");
            }
            if (p.connectionBroken) {
                c.close();
                throw p.failure;
            }
            c.abort(push, p.failure.reason());
            transport.release(c);
            throw p.failure;
        } catch (TransferException e) {
            if (c.isOpen() && e.getMessage().startsWith("refused by")) {
                transport.release(c); // an ERROR reply leaves the connection clean
            } else if (e != p.failure) {
                c.close();
            }
            throw e;
        } catch (IOException e) {
            c.close();
            if (p.failure != null) {
                throw p.failure;
            }
            throw new TransferException(TransferError.CONNECTION_LOST, "admission connection to " + peer + " lost at the end of the push: "
                    + e.getMessage(), e);
        }
    }

    private void abortQuietly(AdmissionClient c, int push, String why) {
        try {
            c.abort(push, why);
            transport.release(c);
        } catch (IOException | TransferException e) {
            c.close();
        }
    }
}
