package io.orbitkv.pd.gpu;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.kv.BlockRuns;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvPool;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.schemas.OrderTokens;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.ReceiveSession;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.Optional;

/**
 * Runs the host side of a cuda push — the receiver's admission ({@link PushGate#open}: token, epochs, fences), the
 * {@link RunTable}, the claims inside a frame, the completion and the landing's count — on a private gate over a pool that
 * is only addresses, {@code rounds} times, so that the JIT has compiled it before the first real push: a worker pushes a
 * few times a second at most, and interpreted this path cost ~250 µs a push (measured here on the CPU: admission 43 µs,
 * claims 102 µs, completion 172 µs for the first 130 pushes of an 8K-token order, 3 / 43 / 46 µs compiled; on the GPU the
 * run of 2026-12-06 showed 125 µs for the admission alone). Nothing is launched and no real gate is touched.
 */
public final class HostPathWarmUp {

    private HostPathWarmUp() { }

    /** Runs the path {@code rounds} times; returns how many pushes it admitted and completed. */
    public static int run(int rounds) {
        // an 8B-shaped pool of addresses only: 32 layers, K and V apart, 16-token pages, 256 blocks
        KvGeometry g = new KvGeometry(32, KvSplit.SEPARATE, 16, 8, 128, Dtype.BF16, 16 * 8 * 128 * 2, 256);
        KvPool pool = new KvPool() {
            @Override
            public KvGeometry geometry() {
                return g;
            }

            @Override
            public String location() {
                return "cuda:warm-up";
            }

            @Override
            public long baseAddress(int region) {
                return 0x7000_0000_0000L + region * g.regionBytes();
            }

            @Override
            public Optional<MemorySegment> hostRegion(int region) {
                return Optional.empty();
            }

            @Override
            public void close() { }
        };
        OrderTokens tokens = new OrderTokens("orbitkv-host-path-warm-up-key".getBytes(StandardCharsets.UTF_8));
        PushGate gate = new PushGate("warm-up", () -> 1, pool, tokens, 1024, 1024);
        // two destination runs, as a decode engine's pages often are; the source in one, apart from them
        List<BlockRun> dest = List.of(BlockRuns.run(10, 24), BlockRuns.run(100, 40));
        TransferPlan plan = TransferPlan.build(g, List.of(BlockRuns.run(150, 64)), g, dest);
        BlockRuns.Intervals authorized = BlockRuns.intervals(dest);
        int done = 0;
        for (int i = 0; i < rounds; i++) {
            String order = "warm-up-" + i + "/a1";
            PushRequest r = new PushRequest("warm-up-" + i, order, 1, "lease/warm-up/" + i, 1, "warm-up", 1, dest,
                    tokens.sign(order, 1, "warm-up", 1, dest), 0, "warm-up");
            try (ReceiveSession s = gate.open(CudaTransport.NAME, r, g)) {
                RunTable table = RunTable.build(plan, pool, pool, authorized);
                s.beginFrame();
                try {
                    for (int k = 0; k < plan.spans(); k++) {
                        s.claim(plan.spanRegion(k), plan.spanDestOffset(k), plan.spanLength(k));
                    }
                } finally {
                    s.endFrame(table.bytes());
                }
                if (s.complete() == null) {
                    done++;
                }
            }
        }
        return done;
    }
}
