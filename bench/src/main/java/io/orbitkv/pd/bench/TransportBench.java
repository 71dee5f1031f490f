package io.orbitkv.pd.bench;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.kv.BlockRuns;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.schemas.OrderTokens;
import io.orbitkv.pd.transport.PeerEndpoint;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.TransferResult;
import io.orbitkv.pd.transport.tcp.TcpConfig;
import io.orbitkv.pd.transport.tcp.TcpTransport;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.net.InetSocketAddress;
import java.net.StandardSocketOptions;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CompletableFuture;
import java.util.function.Consumer;

/**
 * Loopback bandwidth of the tcp transport for one request's worth of KV at several page sizes, next to one raw
 * socket stream of the same bytes and a memcpy, all measured in the same run and the same JVM.
 *
 * <ul>
 *   <li><b>tcp transport</b>: a full push — BEGIN (token, epochs, bounds checked), WRITE frames, END/ACK — from a
 *       source pool into a destination pool; both fully scattered (source and destination blocks are two random
 *       permutations, so no two pages coalesce: every page is its own run on both sides, the worst case).</li>
 *   <li><b>raw socket stream</b>: the same scattered source pages sent with gathering writes on one socket, read on
 *       the other end into one contiguous buffer with plain reads, then one byte back: no framing, no checks, no
 *       scatter on the receiving side.</li>
 *   <li><b>local (memcpy per page)</b>: the same plan applied with {@code MemorySegment.copy} page by page, and one
 *       contiguous memcpy of all the bytes, for scale.</li>
 * </ul>
 * Each configuration runs {@code warmup} discarded and {@code repeat} measured times, raw and transport
 * interleaved so drifting machine load hits both; the median is reported.
 */
public final class TransportBench {

    /** What to run; {@code connections}: one transport column per count, the first one is compared with the raw stream. */
    public record Options(long bytes, List<Integer> pageSizes, int warmup, int repeat, List<Integer> connections, boolean tls) { }

    /**
     * One page size's medians, in GB/s (10^9 bytes per second).
     *
     * @param transport    median per entry of {@link Options#connections()}
     * @param transportMin slowest measured pass per entry
     * @param tls          median over TLS ({@code transfer.tcp.tls}) with the first entry's connections, or null when not run
     */
    public record Result(int pageBytes, long pages, List<Double> transport, double raw, double localCopy, List<Double> transportMin,
                         double rawMin, Double tls) {
        /** Single-connection transport against the single raw stream. */
        public double ratio() {
            return transport.get(0) / raw;
        }
    }

    /** Same offer size as the transport's (Io.WINDOW_BYTES): the baseline gets the same help, it is not a straw man. */
    private static final long RAW_WINDOW = Long.getLong("orbitkv.bench.raw-window", 256L << 10);
    private static final byte[] KEY = "orbitkv-bench-transport-key".getBytes(StandardCharsets.UTF_8);

    private final Options options;
    private final Consumer<String> out;

    /** The TLS settings of the TLS column (a development CA and certificate made for the run), or null. */
    private final io.orbitkv.pd.transport.tcp.TcpTls tls;

    public TransportBench(Options options, Consumer<String> out) {
        this.options = options;
        this.out = out;
        if (options.tls()) {
            try {
                java.nio.file.Path dir = java.nio.file.Files.createTempDirectory("orbitkv-bench-tls");
                io.orbitkv.pd.broker.TlsMaterial m = io.orbitkv.pd.broker.TlsMaterial.generate(dir, "bench-tls-secret");
                this.tls = new io.orbitkv.pd.transport.tcp.TcpTls(m.keystore(), m.password(), m.truststore(), m.password());
            } catch (java.io.IOException e) {
                throw new java.io.UncheckedIOException(e);
            }
        } else {
            this.tls = null;
        }
    }

    /** One contiguous memcpy of {@code bytes}, median GB/s. */
    public double memcpy() {
        try (Arena arena = Arena.ofConfined()) {
            MemorySegment a = arena.allocate(options.bytes(), 4096);
            MemorySegment b = arena.allocate(options.bytes(), 4096);
            a.fill((byte) 1);
            b.fill((byte) 2);
            double[] gbps = new double[options.warmup() + options.repeat()];
            for (int i = 0; i < gbps.length; i++) {
                long t0 = System.nanoTime();
                MemorySegment.copy(a, 0, b, 0, options.bytes());
                gbps[i] = options.bytes() / (double) (System.nanoTime() - t0);
            }
            return median(Arrays.copyOfRange(gbps, options.warmup(), gbps.length));
        }
    }

