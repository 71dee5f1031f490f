package io.orbitkv.pd.gpu;

import static io.orbitkv.pd.kv.BlockRuns.run;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;
import static org.awaitility.Awaitility.await;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.events.TransportEndpoint;
import io.orbitkv.pd.kv.BlockRuns;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvTestData;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.schemas.OrderTokens;
import io.orbitkv.pd.transport.LayersComputed;
import io.orbitkv.pd.transport.PeerEndpoint;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.Transfer;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import io.orbitkv.pd.transport.TransferResult;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.SplittableRandom;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The cuda transport's planning, admission and fencing, on the CPU: pools are host memory that calls itself
 * {@code cuda:0}, and the copy engine does on the CPU what the kernel does (decoding the very bytes the kernel would
 * get). What a GPU adds — the kernel, IPC, the event — is checked by gpu/run-gpu-suite.sh on the GPU machine.
 */
class CudaTransportTest {

    private static final byte SENTINEL = (byte) 0xA5;
    private static final OrderTokens TOKENS = new OrderTokens("cuda-test-auth-key-0123456789".getBytes(StandardCharsets.UTF_8));
    private static final String NODE = "node-a";

    private final KvGeometry g = new KvGeometry(3, KvSplit.SEPARATE, 4, 2, 64, Dtype.BF16, 1024, 64);
    private final HostDevicePool src = new HostDevicePool(g);
    private final HostDevicePool dst = new HostDevicePool(g.withNumBlocks(48));
    private final AtomicLong instanceEpoch = new AtomicLong(7);
    private final PushGate gate = new PushGate("decode-0", instanceEpoch::get, dst, TOKENS, 1024, 1000);
    private final CudaFabric fabric = new CudaFabric();
    private final CudaConfig config = CudaConfig.parse(Map.of("node-id", NODE, "chunk-bytes", "2048"));
    private final HostCopyEngine receiverEngine = new HostCopyEngine(2048);
    private final HostCopyEngine engine = new HostCopyEngine(2048);
    private final List<CudaTransport> transports = new ArrayList<>();
    private final PeerEndpoint peer = new PeerEndpoint("decode-0", 7, "cuda", NODE, null);

    CudaTransportTest() {
        KvTestData.fill(src.host(), 3);
        KvTestData.sentinel(dst.host(), SENTINEL);
    }

    @AfterEach
    void close() {
        transports.forEach(CudaTransport::close);
        src.close();
        dst.close();
    }

    private CudaTransport transport(PushGate g, HostCopyEngine e) {
        CudaTransport t = CudaTransport.start(config, fabric, "worker-1", g, () -> e);
        transports.add(t);
        return t;
    }

    private CudaTransport sender() {
        transport(gate, receiverEngine);
        return transport(null, engine);
    }

    private static PushRequest signed(String request, int attempt, String lease, long leaseEpoch, long destEpoch, List<BlockRun> dest) {
        String order = request + "/a" + attempt;
        return new PushRequest(request, order, attempt, lease, leaseEpoch, "decode-0", destEpoch, dest, TOKENS.sign(order, leaseEpoch, "decode-0", destEpoch, dest), 0,
                "worker-1");
    }

    private static TransferResult join(Transfer t) {
        try {
            return t.result().join();
        } catch (CompletionException e) {
            throw (RuntimeException) e.getCause();
        }
    }

    private static void assertRefused(Transfer t, TransferError kind, String text) {
        assertThatThrownBy(() -> join(t)).isInstanceOfSatisfying(TransferException.class, e -> assertThat(e.kind()).isEqualTo(kind))
                .hasMessageContaining(text);
    }

    private final List<BlockRun> srcRuns = List.of(run(0, 6), run(20, 4), run(50, 1));
    private final List<BlockRun> dstRuns = List.of(run(40, 3), run(1, 7), run(30, 1));

    private TransferPlan plan() {
        return TransferPlan.build(g, srcRuns, dst.geometry(), dstRuns);
    }

