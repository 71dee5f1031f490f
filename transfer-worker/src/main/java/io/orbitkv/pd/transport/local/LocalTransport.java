package io.orbitkv.pd.transport.local;

import io.orbitkv.pd.events.TransportEndpoint;
import io.orbitkv.pd.kv.KvPool;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.transport.AbstractTransfer;
import io.orbitkv.pd.transport.KvTransport;
import io.orbitkv.pd.transport.PeerEndpoint;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.ReceiveSession;
import io.orbitkv.pd.transport.Transfer;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import io.orbitkv.pd.transport.TransferResult;
import java.lang.foreign.MemorySegment;
import java.util.Map;
import java.util.Optional;

/**
 * The {@code local} transport: both pools in one process, bytes copied with {@code MemorySegment.copy}. It goes
 * through the receiver's {@link PushGate} exactly like a remote push (token, epochs, fences, bounds), so tests of
 * the admission rules and of the worker run without sockets. Endpoint address: {@code local:<name>}.
 */
public final class LocalTransport implements KvTransport {

    /** Largest copy between two fence checks, so an abort or a fence takes effect within one chunk. */
    private static final long CHUNK = 4L << 20;

    private final LocalFabric fabric;
    private final String address;
    private final PushGate gate;

    /**
     * @param fabric  where receivers of this process are found
     * @param name    unique name in the fabric (e.g. the engine id)
     * @param gate    the local engine's gate, or null for a send-only transport
     */
    public LocalTransport(LocalFabric fabric, String name, PushGate gate) {
        this.fabric = fabric;
        this.address = "local:" + name;
        this.gate = gate;
        if (gate != null) {
            fabric.bind(address, gate);
        }
    }

    @Override
    public String name() {
        return "local";
    }

    @Override
    public Optional<TransportEndpoint> endpoint() {
        return gate == null ? Optional.empty()
                : Optional.of(TransportEndpoint.newBuilder().setTransport("local").setAddress(address).setAttributes(Map.of()).build());
    }

    @Override
    public boolean canReach(PeerEndpoint peer) {
        return "local".equals(peer.transport()) && fabric.lookup(peer.address()).isPresent();
    }

    @Override
    public Transfer push(PushRequest request, KvPool source, TransferPlan plan, PeerEndpoint peer) {
        LocalTransfer t = new LocalTransfer();
        Thread.ofVirtual().name("local-push-" + request.orderId()).start(() -> t.run(request, source, plan, peer));
        return t;
    }

    @Override
    public void forgetPeer(String engineId) {
        // nothing cached: every push looks its receiver up
    }

    @Override
    public void close() {
        if (gate != null) {
            fabric.unbind(address, gate);
        }
    }

    private final class LocalTransfer extends AbstractTransfer {

        void run(PushRequest request, KvPool source, TransferPlan plan, PeerEndpoint peer) {
            long t0 = System.nanoTime();
            try {
                PushGate target = fabric.lookup(peer.address()).orElseThrow(() -> new TransferException(TransferError.PEER_UNREACHABLE,
                        "no local receiver at " + peer.address() + " in this process"));
                long bytes = 0;
                try (ReceiveSession s = target.open("local", request, plan.source())) {
                    for (int i = 0; i < plan.spans(); i++) {
                        int region = plan.spanRegion(i);
                        MemorySegment src = source.hostRegion(region).orElseThrow(() -> new TransferException(TransferError.UNSUPPORTED,
                                "local transport needs a host-accessible source pool, got " + source.location()));
                        for (long done = 0; done < plan.spanLength(i); ) {
                            TransferException stop = stopped();
                            if (stop != null) {
                                throw stop;
                            }
                            long n = Math.min(CHUNK, plan.spanLength(i) - done);
                            s.beginFrame();
                            long written = 0;
                            try {
                                MemorySegment dst = s.target(region, plan.spanDestOffset(i) + done, n);
                                MemorySegment.copy(src, plan.spanSourceOffset(i) + done, dst, 0, n);
                                written = n;
                            } finally {
                                s.endFrame(written);
                            }
                            done += n;
                            bytes += n;
                        }
                    }
                    TransferException twice = s.complete();
                    if (twice != null) {
                        throw twice;
                    }
                }
                succeed(new TransferResult(bytes, System.nanoTime() - t0, "local", 1));
            } catch (RuntimeException e) {
                failUnexpected("local push", e);
            }
        }
    }
}
