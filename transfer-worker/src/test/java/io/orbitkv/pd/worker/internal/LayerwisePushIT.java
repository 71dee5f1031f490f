package io.orbitkv.pd.worker.internal;

import static io.orbitkv.pd.kv.BlockRuns.run;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.orbitkv.pd.engine.client.api.ApiProtocol.PrefillProgress;
import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.kv.BlockRuns;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvTestData;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.transport.PeerEndpoint;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.Pushes;
import io.orbitkv.pd.transport.Transfer;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import io.orbitkv.pd.transport.tcp.TcpConfig;
import io.orbitkv.pd.transport.tcp.TcpTransport;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * A push sent layer by layer over real tcp sockets while its prefill still "computes" (the test reports progress as an
 * engine would): each layer's pages reach the decode pool as soon as that layer is reported, the landing comes only
 * with the last layer, after the prefill completed, carrying its first token; a prefill that fails, a cancel and a fence
 * mid-way each stop the push and nothing is announced.
 */
class LayerwisePushIT {

    private static final byte SENTINEL = (byte) 0xEE;
    private final KvGeometry g = KvTestData.small(4, 64); // 4 layers × K, V
    private final HostKvPool src = HostKvPool.allocate(g);
    private final HostKvPool dst = HostKvPool.allocate(g);
    private final PushGate gate = new PushGate("decode-0", () -> 5, dst, Pushes.TOKENS, 1024, 1000);
    private final TcpTransport receiver = TcpTransport.start(TcpConfig.defaults().withIoTimeout(Duration.ofSeconds(2)), "rx", gate);
    private final TcpTransport sender = TcpTransport.start(TcpConfig.defaults().withIoTimeout(Duration.ofSeconds(2)), "tx", null);
    private final PeerEndpoint peer = new PeerEndpoint("decode-0", 5, "tcp", "127.0.0.1:" + receiver.localAddress().getPort(),
            receiver.endpoint().orElseThrow().getAttributes());
    private final List<String> landed = new CopyOnWriteArrayList<>();

    /** 20 prompt blocks (316 tokens: the last block partial) in source blocks 0..19, into 30..49. */
    private final int[] source = java.util.stream.IntStream.range(0, 20).toArray();
    private final List<BlockRun> dest = List.of(run(30, 20));

    LayerwisePushIT() {
        KvTestData.fill(src, 7);
        KvTestData.sentinel(dst, SENTINEL);
        gate.onLanded((r, bytes) -> landed.add(r.orderId() + " first=" + r.firstToken() + " bytes=" + bytes));
    }

    @AfterEach
    void tearDown() {
        sender.close();
        receiver.close();
        src.close();
        dst.close();
    }

    private PrefillProgress progress(int layers) {
        return new PrefillProgress("req-1", source, 316, 0, 316, layers);
    }

    /** Whether destination block {@code b}'s page of region {@code r} holds its source's bytes. */
    private boolean arrived(int r, int b) {
        return src.page(r, b - 30).mismatch(dst.page(r, b)) == -1;
    }

    @Test
    void eachLayerMovesAsItIsReportedAndTheLandingWaitsForTheLastWithItsFirstToken() throws Exception {
        PrefillReadiness ready = new PrefillReadiness(g, source, progress(0));
        TransferPlan plan = TransferPlan.build(g, BlockRuns.fromBlocks(source), g, dest);
        PushRequest r = Pushes.signed("req-1", 1, "lease-1", 1, "decode-0", 5, dest);
        Transfer t = sender.push(r, src, plan, peer, ready);
        ready.advance(progress(1)); // layer 0 computed: its K and V pages go now
        await("layer 0 in the decode pool").atMost(Duration.ofSeconds(10)).until(() -> arrived(g.region(0, 0), 49) && arrived(g.region(0, 1), 30));
        assertThat(arrived(g.region(1, 0), 30)).as("layer 1 not computed yet: not sent").isFalse();
        ready.advance(progress(3)); // layers 1 and 2
        await("layers 1 and 2").atMost(Duration.ofSeconds(10)).until(() -> arrived(g.region(2, 1), 49));
        assertThat(arrived(g.region(3, 0), 30)).as("the last layer waits for the prefill's end").isFalse();
        assertThat(landed).isEmpty();
        ready.advance(progress(4)); // every layer computed, but the prefill has not said it is done (first token unknown)
        assertThat(landed).isEmpty();
        ready.complete(4711);
        assertThat(t.result().join().bytes()).isEqualTo(plan.totalBytes());
        assertThat(KvTestData.verify(src, dst, plan, SENTINEL)).isNull();
        await().atMost(Duration.ofSeconds(5)).until(() -> !landed.isEmpty());
        assertThat(landed).containsExactly("req-1/a1 first=4711 bytes=" + plan.totalBytes());
    }

