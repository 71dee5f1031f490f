package io.orbitkv.pd.transport.tcp;

import static io.orbitkv.pd.kv.BlockRuns.run;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvTestData;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.Pushes;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.tcp.wire.Wire;
import java.io.IOException;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * The receiver's count of a push's (layer, page run) pieces over real sockets, driven by hand so the pieces arrive in
 * an order no sender of ours produces: layers out of order, pages of a layer back to front, two parts on two
 * connections. The landing is announced once, only when the last piece of every layer is in; a piece that another part
 * already wrote is refused.
 */
class LayerPiecesIT {

    private static final byte SENTINEL = (byte) 0xEE;
    private static final int PAGE = 32 * 1024;
    private final KvGeometry g = KvTestData.small(4, 16); // 8 regions (4 layers × K, V) × 16 pages of 32 KiB
    private final HostKvPool src = HostKvPool.allocate(g);
    private final HostKvPool dst = HostKvPool.allocate(g);
    private final PushGate gate = new PushGate("decode-0", () -> 5, dst, Pushes.TOKENS, 1024, 1000);
    private final TcpTransport receiver = TcpTransport.start(TcpConfig.defaults().withIoTimeout(Duration.ofSeconds(5)), "rx", gate);
    private final List<String> landed = new CopyOnWriteArrayList<>();

    LayerPiecesIT() {
        KvTestData.fill(src, 11);
        KvTestData.sentinel(dst, SENTINEL);
        gate.onLanded((r, bytes) -> landed.add(r.orderId() + " bytes=" + bytes));
    }

    @AfterEach
    void tearDown() {
        receiver.close();
        src.close();
        dst.close();
    }

    /** One piece: {@code page} of {@code region}, the source's bytes into the same page of the destination. */
    private record Piece(int region, int page) { }

    private RawClient connect() throws IOException {
        RawClient raw = new RawClient(receiver.localAddress());
        assertThat(raw.hello("decode-0").header().type()).isEqualTo(Wire.HELLO_OK);
        return raw;
    }

    private void write(RawClient raw, int stream, Piece p) throws IOException {
        raw.writeHeader(stream, p.region(), (long) p.page() * PAGE, PAGE);
        raw.send(src.page(p.region(), p.page()).toArray(ValueLayout.JAVA_BYTE));
    }

    /** Sends END for {@code bytes} and returns the answer frame. */
    private static RawClient.Frame end(RawClient raw, int stream, long bytes) throws IOException {
        raw.send(Wire.END, stream, Wire.longBody(bytes), 0);
        return raw.read();
    }

    private static List<Piece> pieces(int fromRegion, int toRegion, List<BlockRun> runs) {
        List<Piece> out = new ArrayList<>();
        for (int r = fromRegion; r < toRegion; r++) {
            for (BlockRun run : runs) {
                for (int b = run.getStart(); b < run.getStart() + run.getCount(); b++) {
                    out.add(new Piece(r, b));
                }
            }
        }
        return out;
    }

    @Test
    void piecesInAnyOrderOverTwoConnectionsLandOnceWhenTheLastIsIn() throws Exception {
        List<BlockRun> runs = List.of(run(3, 2), run(9, 1)); // 3 pages of every region: 24 pieces, 768 KiB
        PushRequest r = Pushes.signed("req-o", 1, "lease-o", 1, "decode-0", 5, runs);
        List<Piece> upper = pieces(4, 8, runs); // layers 2 and 3
        List<Piece> lower = pieces(0, 4, runs); // layers 0 and 1
        Collections.shuffle(upper, new Random(1));
        Collections.reverse(lower); // layer 1's V first, layer 0's K last, each layer's pages back to front
        try (RawClient a = connect(); RawClient b = connect()) {
            // The later layers' part first, on its own connection: acknowledged, but the push is not whole.
            assertThat(a.begin(1, r, g, (long) upper.size() * PAGE).header().type()).isEqualTo(Wire.BEGIN_OK);
            for (Piece p : upper) {
                write(a, 1, p);
            }
            RawClient.Frame ack = end(a, 1, (long) upper.size() * PAGE);
            assertThat(ack.header().type()).isEqualTo(Wire.ACK);
            assertThat(landed).as("two layers of four in: not landed").isEmpty();
            // The earlier layers' part, all but its last piece: still not whole.
            assertThat(b.begin(7, r, g, (long) lower.size() * PAGE).header().type()).isEqualTo(Wire.BEGIN_OK);
            for (Piece p : lower.subList(0, lower.size() - 1)) {
                write(b, 7, p);
            }
            assertThat(landed).isEmpty();
            write(b, 7, lower.get(lower.size() - 1));
            assertThat(end(b, 7, (long) lower.size() * PAGE).header().type()).isEqualTo(Wire.ACK);
        }
        await().atMost(Duration.ofSeconds(5)).until(() -> !landed.isEmpty());
        assertThat(landed).containsExactly("req-o/a1 bytes=" + 24L * PAGE);
        assertThat(KvTestData.verify(src, dst, TransferPlan.build(g, runs, g, runs), SENTINEL)).isNull();
    }

    @Test
    void aPieceThatAnotherPartAlreadyWroteIsRefusedAndThePushNeverLands() throws Exception {
        List<BlockRun> runs = List.of(run(5, 1)); // 8 pieces, one per region
        PushRequest r = Pushes.signed("req-d", 1, "lease-d", 1, "decode-0", 5, runs);
        try (RawClient a = connect(); RawClient b = connect()) {
            assertThat(a.begin(1, r, g, 4L * PAGE).header().type()).isEqualTo(Wire.BEGIN_OK);
            for (Piece p : pieces(0, 4, runs)) {
                write(a, 1, p);
            }
            assertThat(end(a, 1, 4L * PAGE).header().type()).isEqualTo(Wire.ACK);
            // The second part repeats layer 1's K (region 2) instead of sending layer 3's V (region 7).
            assertThat(b.begin(2, r, g, 4L * PAGE).header().type()).isEqualTo(Wire.BEGIN_OK);
            for (Piece p : List.of(new Piece(4, 5), new Piece(5, 5), new Piece(6, 5), new Piece(2, 5))) {
                write(b, 2, p);
            }
            RawClient.Frame answer = end(b, 2, 4L * PAGE);
            assertThat(answer.header().type()).isEqualTo(Wire.ERROR);
            var e = Wire.parseError(answer.body(), "receiver");
            assertThat(e.kind()).isEqualTo(TransferError.OUT_OF_RANGE);
            assertThat(e.getMessage()).contains("a part of the push wrote pages another part already");
        }
        await().atMost(Duration.ofSeconds(5)).until(() -> gate.openSessions() == 0);
        assertThat(landed).as("8 pieces' worth of bytes, but one piece twice and one missing").isEmpty();
    }
}