    @Test
    void anAuthorizedPushLandsExactlyInItsPagesWithOneLaunch() {
        CudaTransport s = sender();
        TransferResult r = join(s.push(signed("req-1", 1, "lease-1", 3, 7, dstRuns), src, plan(), peer));
        assertThat(r.bytes()).isEqualTo(11L * 6 * 1024);
        assertThat(r.transport()).isEqualTo("cuda");
        assertThat(KvTestData.verify(src.host(), dst.host(), plan(), SENTINEL)).isNull();
        assertThat(engine.launches.get()).isEqualTo(1);
        assertThat(receiverEngine.launches.get()).isZero();
        assertThat(gate.acceptedPushes()).isEqualTo(1);
        assertThat(gate.bytesWritten()).isEqualTo(r.bytes());
        // 2 KiB chunks: scattered single pages are one entry each, the 3 × 2-page stretches two each... every byte once
        assertThat(engine.lastLaunch.bytes()).isEqualTo(r.bytes());
    }

    @Test
    void randomPageTablesLandByteForByte() {
        CudaTransport s = sender();
        SplittableRandom rnd = new SplittableRandom(42);
        for (int round = 0; round < 25; round++) {
            KvTestData.sentinel(dst.host(), SENTINEL);
            int n = 1 + rnd.nextInt(40);
            List<BlockRun> sr = BlockRuns.fromBlocks(randomBlocks(rnd, 64, n));
            List<BlockRun> dr = BlockRuns.fromBlocks(randomBlocks(rnd, 48, n));
            TransferPlan p = TransferPlan.build(g, sr, dst.geometry(), dr);
            TransferResult r = join(s.push(signed("req-r" + round, 1, "lease-r" + round, 1, 7, dr), src, p, peer));
            assertThat(r.bytes()).isEqualTo(p.totalBytes());
            assertThat(KvTestData.verify(src.host(), dst.host(), p, SENTINEL)).as("round %d", round).isNull();
        }
        assertThat(engine.launches.get()).isEqualTo(25);
    }

    /** n distinct blocks of [0, pool), in random order but with some consecutive stretches (as allocators leave them). */
    private static int[] randomBlocks(SplittableRandom rnd, int pool, int n) {
        List<Integer> free = new ArrayList<>();
        for (int b = 0; b < pool; b++) {
            free.add(b);
        }
        int[] out = new int[n];
        int k = 0;
        while (k < n) {
            int start = free.get(rnd.nextInt(free.size()));
            int len = 1 + rnd.nextInt(Math.min(4, n - k));
            for (int j = 0; j < len && k < n && free.contains(start + j); j++) {
                out[k++] = start + j;
                free.remove(Integer.valueOf(start + j));
            }
        }
        return out;
    }

    @Test
    void aStaleLeaseEpochIsRefusedBeforeAnythingIsLaunched() {
        CudaTransport s = sender();
        gate.releaseLease("lease-1", 3);
        assertRefused(s.push(signed("req-1", 1, "lease-1", 3, 7, dstRuns), src, plan(), peer), TransferError.STALE_EPOCH, "was released");
        assertThat(engine.launches.get()).isZero();
        assertThat(KvTestData.untouched(dst.host(), SENTINEL)).isNull();
    }

    @Test
    void anOlderEpochOfALeaseIsRefusedOnceANewerOneWasSeen() {
        CudaTransport s = sender();
        gate.advanceLease("lease-1", 5);
        assertRefused(s.push(signed("req-1", 1, "lease-1", 4, 7, dstRuns), src, plan(), peer), TransferError.STALE_EPOCH, "epoch 4");
        assertThat(engine.launches.get()).isZero();
    }

    @Test
    void aPushForAnOlderInstanceOfTheEngineIsRefused() {
        CudaTransport s = sender();
        instanceEpoch.set(8);
        assertRefused(s.push(signed("req-1", 1, "lease-1", 3, 7, dstRuns), src, plan(), peer), TransferError.STALE_EPOCH, "instance epoch");
        assertThat(engine.launches.get()).isZero();
    }