    public Result run(int pageBytes) throws Exception {
        int blocks = Math.toIntExact(options.bytes() / pageBytes);
        KvGeometry g = new KvGeometry(1, KvSplit.FUSED, 16, 1, 1, Dtype.UNKNOWN, pageBytes, blocks);
        Random rnd = new Random(pageBytes);
        int[] srcBlocks = PageData.permutation(blocks, rnd);
        int[] dstBlocks = PageData.permutation(blocks, rnd);
        List<BlockRun> srcRuns = BlockRuns.fromBlocks(srcBlocks);
        List<BlockRun> dstRuns = BlockRuns.fromBlocks(dstBlocks);
        TransferPlan plan = TransferPlan.build(g, srcRuns, g, dstRuns);
        try (HostKvPool src = HostKvPool.allocate(g); HostKvPool dst = HostKvPool.allocate(g); HostKvPool local = HostKvPool.allocate(g)) {
            PageData.fill(src.region(0));
            dst.region(0).fill((byte) 0x11);
            local.region(0).fill((byte) 0x11);
            OrderTokens tokens = new OrderTokens(KEY);
            PushGate gate = new PushGate("bench-decode", () -> 1, dst, tokens, Math.max(65_536, dstRuns.size()), 1024);
            TcpConfig cfg = TcpConfig.defaults();
            List<TcpTransport> senders = new ArrayList<>();
            TcpTransport tlsReceiver = null;
            try (TcpTransport receiver = TcpTransport.start(cfg, "bench-rx", gate); RawStream raw = new RawStream(options.bytes())) {
                for (int c : options.connections()) {
                    senders.add(TcpTransport.start(cfg.withConnections(c), "bench-tx-" + c, null));
                }
                PeerEndpoint tlsPeer = null;
                if (tls != null) {
                    // the same transport over TLS, to the same pool through the same gate, measured in the same passes
                    tlsReceiver = TcpTransport.start(cfg.withTls(tls), "bench-rx-tls", gate);
                    senders.add(TcpTransport.start(cfg.withConnections(options.connections().get(0)).withTls(tls), "bench-tx-tls", null));
                    tlsPeer = new PeerEndpoint("bench-decode", 1, "tcp", "127.0.0.1:" + tlsReceiver.localAddress().getPort(),
                            tlsReceiver.endpoint().orElseThrow().getAttributes());
                }
                // As a worker's registration announces it: the push uses every wire feature the receiver offers.
                PeerEndpoint peer = new PeerEndpoint("bench-decode", 1, "tcp", "127.0.0.1:" + receiver.localAddress().getPort(),
                        receiver.endpoint().orElseThrow().getAttributes());
                ByteBuffer[] pages = new ByteBuffer[blocks];
                for (int i = 0; i < blocks; i++) {
                    pages[i] = src.page(0, srcBlocks[i]).asByteBuffer();
                }
                int n = options.warmup() + options.repeat();
                int k = senders.size();
                double[][] t = new double[k][n];
                double[] r = new double[n];
                double[] l = new double[n];
                int attempt = 0;
                for (int i = 0; i < n; i++) {
                    r[i] = raw.send(pages);
                    for (int s = 0; s < k; s++) {
                        if (i == n - 1) {
                            dst.region(0).fill((byte) 0x11); // the verified pass starts from a clean destination
                        }
                        String order = "bench-" + pageBytes + "/a" + (++attempt);
                        PushRequest req = new PushRequest("bench-" + pageBytes, order, attempt, "bench-lease", 1, "bench-decode", 1, dstRuns,
                                tokens.sign(order, 1, "bench-decode", 1, dstRuns), 0, "bench");
                        TransferResult res = senders.get(s).push(req, src, plan, tlsPeer != null && s == k - 1 ? tlsPeer : peer).result().get();
                        if (res.bytes() != options.bytes()) {
                            throw new IllegalStateException("transport acknowledged " + res.bytes() + " of " + options.bytes() + " bytes");
                        }
                        t[s][i] = res.bytes() / (double) res.durationNanos();
                    }
                    if (i == n - 1) {
                        local.region(0).fill((byte) 0x11);
                    }
                    l[i] = localCopy(plan, src, local);
                    if (i == n - 1) {
                        verify(src, dst, plan);
                        verify(src, local, plan);
                    }
                }
                List<Double> med = new ArrayList<>();
                List<Double> min = new ArrayList<>();
                int plain = tlsPeer == null ? k : k - 1;
                for (int s = 0; s < plain; s++) {
                    double[] m = Arrays.copyOfRange(t[s], options.warmup(), n);
                    med.add(median(m));
                    min.add(Arrays.stream(m).min().orElse(0));
                }
                double[] rm = Arrays.copyOfRange(r, options.warmup(), n);
                return new Result(pageBytes, blocks, med, median(rm), median(Arrays.copyOfRange(l, options.warmup(), n)), min,
                        Arrays.stream(rm).min().orElse(0), tlsPeer == null ? null : median(Arrays.copyOfRange(t[k - 1], options.warmup(), n)));
            } finally {
                senders.forEach(TcpTransport::close);
                if (tlsReceiver != null) {
                    tlsReceiver.close();
                }
            }
        }
    }

