package io.orbitkv.pd.transport.tcp;

import static io.orbitkv.pd.kv.BlockRuns.run;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.orbitkv.pd.events.BlockRun;
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
import io.orbitkv.pd.transport.TransferResult;
import io.orbitkv.pd.transport.tcp.wire.Wire;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletionException;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The tcp transport over real loopback sockets, sender and receiver in this JVM: bytes intact through scattered
 * pages and several connections, every refusal named, hostile and broken streams dropped without harm to other
 * pushes, peers dying and restarting, aborts and fences in the middle of a push.
 */
class TcpTransportIT {

    private static final byte SENTINEL = (byte) 0xEE;
    private static final int PAGE = 32 * 1024;
    private final KvGeometry g = KvTestData.small(8, 160); // 16 regions × 160 × 32 KiB = 80 MiB per pool
    private final HostKvPool src = HostKvPool.allocate(g);
    private final HostKvPool dst = HostKvPool.allocate(g);
    private final AtomicLong epoch = new AtomicLong(5);
    private final TcpConfig config = TcpConfig.defaults().withIoTimeout(Duration.ofSeconds(2));
    private final List<AutoCloseable> closeables = new ArrayList<>();
    private PushGate gate = newGate();
    private TcpTransport receiver = TcpTransport.start(config, "rx", gate);
    private PeerEndpoint peer = peer(receiver);

    TcpTransportIT() {
        KvTestData.fill(src, 3);
        KvTestData.sentinel(dst, SENTINEL);
    }

    @AfterEach
    void tearDown() throws Exception {
        for (AutoCloseable c : closeables) {
            c.close();
        }
        receiver.close();
        src.close();
        dst.close();
    }

    private PushGate newGate() {
        return new PushGate("decode-0", epoch::get, dst, Pushes.TOKENS, 65536, 1000);
    }

    /** The receiver as its registration announces it (so pushes pipeline their BEGIN, as in production). */
    private static PeerEndpoint peer(TcpTransport t) {
        return new PeerEndpoint("decode-0", 5, "tcp", "127.0.0.1:" + t.localAddress().getPort(), t.endpoint().orElseThrow().getAttributes());
    }

    /** The same receiver as an older one would announce it: no pipelined BEGIN, each stripe waits for BEGIN_OK. */
    private static PeerEndpoint legacyPeer(TcpTransport t) {
        return new PeerEndpoint("decode-0", 5, "tcp", "127.0.0.1:" + t.localAddress().getPort(), null);
    }

    private TcpTransport sender(TcpConfig c) {
        TcpTransport t = TcpTransport.start(c, "tx", null);
        closeables.add(t);
        return t;
    }

    /** 128 source blocks in order into every other destination block: 64 MiB in 2,048 runs of one 32 KiB page. */
    private static List<BlockRun> scattered(int blocks, int from) {
        List<BlockRun> out = new ArrayList<>();
        for (int i = 0; i < blocks; i++) {
            out.add(run(from + 2 * i, 1));
        }
        return out;
    }

    private static TransferResult join(Transfer t) {
        try {
            return t.result().join();
        } catch (CompletionException e) {
            throw (RuntimeException) e.getCause();
        }
    }

    private static TransferException failure(Transfer t) {
        try {
            TransferResult r = t.result().join();
            throw new AssertionError("expected the push to fail, it completed: " + r);
        } catch (CompletionException e) {
            assertThat(e.getCause()).isInstanceOf(TransferException.class);
            return (TransferException) e.getCause();
        }
    }

    @Test
    void movesScatteredPagesIntactOverOneAndSeveralConnections() {
        for (int connections : new int[] {1, 3}) {
            KvTestData.sentinel(dst, SENTINEL);
            List<BlockRun> dstRuns = scattered(64, 1 + connections);
            TransferPlan plan = TransferPlan.build(g, List.of(run(7, 64)), g, dstRuns);
            assertThat(plan.spans()).isEqualTo(64 * 16);
            PushRequest r = Pushes.signed("req-" + connections, 1, "lease-1", 1, "decode-0", 5, dstRuns);
            TransferResult res = join(sender(config.withConnections(connections)).push(r, src, plan, peer));
            assertThat(res.bytes()).isEqualTo(32L << 20);
            assertThat(res.connections()).isEqualTo(connections);
            assertThat(KvTestData.verify(src, dst, plan, SENTINEL)).isNull();
        }
        assertThat(gate.openSessions()).isZero();
        assertThat(gate.acceptedPushes()).isEqualTo(1 + 3);
    }

