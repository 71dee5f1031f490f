package io.orbitkv.pd.transport.local;

import static io.orbitkv.pd.kv.BlockRuns.run;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvTestData;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.transport.PeerEndpoint;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.Pushes;
import io.orbitkv.pd.transport.ReceiveSession;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import io.orbitkv.pd.transport.TransferResult;
import java.util.List;
import java.util.concurrent.CompletionException;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The receiver's admission rules ({@link PushGate}) through the in-process transport: every accepted push lands
 * exactly in its pages, every refused one leaves the destination untouched and says why.
 */
class LocalTransportTest {

    private static final byte SENTINEL = (byte) 0xEE;
    private final KvGeometry g = KvTestData.small(2, 64);
    private final HostKvPool src = HostKvPool.allocate(g);
    private final HostKvPool dst = HostKvPool.allocate(g.withNumBlocks(48));
    private final AtomicLong epoch = new AtomicLong(5);
    private final PushGate gate = new PushGate("decode-0", epoch::get, dst, Pushes.TOKENS, 1024, 1000);
    private final LocalFabric fabric = new LocalFabric();
    private final LocalTransport receiver = new LocalTransport(fabric, "decode-0", gate);
    private final LocalTransport sender = new LocalTransport(fabric, "prefill-0", null);
    private final PeerEndpoint peer = new PeerEndpoint("decode-0", 5, "local", "local:decode-0", null);
    private final List<BlockRun> srcRuns = List.of(run(0, 6), run(20, 4));
    private final List<BlockRun> dstRuns = List.of(run(40, 3), run(1, 7));

    LocalTransportTest() {
        KvTestData.fill(src, 1);
        KvTestData.sentinel(dst, SENTINEL);
    }

    @AfterEach
    void close() {
        receiver.close();
        src.close();
        dst.close();
    }

    private TransferPlan plan() {
        return TransferPlan.build(g, srcRuns, dst.geometry(), dstRuns);
    }

    private TransferResult push(PushRequest r) {
        try {
            return sender.push(r, src, plan(), peer).result().join();
        } catch (CompletionException e) {
            throw (RuntimeException) e.getCause();
        }
    }

    private PushRequest good() {
        return Pushes.signed("req-1", 1, "lease-1", 3, "decode-0", 5, dstRuns);
    }

    @Test
    void anAuthorizedPushLandsExactlyInItsPages() {
        TransferResult r = push(good());
        assertThat(r.bytes()).isEqualTo(10L * 4 * 32 * 1024);
        assertThat(KvTestData.verify(src, dst, plan(), SENTINEL)).isNull();
        assertThat(gate.acceptedPushes()).isEqualTo(1);
        assertThat(gate.bytesWritten()).isEqualTo(r.bytes());
        assertThat(gate.openSessions()).isZero();
    }

    @Test
    void aPushThatLandedWholeIsAnnouncedOnceWithItsRequestAndBytes() {
        List<PushRequest> landed = new java.util.concurrent.CopyOnWriteArrayList<>();
        List<Long> bytes = new java.util.concurrent.CopyOnWriteArrayList<>();
        gate.onLanded((req, n) -> {
            landed.add(req);
            bytes.add(n);
        });
        PushRequest first = good().withFirstToken(42);
        TransferResult r = push(first);
        assertThat(landed).singleElement().satisfies(p -> {
            assertThat(p.orderId()).isEqualTo("req-1/a1");
            assertThat(p.firstToken()).isEqualTo(42);
        });
        assertThat(bytes).containsExactly(r.bytes());
        push(first); // the same attempt again (a duplicate): not announced twice
        assertThat(landed).hasSize(1);
        // a refused push lands nothing
        gate.abortAttempt("req-1/a2", 2, "cancelled");
        assertThatThrownBy(() -> push(Pushes.signed("req-1", 2, "lease-1", 3, "decode-0", 5, dstRuns))).isNotNull();
        assertThat(landed).hasSize(1);
    }

    @Test
    void aForgedTokenIsRefusedAndNothingIsWritten() {
        assertRefused(Pushes.forged(good()), TransferError.UNAUTHORIZED,
                "authorization token of order req-1/a1 (lease lease-1 epoch 3) does not verify over its 2 destination runs");
        assertRefused(Pushes.retargeted(good(), List.of(run(0, 10))), TransferError.UNAUTHORIZED, "does not verify");
        assertThat(gate.refusedPushes(TransferError.UNAUTHORIZED)).isEqualTo(2);
    }

    @Test
    void aStaleInstanceEpochIsRefused() {
        epoch.set(6);
        assertRefused(good(), TransferError.STALE_EPOCH, "was issued for instance epoch 5 of decode-0, which is now at instance epoch 6");
    }