    @Test
    void destinationRunsOutsideThePoolAreRefusedBeforeLaunch() {
        CudaTransport s = sender();
        List<BlockRun> outside = List.of(run(46, 4)); // the pool has 48 blocks
        TransferPlan p = TransferPlan.build(g, List.of(run(0, 4)), g, outside);
        assertRefused(s.push(signed("req-1", 1, "lease-1", 3, 7, outside), src, p, peer), TransferError.OUT_OF_RANGE, "outside the pool of 48");
        assertThat(engine.launches.get()).isZero();
        assertThat(KvTestData.untouched(dst.host(), SENTINEL)).isNull();
    }

    @Test
    void aPlanThatWritesOtherPagesThanTheSignedOnesIsRefused() {
        CudaTransport s = sender();
        // the token covers dstRuns, the plan writes elsewhere
        TransferPlan other = TransferPlan.build(g, srcRuns, dst.geometry(), List.of(run(10, 11)));
        assertRefused(s.push(signed("req-1", 1, "lease-1", 3, 7, dstRuns), src, other, peer), TransferError.OUT_OF_RANGE,
                "not among the order's destination pages");
        assertThat(engine.launches.get()).isZero();
        assertThat(KvTestData.untouched(dst.host(), SENTINEL)).isNull();
    }

    @Test
    void aForgedTokenIsRefused() {
        CudaTransport s = sender();
        PushRequest good = signed("req-1", 1, "lease-1", 3, 7, dstRuns);
        byte[] forged = new OrderTokens("some-other-key-0123456789".getBytes(StandardCharsets.UTF_8)).sign(good.orderId(), 3, "decode-0", 7, dstRuns);
        PushRequest bad = new PushRequest("req-1", good.orderId(), 1, "lease-1", 3, "decode-0", 7, dstRuns, forged, 0, "x");
        assertRefused(s.push(bad, src, plan(), peer), TransferError.UNAUTHORIZED, "does not verify");
        assertThat(engine.launches.get()).isZero();
    }

    @Test
    void anAbortedAttemptIsRefused() {
        CudaTransport s = sender();
        gate.abortAttempt("req-1/a1", 1, "decider retried");
        assertRefused(s.push(signed("req-1", 1, "lease-1", 3, 7, dstRuns), src, plan(), peer), TransferError.ABORTED, "decider retried");
        assertThat(engine.launches.get()).isZero();
    }

    @Test
    void aFenceWaitsForTheCopyInFlightAndCompletionWaitsForTheCopysEvent() throws Exception {
        CountDownLatch release = new CountDownLatch(1);
        HostCopyEngine slow = new HostCopyEngine(2048, release);
        transport(gate, receiverEngine);
        CudaTransport s = transport(null, slow);
        Transfer t = s.push(signed("req-1", 1, "lease-1", 3, 7, dstRuns), src, plan(), peer);
        assertThat(slow.entered.await(10, java.util.concurrent.TimeUnit.SECONDS)).isTrue();
        Thread releaser = Thread.ofPlatform().start(() -> gate.releaseLease("lease-1", 3));
        // the fence is waiting for the frame (the copy's event), and the push is not reported complete
        await().atMost(Duration.ofSeconds(10)).until(() -> releaser.getState() == Thread.State.TIMED_WAITING);
        assertThat(t.result()).isNotDone();
        assertThat(releaser.isAlive()).isTrue();
        release.countDown();
        releaser.join(10_000);
        assertThat(releaser.isAlive()).isFalse();
        assertThat(join(t).bytes()).isEqualTo(plan().totalBytes());
        // from now on the released lease takes nothing
        assertRefused(s.push(signed("req-1", 2, "lease-1", 3, 7, dstRuns), src, plan(), peer), TransferError.STALE_EPOCH, "was released");
        assertThat(slow.launches.get()).isEqualTo(1);
    }