    @Test
    void refusalsNameTheirReasonAndTheWorkerKeepsServing() {
        // pipelined (the refusal comes back at END, the stripe's frames dropped unwritten) and waiting for BEGIN_OK
        for (PeerEndpoint peer : List.of(peer(receiver), legacyPeer(receiver))) {
            KvTestData.sentinel(dst, SENTINEL);
            refusalsNameTheirReason(peer);
        }
    }

    private void refusalsNameTheirReason(PeerEndpoint peer) {
        TcpTransport s = sender(config);
        List<BlockRun> dstRuns = List.of(run(10, 20));
        TransferPlan plan = TransferPlan.build(g, List.of(run(0, 20)), g, dstRuns);
        PushRequest good = Pushes.signed("req-9", 1, "lease-9", 2, "decode-0", 5, dstRuns);

        TransferException forged = failure(s.push(Pushes.forged(good), src, plan, peer));
        assertThat(forged.kind()).isEqualTo(TransferError.UNAUTHORIZED);
        assertThat(forged.retriable()).isFalse();
        assertThat(forged.getMessage()).startsWith("refused by decode-0@5 tcp://127.0.0.1:").contains("does not verify");

        TransferException stale = failure(s.push(Pushes.signed("req-9", 1, "lease-9", 2, "decode-0", 4, dstRuns), src, plan, peer));
        assertThat(stale.kind()).isEqualTo(TransferError.STALE_EPOCH);
        assertThat(stale.getMessage()).contains("was issued for instance epoch 4 of decode-0, which is now at instance epoch 5");

        List<BlockRun> outside = List.of(run(150, 20));
        TransferException range = failure(s.push(Pushes.signed("req-9", 1, "lease-9", 2, "decode-0", 5, outside), src,
                TransferPlan.build(g, List.of(run(0, 20)), g.withNumBlocks(170), outside), peer));
        assertThat(range.kind()).isEqualTo(TransferError.OUT_OF_RANGE);
        assertThat(range.getMessage()).contains("run 150+20 is outside the pool of 160 blocks");

        gate.releaseLease("lease-8", 3);
        TransferException released = failure(s.push(Pushes.signed("req-8", 1, "lease-8", 3, "decode-0", 5, dstRuns), src, plan, peer));
        assertThat(released.kind()).isEqualTo(TransferError.STALE_EPOCH);
        assertThat(released.getMessage()).contains("lease lease-8 epoch 3 was released");

        assertThat(KvTestData.untouched(dst, SENTINEL)).isNull();
        assertThat(join(s.push(good, src, plan, peer)).bytes()).isEqualTo(plan.totalBytes());
        assertThat(KvTestData.verify(src, dst, plan, SENTINEL)).isNull();
    }

    @Test
    void aWriteOutsideTheAdmittedPagesClosesThatConnectionOnly() throws Exception {
        InetSocketAddress addr = receiver.localAddress();
        try (RawClient raw = new RawClient(addr)) {
            assertThat(raw.hello("decode-0").header().type()).isEqualTo(Wire.HELLO_OK);
            List<BlockRun> runs = List.of(run(3, 1));
            PushRequest r = Pushes.signed("req-h", 1, "lease-h", 1, "decode-0", 5, runs);
            assertThat(raw.begin(1, r, g, PAGE).header().type()).isEqualTo(Wire.BEGIN_OK);
            raw.writeHeader(1, 0, 5L * PAGE, PAGE); // page 5: admitted was page 3
            raw.send(new byte[PAGE]);
            RawClient.Frame err = raw.read();
            assertThat(err.header().type()).isEqualTo(Wire.ERROR);
            TransferException e = Wire.parseError(err.body(), "receiver");
            assertThat(e.kind()).isEqualTo(TransferError.OUT_OF_RANGE);
            assertThat(e.getMessage()).contains("write to pages 5..5 of layer 0 K, which are not among the order's destination pages");
            assertThat(raw.closedByPeer()).isTrue();
        }
        assertThat(KvTestData.untouched(dst, SENTINEL)).isNull();
        await().atMost(Duration.ofSeconds(5)).until(() -> gate.openSessions() == 0);
        assertGoodPushWorks();
    }

