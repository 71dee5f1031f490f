package io.orbitkv.pd.transport.tcp;

import static io.orbitkv.pd.kv.BlockRuns.run;
import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.broker.TlsMaterial;
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
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletionException;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The tcp transport over TLS (transfer.tcp.tls): pages arrive intact over one and several connections; a sender that
 * does not trust the receiver's certificate, and a plaintext sender, are refused before any page moves.
 */
class TcpTlsIT {

    private static final byte SENTINEL = (byte) 0xEE;
    private final KvGeometry g = KvTestData.small(8, 160);
    private final HostKvPool src = HostKvPool.allocate(g);
    private final HostKvPool dst = HostKvPool.allocate(g);
    private final AtomicLong epoch = new AtomicLong(5);
    private final List<AutoCloseable> closeables = new ArrayList<>();

    @TempDir
    Path dir;

    @AfterEach
    void tearDown() throws Exception {
        for (int i = closeables.size() - 1; i >= 0; i--) {
            closeables.get(i).close();
        }
        src.close();
        dst.close();
    }

    private TcpTls tls(String name) {
        TlsMaterial m = TlsMaterial.generate(dir.resolve(name), "tcp-tls-secret");
        return new TcpTls(m.keystore(), m.password(), m.truststore(), m.password());
    }

    private TcpTransport start(TcpConfig c, String id, PushGate gate) {
        TcpTransport t = TcpTransport.start(c, id, gate);
        closeables.add(t);
        return t;
    }

    private static PeerEndpoint peer(TcpTransport t) {
        return new PeerEndpoint("decode-0", 5, "tcp", "127.0.0.1:" + t.localAddress().getPort(), t.endpoint().orElseThrow().getAttributes());
    }

    private static List<BlockRun> scattered(int blocks, int from) {
        List<BlockRun> out = new ArrayList<>();
        for (int i = 0; i < blocks; i++) {
            out.add(run(from + 2 * i, 1));
        }
        return out;
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
    void pagesCrossTlsIntactAndOnlyATrustingTlsSenderGetsIn() {
        KvTestData.fill(src, 3);
        TcpTls ours = tls("ours");
        TcpConfig config = TcpConfig.defaults().withIoTimeout(Duration.ofSeconds(5)).withTls(ours);
        PushGate gate = new PushGate("decode-0", epoch::get, dst, Pushes.TOKENS, 65536, 1000);
        TcpTransport receiver = start(config, "rx", gate);
        for (int connections : new int[] {1, 3}) {
            KvTestData.sentinel(dst, SENTINEL);
            List<BlockRun> dstRuns = scattered(64, 1 + connections);
            TransferPlan plan = TransferPlan.build(g, List.of(run(7, 64)), g, dstRuns);
            PushRequest r = Pushes.signed("tls-" + connections, 1, "lease-1", 1, "decode-0", 5, dstRuns);
            TransferResult res = start(config.withConnections(connections), "tx", null).push(r, src, plan, peer(receiver)).result().join();
            assertThat(res.bytes()).isEqualTo(32L << 20);
            assertThat(KvTestData.verify(src, dst, plan, SENTINEL)).isNull();
        }
        assertThat(gate.acceptedPushes()).as("one a stripe").isEqualTo(1 + 3);

        // A sender trusting another CA: its handshake fails, nothing is admitted.
        List<BlockRun> dstRuns = scattered(8, 3);
        TransferPlan plan = TransferPlan.build(g, List.of(run(7, 8)), g, dstRuns);
        TcpConfig otherCa = TcpConfig.defaults().withIoTimeout(Duration.ofSeconds(5)).withTls(tls("theirs"));
        TransferException untrusted = failure(start(otherCa, "tx-other", null)
                .push(Pushes.signed("tls-untrusted", 1, "lease-1", 1, "decode-0", 5, dstRuns), src, plan, peer(receiver)));
        assertThat(untrusted.kind()).isEqualTo(TransferError.CONNECTION_LOST);
        assertThat(untrusted.getMessage()).contains("TLS handshake with").contains("failed");
        // A plaintext sender: the receiver speaks only TLS.
        failure(start(TcpConfig.defaults().withIoTimeout(Duration.ofSeconds(5)), "tx-plain", null)
                .push(Pushes.signed("tls-plain", 1, "lease-1", 1, "decode-0", 5, dstRuns), src, plan, peer(receiver)));
        assertThat(gate.acceptedPushes()).as("nothing admitted from the refused senders").isEqualTo(1 + 3);
    }
}
