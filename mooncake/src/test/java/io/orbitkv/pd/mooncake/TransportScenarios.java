package io.orbitkv.pd.mooncake;

import static io.orbitkv.pd.kv.BlockRuns.run;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.kv.BlockRuns;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvTestData;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.mooncake.te.TransferEngine;
import io.orbitkv.pd.transport.LayersComputed;
import io.orbitkv.pd.transport.PeerEndpoint;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.Pushes;
import io.orbitkv.pd.transport.Transfer;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import io.orbitkv.pd.transport.TransferResult;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.ServerSocket;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.CompletionException;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The mooncake transport's behaviour, whatever engine moves the bytes: every byte of scattered pages intact, every
 * refusal named before a single write, a fence or a cancel in the middle of a push stopping it with nothing landing
 * after the fence returns, a receiver dying mid-push and the retry to its successor, unreachable and incompatible
 * peers. Run on the in-process engine ({@link MooncakeAdmissionIT}, always) and on the real library over Mooncake's
 * TCP transport ({@link MooncakeTransportIT}, when {@code ORBITKV_MOONCAKE_LIB} is set).
 */
abstract class TransportScenarios {

    static final byte SENTINEL = (byte) 0xEE;
    /** 8 layers × K,V of 32 KiB pages, 160 blocks: 16 regions, 80 MiB per pool. */
    final KvGeometry g = KvTestData.small(8, 160);
    final AtomicLong epoch = new AtomicLong(5);
    final List<AutoCloseable> closeables = new ArrayList<>();
    HostKvPool src;
    HostKvPool dst;
    PushGate gate;
    MooncakeTransport receiver;
    MooncakeTransport sender;
    PeerEndpoint peer;

    /** A fresh engine of the kind under test. */
    abstract TransferEngine newEngine();

    /** Makes the sender's writes slow enough to act in the middle of a push (a no-op where the push is slow anyway). */
    abstract void slowWrites(MooncakeTransport sender);

    MooncakeConfig config() {
        Map<String, String> s = new HashMap<>();
        s.put("protocol", "tcp");
        s.put("batch-requests", "32");
        s.put("max-inflight-requests", "128");
        s.put("io-timeout", "5s");
        s.put("drain-timeout", "10s");
        return MooncakeConfig.parse(s);
    }

    @BeforeEach
    void start() {
        src = HostKvPool.allocate(g);
        dst = HostKvPool.allocate(g);
        KvTestData.fill(src, 3);
        KvTestData.sentinel(dst, SENTINEL);
        gate = new PushGate("decode-0", epoch::get, dst, Pushes.TOKENS, 65_536, 1000);
        receiver = MooncakeTransport.start(config(), newEngine(), "rx", gate);
        sender = MooncakeTransport.start(config(), newEngine(), "tx", null);
        peer = PeerEndpoint.of("decode-0", 5, receiver.endpoint().orElseThrow());
    }

    @AfterEach
    void stop() throws Exception {
        for (int i = closeables.size() - 1; i >= 0; i--) {
            closeables.get(i).close();
        }
        sender.close();
        receiver.close();
        src.close();
        dst.close();
    }

    static List<BlockRun> everyOther(int blocks) {
        List<BlockRun> out = new ArrayList<>();
        for (int i = 0; i < blocks; i++) {
            out.add(run(1 + 2 * i, 1));
        }
        return out;
    }

    static List<BlockRun> shuffled(int blocks, long seed) {
        List<Integer> l = new ArrayList<>();
        for (int i = 0; i < blocks; i++) {
            l.add(i);
        }
        Collections.shuffle(l, new Random(seed));
        return BlockRuns.fromBlocks(l.stream().mapToInt(Integer::intValue).toArray());
    }

    TransferPlan plan(List<BlockRun> from, List<BlockRun> to) {
        return TransferPlan.build(g, from, g, to);
    }

    Transfer start(PushRequest r, List<BlockRun> from) {
        return sender.push(r, src, plan(from, r.destRuns()), peer);
    }

    TransferResult push(PushRequest r, List<BlockRun> from) {
        return start(r, from).result().join();
    }

