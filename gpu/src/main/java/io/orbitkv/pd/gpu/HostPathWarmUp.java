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
 * is only addresses, so that the JIT has compiled it before the first real push ({@link #run}): a worker pushes a few times
 * a second at most, and the run of 2026-12-06 on the GPU showed 125 µs for the admission alone. The same pushes, timed, are
 * {@code orbitkv-pd bench cuda-host-path} (docs/bench/cuda-host-path.md: a process's first 130 pushes, p50 376–496 µs
 * without the warm-up, 9–40 µs after it, three runs). Nothing is launched and no real gate is touched.
 */
public final class HostPathWarmUp {

    private final KvGeometry g;
    private final KvPool pool;
    private final OrderTokens tokens;
    private final PushGate gate;
    private final List<BlockRun> dest;
    private final TransferPlan plan;
    private final String tag;

    /**
     * A private gate over an 8B-shaped pool of addresses only (32 layers, K and V apart, 16-token pages) of
     * {@code poolBlocks} blocks, and pushes of {@code blocks} blocks: the destination in two runs, as a decode engine's pages
     * often are, the source in one apart from them.
     */
    public HostPathWarmUp(int poolBlocks, int blocks, String tag) {
        if (blocks < 2 || poolBlocks < 2 * blocks + 8) {
            throw new IllegalArgumentException("pushes of " + blocks + " blocks need a pool of at least " + (2 * blocks + 8) + " blocks");
        }
        this.g = new KvGeometry(32, KvSplit.SEPARATE, 16, 8, 128, Dtype.BF16, 16 * 8 * 128 * 2, poolBlocks);
        this.pool = addresses(g, "cuda:" + tag);
        this.tokens = new OrderTokens(("orbitkv-host-path-" + tag).getBytes(StandardCharsets.UTF_8));
        this.gate = new PushGate(tag, () -> 1, pool, tokens, 1024, 1024);
        this.dest = List.of(BlockRuns.run(1, blocks / 2), BlockRuns.run(8 + blocks / 2, blocks - blocks / 2));
        this.plan = TransferPlan.build(g, List.of(BlockRuns.run(poolBlocks - blocks, blocks)), g, dest);
        this.tag = tag;
    }

    /** Runs the path {@code rounds} times, as the cuda transport does at start; returns how many pushes it completed. */
    public static int run(int rounds) {
        HostPathWarmUp w = new HostPathWarmUp(256, 64, "warm-up");
        int done = 0;
        for (int i = 0; i < rounds; i++) {
            done += w.push(i, null) ? 1 : 0;
        }
        return done;
    }

    /**
     * Push {@code i}: admitted, its run table built and every piece claimed inside a frame, completed and closed. With
     * {@code at} (four longs), the {@link System#nanoTime()} before the admission, after it, after the claims, after the
     * close. Whether it completed.
     */
    public boolean push(int i, long[] at) {
        String order = tag + "-" + i + "/a1";
        PushRequest r = new PushRequest(tag + "-" + i, order, 1, "lease/" + tag + "/" + i, 1, tag, 1, dest,
                tokens.sign(order, 1, tag, 1, dest), 0, tag);
        long t0 = System.nanoTime();
        boolean done;
        long t1;
        long t2;
        try (ReceiveSession s = gate.open(CudaTransport.NAME, r, g)) {
            t1 = System.nanoTime();
            RunTable table = RunTable.build(plan, pool, pool, BlockRuns.intervals(dest));
            s.beginFrame();
            try {
                for (int k = 0; k < plan.spans(); k++) {
                    s.claim(plan.spanRegion(k), plan.spanDestOffset(k), plan.spanLength(k));
                }
            } finally {
                s.endFrame(table.bytes());
            }
            t2 = System.nanoTime();
            done = s.complete() == null;
        }
        if (at != null) {
            at[0] = t0;
            at[1] = t1;
            at[2] = t2;
            at[3] = System.nanoTime();
        }
        return done;
    }

    private static KvPool addresses(KvGeometry g, String location) {
        return new KvPool() {
            @Override
            public KvGeometry geometry() {
                return g;
            }

            @Override
            public String location() {
                return location;
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
    }
}