    @Test
    void garbageTruncatedAndStalledStreamsAreDroppedWithoutHarm() throws Exception {
        InetSocketAddress addr = receiver.localAddress();
        // 1. random garbage
        byte[] junk = new byte[64 * 1024];
        new Random(9).nextBytes(junk);
        try (RawClient raw = new RawClient(addr)) {
            raw.send(junk);
            RawClient.Frame err = raw.read();
            assertThat(Wire.parseError(err.body(), "receiver").getMessage()).contains("bad magic");
            assertThat(raw.closedByPeer()).isTrue();
        }
        // 2. a valid header, then the connection ends inside the body
        try (RawClient raw = new RawClient(addr)) {
            ByteBuffer hello = Wire.hello("raw", "decode-0");
            ByteBuffer b = ByteBuffer.allocate(Wire.HEADER_BYTES + 3);
            Wire.putHeader(b, Wire.HELLO, 0, hello.remaining(), 0);
            b.put(hello.get()).put(hello.get()).put(hello.get());
            raw.send(b.array());
        }
        // 3. a WRITE that ends after 10 KiB of its 64 KiB payload; 4. one that stalls there
        List<BlockRun> runs = List.of(run(0, 2));
        PushRequest r = Pushes.signed("req-t", 1, "lease-t", 1, "decode-0", 5, runs);
        try (RawClient raw = new RawClient(addr)) {
            raw.hello("decode-0");
            assertThat(raw.begin(1, r, g, 2L * PAGE).header().type()).isEqualTo(Wire.BEGIN_OK);
            raw.writeHeader(1, 0, 0, 2 * PAGE);
            raw.send(new byte[10 * 1024]);
        }
        RawClient stalled = new RawClient(addr);
        closeables.add(stalled);
        stalled.hello("decode-0");
        assertThat(stalled.begin(1, Pushes.signed("req-s", 1, "lease-s", 1, "decode-0", 5, runs), g, 2L * PAGE).header().type())
                .isEqualTo(Wire.BEGIN_OK);
        stalled.writeHeader(1, 0, 0, 2 * PAGE);
        stalled.send(new byte[10 * 1024]);
        // 5. a peer that stops inside a frame header, and 6. one that connects and never says a word
        RawClient midHeader = new RawClient(addr);
        closeables.add(midHeader);
        midHeader.hello("decode-0");
        midHeader.send(new byte[] {0x4F, 0x4B, 0x56});
        RawClient silent = new RawClient(addr);
        closeables.add(silent);
        // Every broken session is dropped, none acknowledged; the stalled ones after transfer.tcp.io-timeout.
        await().atMost(Duration.ofSeconds(10)).until(() -> gate.openSessions() == 0 && receiver.receivingConnections() == 0);
        assertThat(stalled.closedByPeer()).isTrue();
        assertThat(midHeader.closedByPeer()).isTrue();
        assertThat(silent.closedByPeer()).isTrue();
        assertThat(gate.bytesWritten()).as("partial frames never count as written").isZero();
        // The good push covers blocks 0 and 1 too, so every page must end up right.
        assertGoodPushWorks();
    }

    private void assertGoodPushWorks() {
        List<BlockRun> dstRuns = List.of(run(0, 16), run(100, 16));
        TransferPlan plan = TransferPlan.build(g, List.of(run(40, 32)), g, dstRuns);
        PushRequest good = Pushes.signed("req-ok", 1, "lease-ok", 1, "decode-0", 5, dstRuns);
        assertThat(join(sender(config).push(good, src, plan, peer)).bytes()).isEqualTo(plan.totalBytes());
        assertThat(KvTestData.verify(src, dst, plan, SENTINEL)).isNull();
    }

    /** Waits until the first destination page has bytes: the push is under way. */
    private void awaitFirstBytes(int block) {
        MemorySegment clean = Arena.ofAuto().allocate(PAGE);
        clean.fill(SENTINEL);
        await().atMost(Duration.ofSeconds(10)).pollInterval(Duration.ofMillis(2)).until(() -> dst.page(0, block).mismatch(clean) != -1);
    }