    static TransferException failure(Transfer t) {
        try {
            t.result().join();
        } catch (CompletionException e) {
            assertThat(e.getCause()).isInstanceOf(TransferException.class);
            return (TransferException) e.getCause();
        }
        throw new AssertionError("the push succeeded");
    }

    /** Pages of the destination pool that no longer hold only the sentinel (first byte checked). */
    long pagesWritten() {
        long n = 0;
        for (int r = 0; r < g.regionCount(); r++) {
            for (int b = 0; b < g.numBlocks(); b++) {
                if (dst.page(r, b).get(java.lang.foreign.ValueLayout.JAVA_BYTE, 0) != SENTINEL) {
                    n++;
                }
            }
        }
        return n;
    }

    @Test
    void movesScatteredPagesIntactAndReusesTheAdmissionConnection() {
        List<BlockRun> to = everyOther(40);
        PushRequest r = Pushes.signed("req-1", 1, "lease-1", 1, "decode-0", 5, to);
        TransferResult res = push(r, List.of(run(0, 40)));
        TransferPlan p = plan(List.of(run(0, 40)), to);
        assertThat(p.spans()).isEqualTo(40 * 16);
        assertThat(res.bytes()).isEqualTo(p.totalBytes()).isEqualTo(20L << 20);
        assertThat(res.transport()).isEqualTo("mooncake");
        assertThat(KvTestData.verify(src, dst, p, SENTINEL)).as("every byte, and nothing else").isNull();

        // Contiguous on both sides: one span per region, split into 1 MiB requests; same connection, same segment.
        List<BlockRun> more = List.of(run(100, 40));
        assertThat(push(Pushes.signed("req-2", 1, "lease-2", 1, "decode-0", 5, more), List.of(run(40, 40))).bytes()).isEqualTo(20L << 20);
        List<BlockRun> all = new ArrayList<>(to);
        all.addAll(more);
        assertThat(KvTestData.verify(src, dst, plan(List.of(run(0, 80)), all), SENTINEL)).isNull();
        await().atMost(Duration.ofSeconds(5)).until(() -> gate.openSessions() == 0);
        assertThat(gate.acceptedPushes()).isEqualTo(2);
        assertThat(gate.bytesWritten()).isEqualTo(40L << 20);
    }

    @Test
    void refusalsNameTheirReasonBeforeAnyWriteAndTheReceiverKeepsServing() {
        List<BlockRun> to = List.of(run(10, 8));
        List<BlockRun> from = List.of(run(0, 8));
        PushRequest good = Pushes.signed("req-r", 1, "lease-r", 1, "decode-0", 5, to);

        TransferException forged = failure(start(Pushes.forged(good), from));
        assertThat(forged.kind()).isEqualTo(TransferError.UNAUTHORIZED);
        assertThat(forged.reason()).startsWith("UNAUTHORIZED: refused by decode-0@5").contains("does not verify");
        assertThat(forged.retriable()).isFalse();

        TransferException retargeted = failure(start(Pushes.retargeted(good, List.of(run(20, 8))), from));
        assertThat(retargeted.kind()).isEqualTo(TransferError.UNAUTHORIZED);

        TransferException stale = failure(start(Pushes.signed("req-s", 1, "lease-s", 1, "decode-0", 4, to), from));
        assertThat(stale.kind()).isEqualTo(TransferError.STALE_EPOCH);
        assertThat(stale.getMessage()).contains("was issued for instance epoch 4 of decode-0, which is now at instance epoch 5");

        gate.releaseLease("lease-late", 3);
        TransferException released = failure(start(Pushes.signed("req-l", 1, "lease-late", 3, "decode-0", 5, to), from));
        assertThat(released.kind()).isEqualTo(TransferError.STALE_EPOCH);
        assertThat(released.getMessage()).contains("lease lease-late epoch 3 was released (through epoch 3)");

        // A sender that believes the pool is bigger than it is: the gate refuses the runs, the token notwithstanding.
        List<BlockRun> outside = List.of(run(150, 20));
        PushRequest oob = Pushes.signed("req-o", 1, "lease-o", 1, "decode-0", 5, outside);
        KvGeometry believed = g.withNumBlocks(400);
        TransferException out = failure(sender.push(oob, src, TransferPlan.build(g, List.of(run(0, 20)), believed, outside), peer));
        assertThat(out.kind()).isEqualTo(TransferError.OUT_OF_RANGE);
        assertThat(out.getMessage()).contains("outside the pool of 160 blocks");

        assertThat(KvTestData.untouched(dst, SENTINEL)).as("no byte of a refused push lands").isNull();
        assertThat(gate.openSessions()).isZero();
        push(good, from);
        assertThat(KvTestData.verify(src, dst, plan(from, to), SENTINEL)).isNull();
    }

