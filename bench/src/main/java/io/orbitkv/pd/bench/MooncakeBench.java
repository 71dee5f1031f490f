package io.orbitkv.pd.bench;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.kv.BlockRuns;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvPool;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.mooncake.MooncakeConfig;
import io.orbitkv.pd.mooncake.MooncakeTransport;
import io.orbitkv.pd.mooncake.te.MooncakeEngine;
import io.orbitkv.pd.mooncake.te.NativeTransferEngine;
import io.orbitkv.pd.schemas.OrderTokens;
import io.orbitkv.pd.transport.KvTransport;
import io.orbitkv.pd.transport.PeerEndpoint;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.TransferResult;
import io.orbitkv.pd.transport.tcp.TcpConfig;
import io.orbitkv.pd.transport.tcp.TcpTransport;
import java.lang.foreign.MemorySegment;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;

/**
 * Our {@code tcp} transport against the {@code mooncake} transport over Mooncake's own TCP protocol, on loopback, in
 * the same run and the same JVM: the same bytes, the same fully scattered source and destination pages (two random
 * permutations, every page its own run on both sides), the same order credentials checked by the same
 * {@link PushGate}. Passes of the transports are interleaved, so drifting machine load hits all of them; the median
 * is reported, and every destination page is checked after the last pass of each transport.
 */
public final class MooncakeBench {

    /** What to run. {@code tcpConnections}: one tcp column per count; {@code mooncake}: the transport's settings. */
    public record Options(long bytes, List<Integer> pageSizes, int warmup, int repeat, List<Integer> tcpConnections, MooncakeConfig mooncake) { }

    /**
     * One page size's medians in GB/s (10^9 bytes per second).
     *
     * @param tcp         median per entry of {@link Options#tcpConnections()}
     * @param mooncake    median of the mooncake transport
     * @param tcpMin      slowest measured pass per tcp entry
     * @param mooncakeMin slowest measured mooncake pass
     */
    public record Result(int pageBytes, long pages, List<Double> tcp, double mooncake, List<Double> tcpMin, double mooncakeMin) {
        /** Our tcp transport (its first configuration) over the mooncake transport. */
        public double ratio() {
            return tcp.get(0) / mooncake;
        }

        public double bestTcp() {
            return tcp.stream().mapToDouble(Double::doubleValue).max().orElse(0);
        }
    }

    private static final byte[] KEY = "orbitkv-bench-mooncake-key".getBytes(StandardCharsets.UTF_8);

    private final Options options;
    private final MooncakeEngine library;

    public MooncakeBench(Options options, MooncakeEngine library) {
        this.options = options;
        this.library = library;
    }