    @Test
    void aPushCancelledBeforeItsLaunchNeverLaunches() throws Exception {
        CountDownLatch release = new CountDownLatch(1);
        HostCopyEngine slow = new HostCopyEngine(2048, release);
        transport(gate, receiverEngine);
        CudaTransport s = transport(null, slow);
        Transfer first = s.push(signed("req-1", 1, "lease-1", 3, 7, dstRuns), src, plan(), peer);
        assertThat(slow.entered.await(10, java.util.concurrent.TimeUnit.SECONDS)).isTrue();
        List<BlockRun> d2 = List.of(run(20, 11));
        Transfer second = s.push(signed("req-2", 1, "lease-2", 1, 7, d2), src, TransferPlan.build(g, srcRuns, dst.geometry(), d2), peer);
        second.cancel("client went away");
        release.countDown();
        assertThat(join(first).bytes()).isEqualTo(plan().totalBytes());
        assertRefused(second, TransferError.ABORTED, "client went away");
        assertThat(slow.launches.get()).isEqualTo(1);
    }

    /** One layer's pages of the plan: K and V (two regions) of its 11 pages. */
    private static final long LAYER_BYTES = 2L * 11 * 1024;

    @Test
    void aPushLayerByLayerCopiesEachLayerOnceComputedAndTheLastWithTheFirstToken() {
        CudaTransport s = sender();
        List<PushRequest> landed = new java.util.concurrent.CopyOnWriteArrayList<>();
        gate.onLanded((r, bytes) -> landed.add(r));
        LayersComputed ready = new LayersComputed(g);
        Transfer t = s.push(signed("req-1", 1, "lease-1", 3, 7, dstRuns), src, plan(), peer, ready);
        assertThat(s.streams()).isTrue();
        ready.layers(1);
        await().atMost(Duration.ofSeconds(10)).until(() -> engine.launches.get() == 1);
        assertThat(engine.lastLaunch.bytes()).isEqualTo(LAYER_BYTES);
        ready.layers(2);
        await().atMost(Duration.ofSeconds(10)).until(() -> engine.launches.get() == 2);
        assertThat(engine.lastLaunch.bytes()).isEqualTo(LAYER_BYTES);
        // every layer but the last in place: nothing has landed (the decode engine must not take a partial KV)
        assertThat(t.result()).isNotDone();
        assertThat(landed).isEmpty();
        ready.complete(17);
        TransferResult r = join(t);
        assertThat(r.bytes()).isEqualTo(plan().totalBytes());
        assertThat(r.connections()).isEqualTo(3);
        assertThat(engine.launches.get()).isEqualTo(3);
        assertThat(KvTestData.verify(src.host(), dst.host(), plan(), SENTINEL)).isNull();
        assertThat(landed).hasSize(1);
        assertThat(landed.get(0).firstToken()).isEqualTo(17);
        assertThat(r.marks().get(TransferResult.ACKED)).isPresent();
    }

    @Test
    void aPrefillCompleteBeforeThePushStartsIsOneCopy() {
        CudaTransport s = sender();
        LayersComputed ready = new LayersComputed(g);
        ready.complete(5);
        TransferResult r = join(s.push(signed("req-1", 1, "lease-1", 3, 7, dstRuns), src, plan(), peer, ready));
        assertThat(r.bytes()).isEqualTo(plan().totalBytes());
        assertThat(engine.launches.get()).isEqualTo(1);
        assertThat(KvTestData.verify(src.host(), dst.host(), plan(), SENTINEL)).isNull();
    }

    @Test
    void aPrefillThatFailsMidWayStopsThePushAndNothingLands() {
        CudaTransport s = sender();
        List<PushRequest> landed = new java.util.concurrent.CopyOnWriteArrayList<>();
        gate.onLanded((r, bytes) -> landed.add(r));
        LayersComputed ready = new LayersComputed(g);
        Transfer t = s.push(signed("req-1", 1, "lease-1", 3, 7, dstRuns), src, plan(), peer, ready);
        ready.layers(1);
        await().atMost(Duration.ofSeconds(10)).until(() -> engine.launches.get() == 1);
        ready.fail("the engine's prefill failed mid-way: out of memory");
        assertRefused(t, TransferError.ABORTED, "out of memory");
        assertThat(engine.launches.get()).isEqualTo(1);
        assertThat(landed).isEmpty();
        assertThat(gate.openSessions()).isZero();
    }