    /** Whether every page of layer {@code layer} (K and V) at destination runs {@code to} holds bytes (not the sentinel). */
    boolean layerArrived(int layer, List<BlockRun> to) {
        for (int part = 0; part < g.regionCount() / g.numLayers(); part++) {
            for (BlockRun r : to) {
                for (int b = r.getStart(); b < r.getStart() + r.getCount(); b++) {
                    if (dst.page(g.region(layer, part), b).get(java.lang.foreign.ValueLayout.JAVA_BYTE, 0) == SENTINEL) {
                        return false;
                    }
                }
            }
        }
        return true;
    }

    @Test
    void layerByLayerEachLayerGoesAsComputedAndTheLandingComesWithTheLastAndItsFirstToken() {
        List<String> landed = new java.util.concurrent.CopyOnWriteArrayList<>();
        gate.onLanded((r, bytes) -> landed.add(r.orderId() + " first=" + r.firstToken() + " bytes=" + bytes));
        List<BlockRun> to = everyOther(24);
        List<BlockRun> from = List.of(run(0, 24));
        LayersComputed ready = new LayersComputed(g);
        Transfer t = sender.push(Pushes.signed("req-lw", 1, "lease-lw", 1, "decode-0", 5, to), src, plan(from, to), peer, ready);
        ready.layers(2);
        await("layers 0 and 1").atMost(Duration.ofSeconds(30)).until(() -> layerArrived(1, to));
        assertThat(layerArrived(2, to)).as("layer 2 not computed: not written").isFalse();
        ready.layers(g.numLayers()); // every layer computed, the prefill not yet done: the last layer waits for its first token
        await("layers up to the last").atMost(Duration.ofSeconds(30)).until(() -> layerArrived(g.numLayers() - 2, to));
        assertThat(layerArrived(g.numLayers() - 1, to)).isFalse();
        assertThat(landed).isEmpty();
        ready.complete(4711);
        TransferResult res = t.result().join();
        TransferPlan p = plan(from, to);
        assertThat(res.bytes()).isEqualTo(p.totalBytes());
        assertThat(KvTestData.verify(src, dst, p, SENTINEL)).as("every byte, and nothing else").isNull();
        await().atMost(Duration.ofSeconds(5)).until(() -> !landed.isEmpty());
        assertThat(landed).containsExactly("req-lw/a1 first=4711 bytes=" + p.totalBytes());
        assertThat(gate.acceptedPushes()).as("two parts: every layer but the last, then the last").isEqualTo(2);
    }

    @Test
    void layerByLayerAPrefillFailingMidWayStopsThePushAndNothingLands() {
        List<String> landed = new java.util.concurrent.CopyOnWriteArrayList<>();
        gate.onLanded((r, bytes) -> landed.add(r.orderId()));
        List<BlockRun> to = List.of(run(40, 24));
        LayersComputed ready = new LayersComputed(g);
        Transfer t = sender.push(Pushes.signed("req-lf", 1, "lease-lf", 1, "decode-0", 5, to), src, plan(List.of(run(0, 24)), to), peer, ready);
        ready.layers(3);
        await().atMost(Duration.ofSeconds(30)).until(() -> layerArrived(2, to));
        ready.fail("the engine's prefill failed mid-way: out of memory");
        TransferException e = failure(t);
        assertThat(e.kind()).isEqualTo(TransferError.ABORTED);
        assertThat(e.getMessage()).contains("prefill failed mid-way");
        await().atMost(Duration.ofSeconds(5)).until(() -> gate.openSessions() == 0);
        assertThat(layerArrived(3, to)).isFalse();
        assertThat(landed).isEmpty();
        // the admission connection went back clean
        push(Pushes.signed("req-lf2", 1, "lease-lf2", 1, "decode-0", 5, List.of(run(100, 1))), List.of(run(0, 1)));
    }

