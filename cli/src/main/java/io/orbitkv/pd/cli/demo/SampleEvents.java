package io.orbitkv.pd.cli.demo;

import io.orbitkv.pd.events.AbortTransfer;
import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.CancelRequested;
import io.orbitkv.pd.events.DeadLetter;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.DecodeCompleted;
import io.orbitkv.pd.events.DecodeReady;
import io.orbitkv.pd.events.DecodeRejected;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.EngineEpochChanged;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.events.FailurePolicy;
import io.orbitkv.pd.events.InputRejected;
import io.orbitkv.pd.events.KvLayout;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.events.LeaseHeartbeat;
import io.orbitkv.pd.events.MemoryRegion;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.PhaseTimings;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.events.PrefillFailed;
import io.orbitkv.pd.events.RecomputeDecided;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.Tick;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferFailed;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.events.TransferStarted;
import io.orbitkv.pd.events.TransportEndpoint;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * One hand-written story that uses every event type once or more: two engines register, one request flows
 * through prefill, transfer and decode, a second is cancelled after a failed transfer, and one record is
 * dead-lettered. The foundation demo sends it through the real serdes and a real broker.
 */
public final class SampleEvents {

    /** Where an event goes and what it is. */
    public enum Kind { ENGINE, REQUEST_EVENT, DECISION, ENGINE_COMMAND, DEAD_LETTER }

    /** One event to send, with its key and timestamp. */
    public record Sample(Kind kind, String key, long timestampMs, Object value) { }

    private SampleEvents() { }

    /** An 8B-model-shaped layout: 32 layers, 8 KV heads, head dim 128, bf16, 16-token blocks = 32 KiB pages. */
    public static KvLayout layout8b() {
        return KvLayout.newBuilder().setNumLayers(32).setKvSplit(KvSplit.SEPARATE).setBlockSizeTokens(16)
                .setNumKvHeads(8).setHeadDim(128).setDtype(Dtype.BF16).setTpRank(0).setTpSize(1)
                .setPageBytes(16 * 8 * 128 * 2).setNumBlocks(4096).build();
    }