    @Test
    void aReceiverDyingMidPushFailsItRetriablyAndTheRetryReachesTheRestartedOne() {
        TcpTransport s = sender(config.withMaxBytesPerSecond(16L << 20).withFrame(1 << 20, 1024));
        List<BlockRun> dstRuns = List.of(run(20, 40));
        TransferPlan plan = TransferPlan.build(g, List.of(run(0, 40)), g, dstRuns); // 20 MiB: > 1 s at 16 MiB/s
        Transfer t = s.push(Pushes.signed("req-k", 1, "lease-k", 1, "decode-0", 5, dstRuns), src, plan, peer);
        awaitFirstBytes(20);
        receiver.close(); // the receiving worker goes away mid-push
        TransferException e = failure(t);
        assertThat(e.kind()).isEqualTo(TransferError.CONNECTION_LOST);
        assertThat(e.retriable()).isTrue();
        // whichever of the push's connections notices first reports: one moving bytes ("connection to … lost after"), or,
        // on a loaded machine, one still in its handshake
        assertThat(e.getMessage()).contains("decode-0@5").containsAnyOf("lost after", "handshake with decode-0@5");
        assertThat(dst.page(15, 59).mismatch(src.page(15, 39))).as("the push really was cut short").isNotEqualTo(-1);

        receiver = TcpTransport.start(config.withPort(peer.address().endsWith(":0") ? 0 : Integer.parseInt(peer.address().split(":")[1])),
                "rx2", gate);
        TransferResult retry = join(s.push(Pushes.signed("req-k", 2, "lease-k", 1, "decode-0", 5, dstRuns), src, plan, peer));
        assertThat(retry.bytes()).isEqualTo(plan.totalBytes());
        assertThat(KvTestData.verify(src, dst, plan, SENTINEL)).isNull();
    }

    @Test
    void aPooledConnectionToARestartedPeerIsReplacedTransparently() {
        TcpTransport s = sender(config);
        List<BlockRun> dstRuns = List.of(run(0, 8));
        TransferPlan plan = TransferPlan.build(g, List.of(run(0, 8)), g, dstRuns);
        join(s.push(Pushes.signed("req-p", 1, "lease-p", 1, "decode-0", 5, dstRuns), src, plan, peer));
        int port = receiver.localAddress().getPort();
        receiver.close();
        receiver = TcpTransport.start(config.withPort(port), "rx2", gate);
        KvTestData.sentinel(dst, SENTINEL);
        assertThat(join(s.push(Pushes.signed("req-p", 2, "lease-p", 1, "decode-0", 5, dstRuns), src, plan, peer)).bytes())
                .isEqualTo(plan.totalBytes());
        assertThat(KvTestData.verify(src, dst, plan, SENTINEL)).isNull();
    }

    @Test
    void anAbortStopsThePushAndAFenceStopsItsWrites() {
        TcpTransport s = sender(config.withMaxBytesPerSecond(8L << 20).withFrame(1 << 20, 1024));
        List<BlockRun> dstRuns = List.of(run(20, 40));
        TransferPlan plan = TransferPlan.build(g, List.of(run(0, 40)), g, dstRuns);
        Transfer t = s.push(Pushes.signed("req-a", 1, "lease-a", 1, "decode-0", 5, dstRuns), src, plan, peer);
        awaitFirstBytes(20);
        t.cancel("request cancelled");
        TransferException aborted = failure(t);
        assertThat(aborted.kind()).isEqualTo(TransferError.ABORTED);
        assertThat(aborted.getMessage()).isEqualTo("aborted: request cancelled");
        assertThat(gate.openSessions()).isZero();

        KvTestData.sentinel(dst, SENTINEL);
        Transfer t2 = s.push(Pushes.signed("req-f", 1, "lease-f", 1, "decode-0", 5, dstRuns), src, plan, peer);
        awaitFirstBytes(20);
        gate.releaseLease("lease-f", 1); // returns once no frame of the push is being written
        MemorySegment snapshot = Arena.ofAuto().allocate(g.regionBytes());
        snapshot.copyFrom(dst.region(15));
        TransferException fenced = failure(t2);
        assertThat(fenced.kind()).isEqualTo(TransferError.STALE_EPOCH);
        assertThat(fenced.getMessage()).contains("lease lease-f epoch 1 was released during the push");
        assertThat(dst.region(15).mismatch(snapshot)).as("no byte landed after the fence").isEqualTo(-1);
    }