    @Test
    void layerByLayerAFenceWhileThePushWaitsForTheEngineStopsItAndNoByteLandsAfter() {
        List<BlockRun> to = List.of(run(70, 24));
        LayersComputed ready = new LayersComputed(g);
        Transfer t = sender.push(Pushes.signed("req-lz", 1, "lease-lz", 1, "decode-0", 5, to), src, plan(List.of(run(0, 24)), to), peer, ready);
        ready.layers(2);
        await().atMost(Duration.ofSeconds(30)).until(() -> layerArrived(1, to));
        gate.releaseLease("lease-lz", 1); // returns once the waiting part heard the receiver's STOP and ended
        MemorySegment[] snapshot = snapshot();
        ready.complete(5);
        TransferException e = failure(t);
        assertThat(e.kind()).isEqualTo(TransferError.STALE_EPOCH);
        assertThat(e.getMessage()).contains("lease lease-lz epoch 1 was released");
        assertThat(unchanged(snapshot)).as("nothing lands after the fence returned").isTrue();
        assertThat(layerArrived(2, to)).isFalse();
        await().atMost(Duration.ofSeconds(5)).until(() -> gate.openSessions() == 0);
    }

    @Test
    void aFenceMidPushStopsItAndNoByteLandsAfterTheFenceReturns() {
        slowWrites(sender);
        List<BlockRun> to = shuffled(160, 7);
        Transfer t = start(Pushes.signed("req-f", 1, "lease-f", 1, "decode-0", 5, to), List.of(run(0, 160)));
        await().atMost(Duration.ofSeconds(30)).pollInterval(Duration.ofMillis(1)).until(() -> pagesWritten() > 0);
        gate.releaseLease("lease-f", 1);
        // The fence has returned: from now on the pages must not change.
        long written = pagesWritten();
        MemorySegment[] snapshot = snapshot();
        TransferException e = failure(t);
        assertThat(e.kind()).isEqualTo(TransferError.STALE_EPOCH);
        assertThat(e.reason()).startsWith("STALE_EPOCH: refused by decode-0@5 mooncake://")
                .endsWith(": lease lease-f epoch 1 was released during the push");
        assertThat(unchanged(snapshot)).as("nothing lands after the fence returned").isTrue();
        assertThat(written).as("the push was stopped, not finished").isLessThan(160L * 16);
        await().atMost(Duration.ofSeconds(5)).until(() -> gate.openSessions() == 0);
    }

    @Test
    void aCancelStopsThePushOnlyAfterItsSubmittedWritesFinished() {
        slowWrites(sender);
        List<BlockRun> to = shuffled(160, 9);
        Transfer t = start(Pushes.signed("req-c", 1, "lease-c", 1, "decode-0", 5, to), List.of(run(0, 160)));
        await().atMost(Duration.ofSeconds(30)).pollInterval(Duration.ofMillis(1)).until(() -> pagesWritten() > 0);
        t.cancel("the decider aborted the attempt");
        TransferException e = failure(t);
        assertThat(e.kind()).isEqualTo(TransferError.ABORTED);
        assertThat(e.reason()).isEqualTo("ABORTED: aborted: the decider aborted the attempt");
        assertThat(e.retriable()).isFalse();
        MemorySegment[] snapshot = snapshot();
        await().during(Duration.ofMillis(300)).atMost(Duration.ofSeconds(2)).until(() -> unchanged(snapshot));
        await().atMost(Duration.ofSeconds(5)).until(() -> gate.openSessions() == 0);
        assertThat(pagesWritten()).isLessThan(160L * 16);
        // The admission connection went back clean: the next push uses it.
        push(Pushes.signed("req-c2", 1, "lease-c2", 1, "decode-0", 5, List.of(run(0, 1))), List.of(run(0, 1)));
    }