    public static List<Sample> story(long t0) {
        List<Sample> out = new ArrayList<>();
        KvLayout layout = layout8b();
        out.add(new Sample(Kind.ENGINE, "prefill-0", t0, engine("prefill-0", EngineRole.PREFILL, 7001, layout, t0)));
        out.add(new Sample(Kind.ENGINE, "decode-0", t0 + 1, engine("decode-0", EngineRole.DECODE, 7002, layout, t0 + 1)));

        String r1 = "req-0001";
        List<BlockRun> src = List.of(run(0, 60), run(64, 3));
        List<BlockRun> dst = List.of(run(128, 63));
        out.add(req(r1, "proxy-0", t0 + 2, RequestAdmitted.newBuilder().setModel("llama-3-8b").setPromptTokens(1000)
                .setMaxTokens(64).setPrefillEngineId("prefill-0").setDecodeEngineId("decode-0")
                .setFailurePolicy(FailurePolicy.RECOMPUTE).setDeadlineMs(t0 + 30_000).build()));
        out.add(req(r1, "engine:decode-0", t0 + 3, DecodeReady.newBuilder().setEngineId("decode-0").setInstanceEpoch(1)
                .setLeaseId("lease-" + r1).setLeaseEpoch(1).setDestBlocks(dst).setLeaseDeadlineMs(t0 + 30_003).build()));
        out.add(req(r1, "engine:prefill-0", t0 + 40, PrefillCompleted.newBuilder().setEngineId("prefill-0").setInstanceEpoch(1)
                .setSourceBlocks(src).setNumTokens(1000).setFirstToken(791).build()));
        TransferOrder order = TransferOrder.newBuilder().setOrderId(r1 + "/a1").setAttempt(1)
                .setSourceEngineId("prefill-0").setSourceInstanceEpoch(1).setDestEngineId("decode-0").setDestInstanceEpoch(1)
                .setSourceBlocks(src).setDestBlocks(dst).setLayout(layout).setLeaseId("lease-" + r1).setLeaseEpoch(1)
                .setAuthToken(ByteBuffer.wrap(new byte[32])).setDeadlineMs(t0 + 10_040).setTransport("tcp").build();
        out.add(decision(r1, 0, t0 + 41, order));
        out.add(command("prefill-0", r1, 0, t0 + 41, order));
        out.add(req(r1, "worker:prefill-0", t0 + 42, TransferStarted.newBuilder().setOrderId(r1 + "/a1").setAttempt(1)
                .setWorkerId("worker-prefill-0").setTransport("tcp").build()));
        out.add(req(r1, "engine:decode-0", t0 + 45, LeaseHeartbeat.newBuilder().setEngineId("decode-0").setLeaseId("lease-" + r1)
                .setLeaseEpoch(1).setExtendToMs(t0 + 30_045).build()));
        long bytes = 63L * 32 * 2 * layout.getPageBytes();
        out.add(req(r1, "worker:prefill-0", t0 + 60, TransferCompleted.newBuilder().setOrderId(r1 + "/a1").setAttempt(1)
                .setWorkerId("worker-prefill-0").setBytes(bytes).setDurationUs(17_800).build()));
        out.add(decision(r1, 1, t0 + 61, KvReady.newBuilder().setDecodeEngineId("decode-0").setOrderId(r1 + "/a1").setBytes(bytes).build()));
        out.add(decision(r1, 2, t0 + 61, release("prefill-0", ReleaseSide.PREFILL, src, null, "kv delivered")));
        out.add(req(r1, "engine:decode-0", t0 + 700, DecodeCompleted.newBuilder().setEngineId("decode-0").setOutputTokens(64).build()));
        out.add(decision(r1, 3, t0 + 701, release("decode-0", ReleaseSide.DECODE, dst, 1L, "decode finished")));
        out.add(decision(r1, 4, t0 + 701, RequestOutcome.newBuilder().setKind(OutcomeKind.COMPLETED).setReason("decode finished")
                .setAttempts(1).setPrefillEngineId("prefill-0").setDecodeEngineId("decode-0").setKvBytes(bytes)
                .setTimings(PhaseTimings.newBuilder().setAdmittedMs(t0 + 2).setDecodeReadyMs(t0 + 3).setPrefillCompletedMs(t0 + 40)
                        .setOrderIssuedMs(t0 + 41).setTransferCompletedMs(t0 + 60).setFinishedMs(t0 + 701).build()).build()));

        String r2 = "req-0002";
        out.add(req(r2, "proxy-0", t0 + 100, RequestAdmitted.newBuilder().setModel("llama-3-8b").setPromptTokens(200)
                .setMaxTokens(16).setPrefillEngineId("prefill-0").setDecodeEngineId("decode-0").build()));
        out.add(req(r2, "engine:decode-0", t0 + 101, DecodeRejected.newBuilder().setEngineId("decode-0").setInstanceEpoch(1)
                .setReason("no free pages: 0 of 4096 blocks available").build()));
        out.add(req(r2, "engine:prefill-0", t0 + 102, PrefillFailed.newBuilder().setEngineId("prefill-0").setInstanceEpoch(1)
                .setReason("prompt longer than max_model_len").setRetriable(false).build()));
        out.add(req(r2, "worker:prefill-0", t0 + 103, TransferFailed.newBuilder().setOrderId(r2 + "/a1").setAttempt(1)
                .setWorkerId("worker-prefill-0").setReason("connection refused by decode-0 worker").setRetriable(true).build()));
        out.add(decision(r2, 0, t0 + 104, AbortTransfer.newBuilder().setOrderId(r2 + "/a1").setAttempt(1)
                .setSourceEngineId("prefill-0").setDestEngineId("decode-0").setReason("request cancelled").build()));
        out.add(decision(r2, 1, t0 + 104, RecomputeDecided.newBuilder().setDecodeEngineId("decode-0").setReason("transfer retries exhausted").build()));
        out.add(req(r2, "proxy-0", t0 + 105, CancelRequested.newBuilder().setRequestedBy("proxy-0").setReason("client disconnected").build()));
        out.add(decision(r2, 2, t0 + 106, InputRejected.newBuilder().setEventId(r2 + "/DecodeReady/late").setEventType("DecodeReady")
                .setState("CANCELLED").setReason("request already ended").build()));
        out.add(decision(r2, 3, t0 + 106, RequestOutcome.newBuilder().setKind(OutcomeKind.CANCELLED).setReason("client disconnected")
                .setTimings(PhaseTimings.newBuilder().setAdmittedMs(t0 + 100).setFinishedMs(t0 + 106).build()).build()));
        out.add(req(r2, "decider-epoch-watch", t0 + 107, EngineEpochChanged.newBuilder().setEngineId("prefill-0").setInstanceEpoch(2).build()));
        out.add(req("tick/0", "ticker", t0 + 1000, Tick.newBuilder().setPartition(0).build()));
        out.add(new Sample(Kind.DEAD_LETTER, "req-bad", t0 + 1001, DeadLetter.newBuilder().setComponent("decider")
                .setTopic("orbitkv.request-events").setPartition(3).setOffset(42).setOriginalKey(ByteBuffer.wrap("req-bad".getBytes()))
                .setOriginalValue(ByteBuffer.wrap(new byte[] {0x13, 0x37})).setReason("not Avro single-object encoding")
                .setErrorType("UNDECODABLE").setDeadLetteredAtMs(t0 + 1001).build()));
        return out;
    }