    private static double localCopy(TransferPlan plan, HostKvPool src, HostKvPool dst) {
        MemorySegment s = src.region(0);
        MemorySegment d = dst.region(0);
        long t0 = System.nanoTime();
        for (int i = 0; i < plan.spans(); i++) {
            MemorySegment.copy(s, plan.spanSourceOffset(i), d, plan.spanDestOffset(i), plan.spanLength(i));
        }
        return plan.totalBytes() / (double) (System.nanoTime() - t0);
    }

    /** Every destination page equals its source page: the numbers are for bytes that really arrived. */
    private static void verify(HostKvPool src, HostKvPool dst, TransferPlan plan) {
        for (int p = 0; p < plan.pairRuns(); p++) {
            for (int i = 0; i < plan.pairCount(p); i++) {
                if (src.page(0, plan.pairSource(p) + i).mismatch(dst.page(0, plan.pairDest(p) + i)) != -1) {
                    throw new IllegalStateException("page " + (plan.pairDest(p) + i) + " arrived corrupted");
                }
            }
        }
    }



    static double median(double[] v) {
        double[] s = v.clone();
        Arrays.sort(s);
        return s.length % 2 == 1 ? s[s.length / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
    }

    /**
     * One plain socket stream: the receiver reads everything into one contiguous buffer and answers one byte; the
     * sender writes the pages with gathering writes (up to 1,024 buffers per call, as the transport does).
     */
    private static final class RawStream implements AutoCloseable {
        private final ServerSocketChannel server;
        private final SocketChannel client;
        private final SocketChannel accepted;
        private final Arena arena = Arena.ofShared();
        private final MemorySegment sink;
        private final long bytes;

        RawStream(long bytes) throws IOException {
            this.bytes = bytes;
            this.sink = arena.allocate(bytes, 4096);
            server = ServerSocketChannel.open().bind(new InetSocketAddress("127.0.0.1", 0));
            client = SocketChannel.open(server.getLocalAddress());
            accepted = server.accept();
            client.setOption(StandardSocketOptions.TCP_NODELAY, true);
            accepted.setOption(StandardSocketOptions.TCP_NODELAY, true);
        }

        /** GB/s for one pass of all pages. */
        double send(ByteBuffer[] pages) throws Exception {
            for (ByteBuffer p : pages) {
                p.clear();
            }
            CompletableFuture<Void> rx = CompletableFuture.runAsync(() -> {
                try {
                    ByteBuffer dst = sink.asByteBuffer();
                    while (dst.hasRemaining()) {
                        if (accepted.read(dst) < 0) {
                            throw new IOException("raw stream closed early");
                        }
                    }
                    accepted.write(ByteBuffer.wrap(new byte[] {1}));
                } catch (IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            }, r -> Thread.ofPlatform().daemon().name("raw-rx").start(r));
            long t0 = System.nanoTime();
            int i = 0;
            while (i < pages.length) {
                // Offer about RAW_WINDOW bytes per call: NIO re-pins every buffer it is given on each call, so
                // handing it thousands of pages at once makes the plain stream slower, not faster.
                int n = 1;
                for (long sum = pages[i].remaining(); i + n < pages.length && n < 1024 && sum < RAW_WINDOW; n++) {
                    sum += pages[i + n].remaining();
                }
                client.write(pages, i, n);
                while (i < pages.length && !pages[i].hasRemaining()) {
                    i++;
                }
            }
            ByteBuffer ack = ByteBuffer.allocate(1);
            while (ack.hasRemaining()) {
                if (client.read(ack) < 0) {
                    throw new IOException("raw stream closed before the ack");
                }
            }
            long ns = System.nanoTime() - t0;
            rx.get();
            return bytes / (double) ns;
        }

        @Override
        public void close() throws IOException {
            client.close();
            accepted.close();
            server.close();
            arena.close();
        }
    }
}
