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
import io.orbitkv.pd.transport.SourceReadiness;
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
 *
 * <p>Layer by layer (a {@link SourceReadiness}: the prefill still computes), the push goes in two parts, each admitted and
 * ended on its own, as tcp's stripes: every layer but the last, each piece written once the engine reports it computed;
 * then, once the prefill completed, the last layer with the prefill's first token, so the landing it completes (the
 * receiver counts both parts' bytes) carries the token.
 */
final class MooncakeTransfer extends AbstractTransfer {

    private static final Logger log = LoggerFactory.getLogger(MooncakeTransport.class);

    private final MooncakeTransport transport;
    private final PushRequest request;
    private final KvPool source;
    private final TransferPlan plan;
    private final PeerEndpoint peer;
    private final SourceReadiness ready;

    MooncakeTransfer(MooncakeTransport transport, PushRequest request, KvPool source, TransferPlan plan, PeerEndpoint peer, SourceReadiness ready) {
        this.transport = transport;
        this.request = request;
        this.source = source;
        this.plan = plan;
        this.peer = peer;
        this.ready = ready;
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
        try {
            transport.ensureRegistered(source);
            long bytes;
            if (ready == null) {
                bytes = part(request, 0, plan.spans(), null);
            } else {
                int tail = 0; // the first span of the last layer's regions (spans are region-major, layer 0 first)
                int tailRegion = plan.source().region(plan.source().numLayers() - 1, 0);
                while (tail < plan.spans() && plan.spanRegion(tail) < tailRegion) {
                    tail++;
                }
                bytes = tail == 0 ? 0 : part(request, 0, tail, ready);
                awaitPrefill();
                bytes += part(request.withFirstToken(ready.firstToken()).forPeer(peer), tail, plan.spans(), null);
            }
            succeed(new TransferResult(bytes, System.nanoTime() - t0, MooncakeTransport.NAME, 1));
        } catch (TransferException e) {
            fail(e);
        } catch (IOException e) {
            fail(new TransferException(e instanceof FrameException ? TransferError.PROTOCOL : TransferError.CONNECTION_LOST, "admission"
                    + " connection to " + peer + ": " + e.getMessage(), e));
        } catch (MooncakeException e) {
            fail(new TransferException(e.kind(), e.getMessage(), e));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            fail(new TransferException(TransferError.ABORTED, "aborted: interrupted while the prefill computed"));
        } catch (RuntimeException e) {
            log.atError().setCause(e).addKeyValue("orderId", request.orderId()).log("mooncake push failed");
            failUnexpected("mooncake push", e);
        } finally {
            transport.finished(this);
        }
    }

    /** Waits for the prefill's end; throws when the push must stop first (cancelled, past its deadline, the prefill failed). */
    private void awaitPrefill() throws InterruptedException {
        while (true) {
            TransferException stop = stopCause();
            if (stop == null && ready.failure() != null) {
                stop = new TransferException(TransferError.ABORTED, "aborted: " + ready.failure());
            }
            if (stop != null) {
                throw stop;
            }
            if (ready.awaitComplete(20)) {
                return;
            }
        }
    }

    /**
     * Spans {@code [fromSpan, toSpan)} as one admitted part: BEGIN with {@code r} and the part's bytes, the writes (each once
     * {@code ready} says it is computed; null: all at once), END. Returns the bytes acknowledged.
     */
    private long part(PushRequest r, int fromSpan, int toSpan, SourceReadiness ready) throws IOException {
        int push = transport.nextPushId();
        long bytes = 0;
        for (int i = fromSpan; i < toSpan; i++) {
            bytes += plan.spanLength(i);
        }
        AdmissionClient c = null;
        try {
            int segment;
            for (int tries = 0; ; tries++) {
                PeerConnectionPool.Lease<AdmissionClient> l = transport.acquire(peer);
                c = l.connection();
                checkPeer(c.hello());
                segment = transport.segment(peer, c.hello().segment());
                try {
                    c.begin(push, r, plan.source(), bytes);
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
            return write(admitted, push, segment, fromSpan, toSpan, bytes, ready);
        } catch (TransferException e) {
            if (c != null && e.getMessage().startsWith("refused by")) {
                transport.release(c); // refused at BEGIN: the connection is clean
                c = null;
            }
            throw e;
        } finally {
            if (c != null) {
                c.close();
            }
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

    /** Issues the part's writes, waits for all of them, ends the part; releases or closes {@code c}. Returns the bytes acknowledged. */
    private long write(AdmissionClient c, int push, int segment, int fromSpan, int toSpan, long bytes, SourceReadiness ready) {
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
            p = new WritePump(this, arena, c, push, new WriteBatcher(plan, fromSpan, toSpan, src, dst, len, segment, config.maxRequestBytes()), ready);
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
                if (ack != bytes) {
                    throw new TransferException(TransferError.PROTOCOL, peer + " acknowledged " + ack + " of " + bytes + " bytes");
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