    private static EngineRegistration engine(String id, EngineRole role, int port, KvLayout layout, long t) {
        List<MemoryRegion> regions = new ArrayList<>();
        long regionBytes = (long) layout.getPageBytes() * layout.getNumBlocks();
        for (int l = 0; l < 2; l++) {
            for (String part : List.of("K", "V")) {
                regions.add(MemoryRegion.newBuilder().setLayer(l).setPart(part)
                        .setBaseAddress(0x7f00_0000_0000L + (2L * l + (part.equals("V") ? 1 : 0)) * regionBytes)
                        .setLengthBytes(regionBytes).setLocation("host").build());
            }
        }
        return EngineRegistration.newBuilder().setEngineId(id).setRole(role).setInstanceEpoch(1).setModel("llama-3-8b")
                .setHttpUrl("http://127.0.0.1:" + (port + 1000))
                .setEndpoints(List.of(TransportEndpoint.newBuilder().setTransport("tcp").setAddress("127.0.0.1:" + port)
                        .setAttributes(Map.of("connections", "2")).build()))
                .setLayout(layout).setRegions(regions).setRegisteredAtMs(t).build();
    }

    private static BlockRun run(int start, int count) {
        return BlockRun.newBuilder().setStart(start).setCount(count).build();
    }

    private static ReleaseDecided release(String engine, ReleaseSide side, List<BlockRun> blocks, Long leaseEpoch, String reason) {
        return ReleaseDecided.newBuilder().setEngineId(engine).setSide(side).setBlocks(blocks)
                .setLeaseId(leaseEpoch == null ? null : "lease-req-0001").setLeaseEpoch(leaseEpoch).setReason(reason).build();
    }

    private static Sample req(String requestId, String source, long t, Object payload) {
        String type = payload.getClass().getSimpleName();
        return new Sample(Kind.REQUEST_EVENT, requestId, t, RequestEvent.newBuilder().setRequestId(requestId)
                .setEventId(requestId + "/" + type).setSource(source).setEventTimeMs(t).setPayload(payload).build());
    }

    private static Sample decision(String requestId, int seq, long t, Object payload) {
        return new Sample(Kind.DECISION, requestId, t, decisionOf(requestId, seq, t, payload));
    }

    private static Sample command(String engineId, String requestId, int seq, long t, Object payload) {
        return new Sample(Kind.ENGINE_COMMAND, engineId, t, decisionOf(requestId, seq, t, payload));
    }

    private static Decision decisionOf(String requestId, int seq, long t, Object payload) {
        return Decision.newBuilder().setRequestId(requestId).setDecisionId(requestId + "/" + seq).setSeq(seq)
                .setStreamTimeMs(t).setPayload(payload).build();
    }
}
