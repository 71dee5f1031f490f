package io.orbitkv.pd.worker.internal;

import static io.orbitkv.pd.kv.BlockRuns.run;
import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvTestData;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.metrics.ComponentMetrics;
import io.orbitkv.pd.transport.PeerEndpoint;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.Pushes;
import io.orbitkv.pd.transport.local.LocalFabric;
import io.orbitkv.pd.transport.local.LocalTransport;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The receiving side's meters: receive duration per transport, refused pushes by reason, as Prometheus shows them. */
class WorkerMetricsTest {

    private final KvGeometry g = KvTestData.small(2, 64);
    private final List<BlockRun> srcRuns = List.of(run(0, 4));
    private final List<BlockRun> dstRuns = List.of(run(8, 4));

    @Test
    void aReceiverCountsWhatItTookAndWhatItRefused() {
        try (ComponentMetrics m = ComponentMetrics.create("worker", "decode-0");
             HostKvPool src = HostKvPool.allocate(g);
             HostKvPool dst = HostKvPool.allocate(g)) {
            PushGate gate = new PushGate("decode-0", () -> 5, dst, Pushes.TOKENS, 1024, 1000);
            new WorkerMetrics(m.registry()).receiving(gate);
            LocalFabric fabric = new LocalFabric();
            try (LocalTransport receiver = new LocalTransport(fabric, "decode-0", gate);
                 LocalTransport sender = new LocalTransport(fabric, "prefill-0", null)) {
                PeerEndpoint peer = new PeerEndpoint("decode-0", 5, "local", "local:decode-0", null);
                TransferPlan plan = TransferPlan.build(g, srcRuns, g, dstRuns);
                PushRequest good = Pushes.signed("req-1", 1, "lease-1", 3, "decode-0", 5, dstRuns);
                sender.push(good, src, plan, peer).result().join();
                sender.push(Pushes.signed("req-2", 1, "lease-2", 1, "decode-0", 5, dstRuns), src, plan, peer).result().join();
                // Refused before any session opens: a forged token, then an old instance epoch.
                assertThatThrownBy(() -> sender.push(Pushes.forged(good), src, plan, peer).result().join()).hasMessageContaining("does not verify");
                assertThatThrownBy(() -> sender.push(Pushes.signed("req-3", 1, "lease-3", 1, "decode-0", 4, dstRuns), src, plan, peer).result().join())
                        .hasMessageContaining("instance epoch 4");
            }
            String text = m.scrape();
            assertThat(text)
                    .contains("orbitkv_transfer_duration_seconds_count{component=\"worker\",instance=\"decode-0\",side=\"receive\",transport=\"local\"} 2")
                    .contains("orbitkv_worker_pushes_refused_total{component=\"worker\",instance=\"decode-0\",reason=\"UNAUTHORIZED\"} 1")
                    .contains("orbitkv_worker_pushes_refused_total{component=\"worker\",instance=\"decode-0\",reason=\"STALE_EPOCH\"} 1")
                    .contains("orbitkv_worker_pushes_refused_total{component=\"worker\",instance=\"decode-0\",reason=\"OUT_OF_RANGE\"} 0");
        }
    }

    @Test
    void theEngineApisRefusalsAreCountedByCodeFromTheStart() {
        try (ComponentMetrics m = ComponentMetrics.create("worker", "decode-0")) {
            java.util.Map<String, java.util.concurrent.atomic.AtomicLong> refusals = new java.util.concurrent.ConcurrentHashMap<>();
            new WorkerMetrics(m.registry()).engineApi(refusals);
            assertThat(m.scrape()).contains("orbitkv_worker_api_refused_total{code=\"bad_request\",component=\"worker\",instance=\"decode-0\"} 0");
            refusals.put("bad_request", new java.util.concurrent.atomic.AtomicLong(3));
            refusals.put("fenced", new java.util.concurrent.atomic.AtomicLong(1));
            assertThat(m.scrape()).contains("orbitkv_worker_api_refused_total{code=\"bad_request\",component=\"worker\",instance=\"decode-0\"} 3")
                    .contains("orbitkv_worker_api_refused_total{code=\"fenced\",component=\"worker\",instance=\"decode-0\"} 1")
                    .contains("orbitkv_worker_api_refused_total{code=\"too_large\",component=\"worker\",instance=\"decode-0\"} 0");
        }
    }
}
