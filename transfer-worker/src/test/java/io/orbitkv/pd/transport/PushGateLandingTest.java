package io.orbitkv.pd.transport;

import static io.orbitkv.pd.kv.BlockRuns.run;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvTestData;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.junit.jupiter.api.Test;

/**
 * The receiver counts a push's pieces, not its bytes: a push sent layer by layer in parts (each part a session: a stripe,
 * a layer group) lands when every (layer, page run) piece is in place, never before; a piece written twice — in one part
 * or in two — is refused and never makes the count whole while another piece is missing.
 */
class PushGateLandingTest {

    private final KvGeometry g = KvTestData.small(4, 64); // 4 layers × K, V = 8 regions
    private final List<BlockRun> dst = List.of(run(8, 2), run(20, 1));

    /** Writes {@code blocks} (destination block ids) of {@code regions} in one part of the push; what {@code complete} said. */
    private static TransferException part(PushGate gate, PushRequest r, KvGeometry g, int[] regions, int... blocks) {
        try (ReceiveSession s = gate.open("local", r, g)) {
            s.beginFrame();
            long n = 0;
            try {
                for (int region : regions) {
                    for (int b : blocks) {
                        s.target(region, (long) b * g.pageBytes(), g.pageBytes()).fill((byte) region);
                        n += g.pageBytes();
                    }
                }
            } finally {
                s.endFrame(n);
            }
            return s.complete();
        }
    }

    private static int[] layer(KvGeometry g, int layer) {
        return new int[] {g.region(layer, 0), g.region(layer, 1)};
    }

    @Test
    void aPushInLayerPiecesLandsOnlyWhenEveryPieceOfEveryLayerIsIn() {
        try (HostKvPool pool = HostKvPool.allocate(g)) {
            PushGate gate = new PushGate("decode-0", () -> 5, pool, Pushes.TOKENS, 1024, 100);
            List<String> landed = new CopyOnWriteArrayList<>();
            gate.onLanded((req, bytes) -> landed.add(req.orderId() + ":" + bytes));
            PushRequest r = Pushes.signed("req-1", 1, "lease-1", 1, "decode-0", 5, dst);
            for (int l = 0; l < 3; l++) {
                assertThat(part(gate, r, g, layer(g, l), 8, 9, 20)).isNull();
            }
            assertThat(part(gate, r, g, layer(g, 3), 8, 9)).isNull(); // the last layer, all but one page run
            assertThat(landed).as("one piece of the last layer is missing").isEmpty();
            // a piece of layer 0 again: refused, and it does not make up for the missing one
            assertThat(part(gate, r, g, layer(g, 0), 20)).isNotNull().satisfies(e -> {
                assertThat(e.kind()).isEqualTo(TransferError.OUT_OF_RANGE);
                assertThat(e.getMessage()).contains("a piece twice");
            });
            assertThat(landed).isEmpty();
            assertThat(part(gate, r, g, layer(g, 3), 20)).isNull();
            assertThat(landed).containsExactly("req-1/a1:" + 3 * g.bytesPerBlock());
            // the whole attempt executed again (its source worker restarted): accepted, not announced again
            assertThat(part(gate, r, g, new int[] {0, 1, 2, 3, 4, 5, 6, 7}, 8, 9, 20)).isNull();
            assertThat(landed).hasSize(1);
        }
    }

    @Test
    void aPieceWrittenTwiceInOnePartIsRefusedBeforeItIsWritten() {
        try (HostKvPool pool = HostKvPool.allocate(g)) {
            PushGate gate = new PushGate("decode-0", () -> 5, pool, Pushes.TOKENS, 1024, 100);
            PushRequest r = Pushes.signed("req-1", 1, "lease-1", 1, "decode-0", 5, dst);
            try (ReceiveSession s = gate.open("local", r, g)) {
                s.target(0, 8L * g.pageBytes(), g.pageBytes());
                s.claim(0, 9L * g.pageBytes(), g.pageBytes() / 2); // half a page, then the other half: not twice
                s.claim(0, 9L * g.pageBytes() + g.pageBytes() / 2, g.pageBytes() / 2);
                assertThatThrownBy(() -> s.target(0, 8L * g.pageBytes() + 16, 16)).isInstanceOfSatisfying(TransferException.class,
                        e -> assertThat(e.getMessage()).contains("layer 0 K written twice in one push"));
                assertThatThrownBy(() -> s.claim(0, 30L * g.pageBytes(), 8)).hasMessageContaining("not among the order's destination pages");
            }
        }
    }
}