    @Test
    void aPushWaitingForItsPrefillIsCancelledAtOnceAndLeavesTheCopyThreadToOthers() {
        CudaTransport s = sender();
        LayersComputed ready = new LayersComputed(g);
        Transfer waiting = s.push(signed("req-1", 1, "lease-1", 3, 7, dstRuns), src, plan(), peer, ready);
        // another push by the same transport runs meanwhile: the copy thread is not held by the one waiting
        List<BlockRun> d2 = List.of(run(20, 11));
        TransferPlan p2 = TransferPlan.build(g, srcRuns, dst.geometry(), d2);
        assertThat(join(s.push(signed("req-2", 1, "lease-2", 1, 7, d2), src, p2, peer)).bytes()).isEqualTo(p2.totalBytes());
        waiting.cancel("client went away");
        assertRefused(waiting, TransferError.ABORTED, "client went away");
        assertThat(engine.launches.get()).isEqualTo(1);
    }

    @Test
    void reachesOnlyEnginesServedInThisProcessOnThisNode() {
        CudaTransport receiver = transport(gate, receiverEngine);
        CudaTransport s = transport(null, engine);
        TransportEndpoint e = receiver.endpoint().orElseThrow();
        assertThat(e.getTransport()).isEqualTo("cuda");
        assertThat(e.getAddress()).isEqualTo(NODE);
        assertThat(e.getAttributes()).containsEntry("device", "cuda:0").containsEntry("copy", "host copy (test)");
        assertThat(s.endpoint()).isEmpty();
        assertThat(s.canReach(peer)).isTrue();
        assertThat(s.canReach(new PeerEndpoint("decode-0", 7, "cuda", "node-b", null))).isFalse();
        assertThat(s.canReach(new PeerEndpoint("decode-9", 1, "cuda", NODE, null))).isFalse();
        assertThat(s.canReach(new PeerEndpoint("decode-0", 7, "tcp", "h:1", null))).isFalse();
        PushRequest r = signed("req-1", 1, "lease-1", 3, 7, dstRuns);
        assertRefused(s.push(r, src, plan(), new PeerEndpoint("decode-0", 7, "cuda", "node-b", null)), TransferError.NO_TRANSPORT, "node-a only");
        assertRefused(s.push(r, src, plan(), new PeerEndpoint("decode-9", 7, "cuda", NODE, null)), TransferError.PEER_UNREACHABLE,
                "not served by this worker process");
        try (HostKvPool host = HostKvPool.allocate(g)) {
            assertRefused(s.push(r, host, plan(), peer), TransferError.UNSUPPORTED, "device source pool");
        }
        receiver.close();
        assertThat(s.canReach(peer)).isFalse();
        assertThat(receiverEngine.closes.get()).isEqualTo(1);
    }

    @Test
    void servesOnlyDevicePoolsAndRefusesPushesOnceClosed() {
        try (HostKvPool host = HostKvPool.allocate(g)) {
            PushGate hostGate = new PushGate("decode-h", () -> 1, host, TOKENS, 16, 16);
            assertThatThrownBy(() -> CudaTransport.start(config, fabric, "w", hostGate, () -> engine))
                    .isInstanceOf(IllegalArgumentException.class).hasMessageContaining("pool is host");
        }
        CudaTransport s = sender();
        s.close();
        s.close();
        assertThat(engine.closes.get()).isEqualTo(1);
        assertRefused(s.push(signed("req-1", 1, "lease-1", 3, 7, dstRuns), src, plan(), peer), TransferError.INTERNAL, "closed");
        assertThat(engine.launches.get()).isZero();
    }
}