    @Test
    void aReceiverDyingMidPushFailsItRetriablyAndTheRetryReachesItsSuccessor() {
        slowWrites(sender);
        List<BlockRun> to = shuffled(160, 11);
        Transfer t = start(Pushes.signed("req-d", 1, "lease-d", 1, "decode-0", 5, to), List.of(run(0, 160)));
        await().atMost(Duration.ofSeconds(30)).pollInterval(Duration.ofMillis(1)).until(() -> pagesWritten() > 0);
        receiver.close();
        TransferException e = failure(t);
        assertThat(e.retriable()).as(e.reason()).isTrue();
        assertThat(e.kind()).isIn(TransferError.CONNECTION_LOST, TransferError.PEER_UNREACHABLE, TransferError.TIMEOUT);

        // The engine restarts over the same memory with a new instance epoch; the retry is an order for it.
        epoch.set(6);
        KvTestData.sentinel(dst, SENTINEL);
        gate = new PushGate("decode-0", epoch::get, dst, Pushes.TOKENS, 65_536, 1000);
        receiver = MooncakeTransport.start(config(), newEngine(), "rx2", gate);
        sender.forgetPeer("decode-0");
        peer = PeerEndpoint.of("decode-0", 6, receiver.endpoint().orElseThrow());
        List<BlockRun> small = everyOther(20);
        push(Pushes.signed("req-d", 2, "lease-d", 2, "decode-0", 6, small), List.of(run(0, 20)));
        assertThat(KvTestData.verify(src, dst, plan(List.of(run(0, 20)), small), SENTINEL)).isNull();
    }

    @Test
    void unreachableAndIncompatiblePeersAreNamed() throws Exception {
        int closedPort;
        try (ServerSocket s = new ServerSocket(0)) {
            closedPort = s.getLocalPort();
        }
        Map<String, String> attrs = new HashMap<>(peer.attributes());
        attrs.put("control", "127.0.0.1:" + closedPort);
        PeerEndpoint gone = new PeerEndpoint("decode-0", 5, "mooncake", peer.address(), attrs);
        PushRequest r = Pushes.signed("req-u", 1, "lease-u", 1, "decode-0", 5, List.of(run(0, 1)));
        TransferException e = failure(sender.push(r, src, plan(List.of(run(0, 1)), List.of(run(0, 1))), gone));
        assertThat(e.kind()).isEqualTo(TransferError.PEER_UNREACHABLE);
        assertThat(e.retriable()).isTrue();
        assertThat(e.getMessage()).contains("cannot reach the mooncake admission listener of decode-0@5");

        attrs.put("protocol", "rdma");
        PeerEndpoint rdma = new PeerEndpoint("decode-0", 5, "mooncake", peer.address(), attrs);
        assertThat(sender.canReach(rdma)).isFalse();
        assertThat(failure(sender.push(r, src, plan(List.of(run(0, 1)), List.of(run(0, 1))), rdma)).kind()).isEqualTo(TransferError.NO_TRANSPORT);
        assertThat(sender.canReach(new PeerEndpoint("decode-0", 5, "tcp", "127.0.0.1:1", Map.of()))).isFalse();

        PushRequest late = new PushRequest("req-t", "req-t/a1", 1, "lease-t", 1, "decode-0", 5, List.of(run(0, 1)),
                Pushes.TOKENS.sign("req-t/a1", 1, "decode-0", 5, List.of(run(0, 1))), System.currentTimeMillis() - 1, "tx");
        TransferException timeout = failure(start(late, List.of(run(0, 1))));
        assertThat(timeout.reason()).isEqualTo("TIMEOUT: the order's deadline passed");
        assertThat(KvTestData.untouched(dst, SENTINEL)).isNull();
    }

    MemorySegment[] snapshot() {
        MemorySegment[] s = new MemorySegment[g.regionCount()];
        Arena a = Arena.ofAuto();
        for (int r = 0; r < s.length; r++) {
            s[r] = a.allocate(g.regionBytes());
            s[r].copyFrom(dst.region(r));
        }
        return s;
    }

    boolean unchanged(MemorySegment[] snapshot) {
        for (int r = 0; r < snapshot.length; r++) {
            if (snapshot[r].mismatch(dst.region(r)) != -1) {
                return false;
            }
        }
        return true;
    }
}