    @Test
    void anUnreachablePeerIsARetriableFailure() throws Exception {
        // A bound socket that does not listen holds its port: connecting is refused, and no other test can take it.
        try (java.net.Socket holder = new java.net.Socket()) {
            holder.bind(new InetSocketAddress("127.0.0.1", 0));
            int port = holder.getLocalPort();
            TransferPlan plan = TransferPlan.build(g, List.of(run(0, 1)), g, List.of(run(0, 1)));
            TransferException e = failure(sender(config).push(Pushes.signed("req-u", 1, "l", 1, "decode-0", 5, List.of(run(0, 1))), src, plan,
                    new PeerEndpoint("decode-0", 5, "tcp", "127.0.0.1:" + port, null)));
            assertThat(e.kind()).isEqualTo(TransferError.PEER_UNREACHABLE);
            assertThat(e.retriable()).isTrue();
            assertThat(e.getMessage()).startsWith("cannot connect to decode-0@5 tcp://127.0.0.1:" + port);
        }
    }


    /**
     * Over TLS (transfer.tcp.tls): pages arrive intact over one and several connections; a sender that does not trust the
     * receiver's certificate, and a plaintext sender, are refused before any page moves.
     */
    @Test
    void pagesCrossTlsIntactAndOnlyATrustingTlsSenderGetsIn(@org.junit.jupiter.api.io.TempDir java.nio.file.Path dir) {
        TcpConfig tls = config.withIoTimeout(Duration.ofSeconds(5)).withTls(tls(dir.resolve("ours")));
        PushGate tlsGate = newGate();
        TcpTransport tlsReceiver = TcpTransport.start(tls, "rx-tls", tlsGate);
        closeables.add(tlsReceiver);
        for (int connections : new int[] {1, 3}) {
            KvTestData.sentinel(dst, SENTINEL);
            List<BlockRun> dstRuns = scattered(64, 1 + connections);
            TransferPlan plan = TransferPlan.build(g, List.of(run(7, 64)), g, dstRuns);
            PushRequest r = Pushes.signed("tls-" + connections, 1, "lease-1", 1, "decode-0", 5, dstRuns);
            TransferResult res = join(sender(tls.withConnections(connections)).push(r, src, plan, peer(tlsReceiver)));
            assertThat(res.bytes()).isEqualTo(32L << 20);
            assertThat(KvTestData.verify(src, dst, plan, SENTINEL)).isNull();
        }
        assertThat(tlsGate.acceptedPushes()).as("one a stripe").isEqualTo(1 + 3);

        // A sender trusting another CA: its handshake fails, nothing is admitted.
        List<BlockRun> dstRuns = scattered(8, 3);
        TransferPlan plan = TransferPlan.build(g, List.of(run(7, 8)), g, dstRuns);
        TransferException untrusted = failure(sender(config.withIoTimeout(Duration.ofSeconds(5)).withTls(tls(dir.resolve("theirs"))))
                .push(Pushes.signed("tls-untrusted", 1, "lease-1", 1, "decode-0", 5, dstRuns), src, plan, peer(tlsReceiver)));
        assertThat(untrusted.kind()).isEqualTo(TransferError.CONNECTION_LOST);
        assertThat(untrusted.getMessage()).contains("TLS handshake with").contains("failed");
        // A plaintext sender: the receiver speaks only TLS.
        failure(sender(config.withIoTimeout(Duration.ofSeconds(5)))
                .push(Pushes.signed("tls-plain", 1, "lease-1", 1, "decode-0", 5, dstRuns), src, plan, peer(tlsReceiver)));
        assertThat(tlsGate.acceptedPushes()).as("nothing admitted from the refused senders").isEqualTo(1 + 3);
    }

    /** A development CA and a certificate for 127.0.0.1, as both the receiver's keystore and the sender's truststore. */
    private static TcpTls tls(java.nio.file.Path dir) {
        io.orbitkv.pd.broker.TlsMaterial m = io.orbitkv.pd.broker.TlsMaterial.generate(dir, "tcp-tls-secret");
        return new TcpTls(m.keystore(), m.password(), m.truststore(), m.password());
    }
}