    @Test
    void aReleasedLeaseOrAnOlderLeaseEpochIsRefused() {
        gate.advanceLease("lease-1", 4);
        assertRefused(good(), TransferError.STALE_EPOCH, "lease lease-1 is at epoch 4, order req-1/a1 (lease lease-1 epoch 3) carries epoch 3");
        gate.releaseLease("lease-1", 4);
        PushRequest newer = Pushes.signed("req-1", 1, "lease-1", 4, "decode-0", 5, dstRuns);
        assertRefused(newer, TransferError.STALE_EPOCH, "lease lease-1 epoch 4 was released (through epoch 4)");
        // A newer epoch of the lease (the engine re-leased the pages) is fine.
        assertThat(push(Pushes.signed("req-1", 1, "lease-1", 5, "decode-0", 5, dstRuns)).bytes()).isPositive();
    }

    @Test
    void abortedAttemptsAndRecomputingRequestsAreRefused() {
        gate.abortAttempt("req-1/a1", 1, "request cancelled");
        assertRefused(good(), TransferError.ABORTED, "attempt 1 was aborted: request cancelled");
        gate.fenceRequest("req-2", "decode recomputes");
        assertRefused(Pushes.signed("req-2", 1, "lease-2", 1, "decode-0", 5, dstRuns), TransferError.ABORTED,
                "no longer takes pushes here: decode recomputes");
    }

    @Test
    void runsOutsideThePoolAndForeignLayoutsAndOtherEnginesAreRefused() {
        assertRefused(Pushes.signed("req-1", 1, "lease-1", 3, "decode-0", 5, List.of(run(44, 8), run(0, 2))), TransferError.OUT_OF_RANGE,
                "run 44+8 is outside the pool of 48 blocks");
        assertRefused(Pushes.signed("req-1", 1, "lease-1", 3, "decode-1", 5, dstRuns), TransferError.WRONG_ENGINE,
                "is for engine 'decode-1' but this worker serves 'decode-0'");
        KvGeometry other = KvTestData.small(3, 64);
        try (HostKvPool src3 = HostKvPool.allocate(other)) {
            TransferPlan p = TransferPlan.build(other, srcRuns, other, dstRuns);
            assertThatThrownBy(() -> sender.push(good(), src3, p, peer).result().join())
                    .cause().isInstanceOf(TransferException.class).hasMessageContaining("page shapes differ: num_layers 3 (source) vs 2 (destination)");
        }
        assertThat(KvTestData.untouched(dst, SENTINEL)).as("destination untouched").isNull();
    }

    @Test
    void writesOutsideTheAdmittedPagesAreRefusedBeforeTouchingMemory() {
        try (ReceiveSession s = gate.open("local", good(), g)) {
            s.beginFrame();
            try {
                assertThatThrownBy(() -> s.target(0, 10L * 32 * 1024, 32 * 1024)).isInstanceOf(TransferException.class)
                        .hasMessageContaining("write to pages 10..10 of layer 0 K, which are not among the order's destination pages");
                assertThatThrownBy(() -> s.target(4, 0, 1)).hasMessageContaining("write to region 4, the pool has 4 regions");
                assertThatThrownBy(() -> s.target(1, g.withNumBlocks(48).regionBytes() - 10, 20))
                        .hasMessageContaining("outside the registered region layer 0 V");
                // straddling the end of an admitted run
                assertThatThrownBy(() -> s.target(0, 42L * 32 * 1024, 2 * 32 * 1024)).hasMessageContaining("pages 42..43");
                assertThat(s.target(0, 40L * 32 * 1024, 3 * 32 * 1024).byteSize()).isEqualTo(3 * 32 * 1024);
            } finally {
                s.endFrame(0);
            }
        }
        assertThat(gate.openSessions()).isZero();
    }

    @Test
    void aFenceStopsAnAdmittedPushAtItsNextFrame() {
        try (ReceiveSession s = gate.open("local", good(), g)) {
            s.beginFrame();
            s.endFrame(100);
            gate.releaseLease("lease-1", 3);
            assertThatThrownBy(s::beginFrame).isInstanceOf(TransferException.class)
                    .hasMessage("lease lease-1 epoch 3 was released during the push");
            assertThat(s.stoppedBy().kind()).isEqualTo(TransferError.STALE_EPOCH);
        }
    }

    private void assertRefused(PushRequest r, TransferError kind, String message) {
        assertThatThrownBy(() -> push(r)).isInstanceOf(TransferException.class).hasMessageContaining(message)
                .satisfies(e -> assertThat(((TransferException) e).kind()).isEqualTo(kind));
        assertThat(KvTestData.untouched(dst, SENTINEL)).as("destination untouched").isNull();
    }
}