    @Test
    void aChunkedPrefillsEarlierChunksMoveInEveryLayerBeforeTheLaterChunkStarts() throws Exception {
        PrefillReadiness ready = new PrefillReadiness(g, source, new PrefillProgress("req-2", source, 316, 0, 160, 0));
        TransferPlan plan = TransferPlan.build(g, BlockRuns.fromBlocks(source), g, dest);
        Transfer t = sender.push(Pushes.signed("req-2", 1, "lease-2", 1, "decode-0", 5, dest), src, plan, peer, ready);
        ready.advance(new PrefillProgress("req-2", null, 316, 160, 316, 0)); // chunk 1 (blocks 0..9) done in every layer
        await("chunk 1, layers 0..2").atMost(Duration.ofSeconds(10)).until(() -> arrived(g.region(2, 1), 39) && arrived(g.region(0, 0), 30));
        assertThat(arrived(g.region(0, 0), 40)).as("chunk 2 not computed: not sent").isFalse();
        ready.complete(null);
        t.result().join();
        assertThat(KvTestData.verify(src, dst, plan, SENTINEL)).isNull();
    }

    @Test
    void aPrefillThatFailsMidWayStopsThePushAndNothingLands() throws Exception {
        PrefillReadiness ready = new PrefillReadiness(g, source, progress(0));
        TransferPlan plan = TransferPlan.build(g, BlockRuns.fromBlocks(source), g, dest);
        Transfer t = sender.push(Pushes.signed("req-3", 1, "lease-3", 1, "decode-0", 5, dest), src, plan, peer, ready);
        ready.advance(progress(2));
        await().atMost(Duration.ofSeconds(10)).until(() -> arrived(g.region(1, 1), 49));
        ready.fail("the engine's prefill failed mid-way: out of memory");
        assertThat(failure(t, TransferError.ABORTED).getMessage()).contains("prefill failed mid-way");
        assertThat(landed).isEmpty();
        await("the receiver closed every part").atMost(Duration.ofSeconds(5)).until(() -> gate.openSessions() == 0);
    }

    /** The push's outcome, which must be a failure of {@code kind}. */
    private static TransferException failure(Transfer t, TransferError kind) {
        try {
            t.result().join();
            throw new AssertionError("the push completed: " + t);
        } catch (CompletionException e) {
            assertThat(e.getCause()).isInstanceOf(TransferException.class);
            TransferException x = (TransferException) e.getCause();
            assertThat(x.kind()).as(x.getMessage()).isEqualTo(kind);
            return x;
        }
    }

    @Test
    void aCancelMidWayStopsThePushBetweenLayersAndNothingLands() throws Exception {
        PrefillReadiness ready = new PrefillReadiness(g, source, progress(0));
        TransferPlan plan = TransferPlan.build(g, BlockRuns.fromBlocks(source), g, dest);
        Transfer t = sender.push(Pushes.signed("req-4", 1, "lease-4", 1, "decode-0", 5, dest), src, plan, peer, ready);
        ready.advance(progress(2));
        await().atMost(Duration.ofSeconds(10)).until(() -> arrived(g.region(1, 1), 49));
        t.cancel("request cancelled"); // the stripes wait for layer 2, the tail for the prefill's end
        assertThat(failure(t, TransferError.ABORTED).getMessage()).contains("request cancelled");
        ready.advance(progress(4)); // the engine goes on computing: nothing more is sent
        ready.complete(17);
        await("the receiver closed every part").atMost(Duration.ofSeconds(5)).until(() -> gate.openSessions() == 0);
        assertThat(arrived(g.region(2, 0), 30)).as("layer 2, computed after the cancel, never sent").isFalse();
        assertThat(landed).isEmpty();
    }

    @Test
    void aFenceMidWayStopsTheRestAndNoByteLandsAfterIt() throws Exception {
        PrefillReadiness ready = new PrefillReadiness(g, source, progress(0));
        TransferPlan plan = TransferPlan.build(g, BlockRuns.fromBlocks(source), g, dest);
        Transfer t = sender.push(Pushes.signed("req-5", 1, "lease-5", 1, "decode-0", 5, dest), src, plan, peer, ready);
        ready.advance(progress(1));
        await().atMost(Duration.ofSeconds(10)).until(() -> arrived(g.region(0, 1), 49));
        gate.releaseLease("lease-5", 1); // the decode side gave the pages up (a newer attempt, the request ended)
        MemorySegment[] snapshot = new MemorySegment[g.regionCount()];
        for (int r = 0; r < snapshot.length; r++) {
            snapshot[r] = Arena.ofAuto().allocate(g.regionBytes()).copyFrom(dst.region(r));
        }
        ready.advance(progress(4)); // the rest is computed and would be sent: the receiver refuses it
        ready.complete(99);
        TransferException x = failure(t, TransferError.STALE_EPOCH);
        assertThat(x.getMessage()).contains("lease lease-5 epoch 1 was released");
        for (int r = 0; r < snapshot.length; r++) {
            assertThat(dst.region(r).mismatch(snapshot[r])).as("no byte of region %d changed after the fence", r).isEqualTo(-1L);
        }
        assertThat(landed).isEmpty();
    }
}
