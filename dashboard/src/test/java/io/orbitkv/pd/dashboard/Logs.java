package io.orbitkv.pd.dashboard;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.InputRejected;
import io.orbitkv.pd.events.KvLayout;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.PhaseTimings;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferFailed;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.events.TransferStarted;
import java.nio.ByteBuffer;
import java.util.List;

/** Builders of the facts and decisions the dashboard reads, in the shapes the decider and the workers write them. */
final class Logs {

    static final String PREFILL = "prefill-0";
    static final String DECODE = "decode-0";

    private Logs() { }

    static KvLayout layout() {
        return KvLayout.newBuilder().setNumLayers(32).setKvSplit(KvSplit.SEPARATE).setBlockSizeTokens(16).setNumKvHeads(8)
                .setHeadDim(128).setDtype(Dtype.BF16).setTpRank(0).setTpSize(1).setPageBytes(32768).setNumBlocks(8192).build();
    }

    static RequestEvent event(String req, String kind, Object payload, long at) {
        return RequestEvent.newBuilder().setRequestId(req).setEventId(req + "/" + kind).setSource("test").setEventTimeMs(at).setPayload(payload).build();
    }

    static RequestEvent admitted(String req, String prefill, String decode, long at) {
        return event(req, "adm", RequestAdmitted.newBuilder().setModel("m").setPromptTokens(128).setMaxTokens(16).setPrefillEngineId(prefill)
                .setDecodeEngineId(decode).build(), at);
    }

    static RequestEvent started(String req, int attempt, long at) {
        return event(req, "ts" + attempt, TransferStarted.newBuilder().setOrderId(req + "/a" + attempt).setAttempt(attempt).setWorkerId("w")
                .setTransport("tcp").build(), at);
    }

    static RequestEvent completed(String req, int attempt, long bytes, long durationUs, long at) {
        return event(req, "tc" + attempt, TransferCompleted.newBuilder().setOrderId(req + "/a" + attempt).setAttempt(attempt).setWorkerId("w")
                .setBytes(bytes).setDurationUs(durationUs).build(), at);
    }

    static RequestEvent failed(String req, int attempt, String reason, boolean retriable, long at) {
        return event(req, "tf" + attempt, TransferFailed.newBuilder().setOrderId(req + "/a" + attempt).setAttempt(attempt).setWorkerId("w")
                .setReason(reason).setRetriable(retriable).build(), at);
    }

    static Decision decision(String req, int seq, long streamTime, Object payload) {
        return Decision.newBuilder().setRequestId(req).setDecisionId(req + "/" + seq).setSeq(seq).setStreamTimeMs(streamTime)
                .setCauseEventId(req + "/pc").setPayload(payload).build();
    }

    static Decision order(String req, int attempt, String prefill, String decode, long streamTime) {
        List<BlockRun> runs = List.of(BlockRun.newBuilder().setStart(0).setCount(8).build());
        return decision(req, attempt * 10, streamTime, TransferOrder.newBuilder().setOrderId(req + "/a" + attempt).setAttempt(attempt)
                .setSourceEngineId(prefill).setSourceInstanceEpoch(1).setDestEngineId(decode).setDestInstanceEpoch(1).setSourceBlocks(runs)
                .setDestBlocks(runs).setLayout(layout()).setLeaseId(req).setLeaseEpoch(1).setAuthToken(ByteBuffer.wrap(new byte[32]))
                .setDeadlineMs(streamTime + 10_000).setTransport("tcp").build());
    }

    /** An outcome with phase timings relative to {@code admitted}: prefill +5, decode ready +2, order +10, transfer done +10+handoff. */
    static Decision outcome(String req, OutcomeKind kind, String reason, String prefill, String decode, long admitted, Long handoffMs,
                            long finished, long kvBytes) {
        PhaseTimings.Builder t = PhaseTimings.newBuilder().setAdmittedMs(admitted).setPrefillCompletedMs(admitted + 5).setDecodeReadyMs(admitted + 2)
                .setFinishedMs(finished);
        if (handoffMs != null) {
            t.setOrderIssuedMs(admitted + 10).setTransferCompletedMs(admitted + 10 + handoffMs);
        }
        return decision(req, 99, finished, RequestOutcome.newBuilder().setKind(kind).setReason(reason).setAttempts(1).setPrefillEngineId(prefill)
                .setDecodeEngineId(decode).setKvBytes(kvBytes).setTimings(t.build()).build());
    }

    static Decision rejected(String req, long at) {
        return decision(req, 50, at, InputRejected.newBuilder().setEventId(req + "/x").setEventType("DecodeCompleted").setState("ADMITTED")
                .setReason("not ready").build());
    }
}