    public Result run(int pageBytes) throws Exception {
        int blocks = Math.toIntExact(options.bytes() / pageBytes);
        KvGeometry g = new KvGeometry(1, KvSplit.FUSED, 16, 1, 1, Dtype.UNKNOWN, pageBytes, blocks);
        Random rnd = new Random(pageBytes);
        List<BlockRun> srcRuns = BlockRuns.fromBlocks(PageData.permutation(blocks, rnd));
        List<BlockRun> dstRuns = BlockRuns.fromBlocks(PageData.permutation(blocks, rnd));
        TransferPlan plan = TransferPlan.build(g, srcRuns, g, dstRuns);
        OrderTokens tokens = new OrderTokens(KEY);
        MooncakeConfig mc = options.mooncake();
        List<KvTransport> senders = new ArrayList<>();
        List<KvTransport> receivers = new ArrayList<>();
        try (HostKvPool src = HostKvPool.allocate(g); HostKvPool tcpDst = HostKvPool.allocate(g); HostKvPool mcDst = HostKvPool.allocate(g)) {
            PageData.fill(src.region(0));
            tcpDst.region(0).fill((byte) 0x11);
            mcDst.region(0).fill((byte) 0x11);
            int maxRuns = Math.max(65_536, dstRuns.size());
            PushGate tcpGate = new PushGate("bench-tcp", () -> 1, tcpDst, tokens, maxRuns, 1024);
            PushGate mcGate = new PushGate("bench-mooncake", () -> 1, mcDst, tokens, maxRuns, 1024);
            TcpTransport tcpRx = TcpTransport.start(TcpConfig.defaults(), "bench-rx", tcpGate);
            receivers.add(tcpRx);
            for (int c : options.tcpConnections()) {
                senders.add(TcpTransport.start(TcpConfig.defaults().withConnections(c), "bench-tx-" + c, null));
            }
            NativeTransferEngine.Options eo = new NativeTransferEngine.Options(mc.protocol(), mc.metadata(), mc.host(), mc.nicPriorityMatrix(),
                    mc.location());
            MooncakeTransport mcRx = MooncakeTransport.start(mc, NativeTransferEngine.start(library, eo), "bench-rx", mcGate);
            receivers.add(mcRx);
            MooncakeTransport mcTx = MooncakeTransport.start(mc, NativeTransferEngine.start(library, eo), "bench-tx", null);
            senders.add(mcTx);
            PeerEndpoint tcpPeer = new PeerEndpoint("bench-tcp", 1, "tcp", "127.0.0.1:" + tcpRx.localAddress().getPort(), null);
            PeerEndpoint mcPeer = PeerEndpoint.of("bench-mooncake", 1, mcRx.endpoint().orElseThrow());

            int n = options.warmup() + options.repeat();
            int k = options.tcpConnections().size();
            double[][] t = new double[k][n];
            double[] m = new double[n];
            int attempt = 0;
            for (int i = 0; i < n; i++) {
                boolean last = i == n - 1;
                for (int s = 0; s < k; s++) {
                    if (last) {
                        tcpDst.region(0).fill((byte) 0x11); // the verified pass starts from a clean destination
                    }
                    t[s][i] = pass(senders.get(s), src, plan, tcpPeer, "bench-tcp", dstRuns, tokens, ++attempt);
                }
                if (last) {
                    mcDst.region(0).fill((byte) 0x11);
                }
                m[i] = pass(mcTx, src, plan, mcPeer, "bench-mooncake", dstRuns, tokens, ++attempt);
                if (last) {
                    verify(src, tcpDst, plan, "tcp");
                    verify(src, mcDst, plan, "mooncake");
                }
            }
            List<Double> med = new ArrayList<>();
            List<Double> min = new ArrayList<>();
            for (int s = 0; s < k; s++) {
                double[] v = Arrays.copyOfRange(t[s], options.warmup(), n);
                med.add(TransportBench.median(v));
                min.add(Arrays.stream(v).min().orElse(0));
            }
            double[] mv = Arrays.copyOfRange(m, options.warmup(), n);
            return new Result(pageBytes, blocks, med, TransportBench.median(mv), min, Arrays.stream(mv).min().orElse(0));
        } finally {
            senders.forEach(KvTransport::close);
            receivers.forEach(KvTransport::close);
        }
    }

    private double pass(KvTransport sender, KvPool src, TransferPlan plan, PeerEndpoint peer, String engine, List<BlockRun> dstRuns, OrderTokens tokens,
                        int attempt) throws Exception {
        String order = "bench/a" + attempt;
        PushRequest req = new PushRequest("bench", order, attempt, "bench-lease", 1, engine, 1, dstRuns, tokens.sign(order, 1, engine, 1, dstRuns), 0,
                "bench");
        TransferResult res = sender.push(req, src, plan, peer).result().get();
        if (res.bytes() != options.bytes()) {
            throw new IllegalStateException(sender.name() + " acknowledged " + res.bytes() + " of " + options.bytes() + " bytes");
        }
        return res.bytes() / (double) res.durationNanos();
    }

    /** Every destination page equals its source page: the numbers are for bytes that really arrived. */
    private static void verify(HostKvPool src, HostKvPool dst, TransferPlan plan, String what) {
        for (int p = 0; p < plan.pairRuns(); p++) {
            for (int i = 0; i < plan.pairCount(p); i++) {
                if (src.page(0, plan.pairSource(p) + i).mismatch(dst.page(0, plan.pairDest(p) + i)) != -1) {
                    throw new IllegalStateException(what + ": page " + (plan.pairDest(p) + i) + " arrived corrupted");
                }
            }
        }
    }

}
