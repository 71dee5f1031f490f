package io.orbitkv.pd.decider;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.CancelRequested;
import io.orbitkv.pd.events.DecodeCompleted;
import io.orbitkv.pd.events.DecodeReady;
import io.orbitkv.pd.events.DecodeRejected;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.EngineEpochChanged;
import io.orbitkv.pd.events.FailurePolicy;
import io.orbitkv.pd.events.KvLayout;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.events.LeaseHeartbeat;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.events.PrefillFailed;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.Tick;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferFailed;
import io.orbitkv.pd.events.TransferStarted;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.atomic.AtomicLong;

/** Builders of the facts a request goes through, for decider tests. Engines "prefill-0" and "decode-0" by default. */
public final class Facts {

    public static final String PREFILL = "prefill-0";
    public static final String DECODE = "decode-0";
    private static final AtomicLong IDS = new AtomicLong();

    private Facts() { }

    public static DeciderPolicy policy() {
        return DeciderPolicy.defaults("test-auth-key-0123456789".getBytes(StandardCharsets.UTF_8));
    }

    /** Short timeouts for timeout tests; orders wait for both sides (the classic match; order-ahead has its own tests). */
    public static DeciderPolicy fastPolicy() {
        DeciderPolicy d = policy();
        return new DeciderPolicy(Duration.ofSeconds(2), Duration.ofSeconds(2), Duration.ofSeconds(1), Duration.ofSeconds(3),
                Duration.ofSeconds(1), Duration.ofMillis(500), Duration.ofSeconds(30), 3, Duration.ofMillis(100), Duration.ofSeconds(1),
                1024, 64, d.authKey(), false);
    }

    public static KvLayout layout() {
        return KvLayout.newBuilder().setNumLayers(4).setKvSplit(KvSplit.SEPARATE).setBlockSizeTokens(16).setNumKvHeads(8)
                .setHeadDim(128).setDtype(Dtype.BF16).setTpRank(0).setTpSize(1).setPageBytes(16 * 8 * 128 * 2).setNumBlocks(1024).build();
    }

    public static BlockRun run(int start, int count) {
        return BlockRun.newBuilder().setStart(start).setCount(count).build();
    }

    public static RequestEvent event(String req, Object payload) {
        return RequestEvent.newBuilder().setRequestId(req).setEventId(req + "/" + payload.getClass().getSimpleName() + "/" + IDS.incrementAndGet())
                .setSource("test").setEventTimeMs(0).setPayload(payload).build();
    }

    public static RequestEvent admitted(String req) {
        return admitted(req, FailurePolicy.FAIL);
    }

    public static RequestEvent admitted(String req, FailurePolicy policy) {
        return event(req, RequestAdmitted.newBuilder().setModel("m").setPromptTokens(100).setMaxTokens(8).setPrefillEngineId(PREFILL)
                .setDecodeEngineId(DECODE).setFailurePolicy(policy).build());
    }

    public static RequestEvent prefillCompleted(String req, BlockRun... runs) {
        return prefillCompleted(req, 1, layout(), runs);
    }

    public static RequestEvent prefillCompleted(String req, long epoch, KvLayout layout, BlockRun... runs) {
        return event(req, PrefillCompleted.newBuilder().setEngineId(PREFILL).setInstanceEpoch(epoch).setSourceBlocks(List.of(runs))
                .setNumTokens(100).setLayout(layout).build());
    }

    public static RequestEvent prefillFailed(String req) {
        return event(req, PrefillFailed.newBuilder().setEngineId(PREFILL).setInstanceEpoch(1).setReason("oom").build());
    }

    public static RequestEvent decodeReady(String req, BlockRun... runs) {
        return decodeReady(req, 1, layout(), runs);
    }

    public static RequestEvent decodeReady(String req, long leaseEpoch, KvLayout layout, BlockRun... runs) {
        return event(req, DecodeReady.newBuilder().setEngineId(DECODE).setInstanceEpoch(1).setLeaseId("lease-" + req)
                .setLeaseEpoch(leaseEpoch).setDestBlocks(List.of(runs)).setLeaseDeadlineMs(0).setLayout(layout).build());
    }

    public static RequestEvent decodeRejected(String req) {
        return event(req, DecodeRejected.newBuilder().setEngineId(DECODE).setInstanceEpoch(1).setReason("no free pages").build());
    }

    public static RequestEvent heartbeat(String req, long leaseEpoch, long extendTo) {
        return event(req, LeaseHeartbeat.newBuilder().setEngineId(DECODE).setLeaseId("lease-" + req).setLeaseEpoch(leaseEpoch)
                .setExtendToMs(extendTo).build());
    }

    public static RequestEvent started(String req, int attempt) {
        return event(req, TransferStarted.newBuilder().setOrderId(req + "/a" + attempt).setAttempt(attempt).setWorkerId("w")
                .setTransport("tcp").build());
    }

    public static RequestEvent completed(String req, int attempt) {
        return event(req, TransferCompleted.newBuilder().setOrderId(req + "/a" + attempt).setAttempt(attempt).setWorkerId("w")
                .setBytes(1 << 20).setDurationUs(500).build());
    }

    public static RequestEvent failed(String req, int attempt, boolean retriable) {
        return event(req, TransferFailed.newBuilder().setOrderId(req + "/a" + attempt).setAttempt(attempt).setWorkerId("w")
                .setReason("connection reset").setRetriable(retriable).build());
    }

    public static RequestEvent decodeCompleted(String req) {
        return event(req, DecodeCompleted.newBuilder().setEngineId(DECODE).setOutputTokens(8).build());
    }

    public static RequestEvent cancel(String req) {
        return event(req, CancelRequested.newBuilder().setRequestedBy("proxy").setReason("client disconnected").build());
    }

    public static RequestEvent epochChanged(String req, String engine, long epoch) {
        return event(req, EngineEpochChanged.newBuilder().setEngineId(engine).setInstanceEpoch(epoch).setDeregistered(false).build());
    }

    public static RequestEvent tick(int partition) {
        return event("tick/" + partition, Tick.newBuilder().setPartition(partition).build());
    }
}
