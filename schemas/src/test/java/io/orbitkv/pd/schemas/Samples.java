package io.orbitkv.pd.schemas;

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
import io.orbitkv.pd.events.RequestAnswered;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.Tick;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferFailed;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.events.TransferStarted;
import io.orbitkv.pd.events.TransportEndpoint;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.avro.specific.SpecificRecord;

/**
 * Realistic instances of every top-level event, one per union branch of the envelopes, with optional fields set
 * (so their non-null branch is exercised too) and non-default enum symbols (so a default cannot hide a bug).
 */
public final class Samples {

    private Samples() {
    }

    public static KvLayout layout() {
        return KvLayout.newBuilder().setNumLayers(32).setKvSplit(KvSplit.SEPARATE).setBlockSizeTokens(16)
                .setNumKvHeads(8).setHeadDim(128).setDtype(Dtype.BF16).setTpRank(1).setTpSize(2)
                .setPageBytes(16 * 8 * 128 * 2).setNumBlocks(4096).build();
    }

    public static List<BlockRun> blocks(int... startCount) {
        List<BlockRun> out = new ArrayList<>();
        for (int i = 0; i < startCount.length; i += 2) {
            out.add(new BlockRun(startCount[i], startCount[i + 1]));
        }
        return out;
    }

    public static EngineRegistration engineRegistration() {
        return EngineRegistration.newBuilder().setEngineId("prefill-0").setRole(EngineRole.PREFILL).setInstanceEpoch(7)
                .setModel("meta-llama/Llama-3.1-8B-Instruct").setHttpUrl("http://10.0.0.5:8000")
                .setEndpoints(List.of(
                        new TransportEndpoint("tcp", "10.0.0.5:7400", Map.of("nic", "eth0", "mtu", "9000")),
                        new TransportEndpoint("cuda", "node-3", Map.of())))
                .setLayout(layout())
                .setRegions(List.of(
                        new MemoryRegion(0, "K", 0x7f00_0000_0000L, 1L << 30, "cuda:0", ByteBuffer.wrap(new byte[] {1, 2, 3, 4})),
                        new MemoryRegion(0, "V", 0x7f00_4000_0000L, 1L << 30, "host", null)))
                .setRegisteredAtMs(1_733_000_000_000L).setDeregistered(false).build();
    }

    /** One RequestEvent per branch of {@code RequestEvent.payload}, in schema order. */
    public static List<RequestEvent> requestEvents() {
        List<Object> payloads = List.of(
                RequestAdmitted.newBuilder().setModel("llama").setPromptTokens(1234).setMaxTokens(256)
                        .setPrefillEngineId("prefill-0").setDecodeEngineId("decode-1")
                        .setFailurePolicy(FailurePolicy.RECOMPUTE).setDeadlineMs(1_733_000_030_000L).build(),
                PrefillCompleted.newBuilder().setEngineId("prefill-0").setInstanceEpoch(7)
                        .setSourceBlocks(blocks(0, 40, 100, 38)).setNumTokens(1234).setFirstToken(791).setLayout(layout()).build(),
                PrefillFailed.newBuilder().setEngineId("prefill-0").setInstanceEpoch(7).setReason("CUDA OOM").setRetriable(true).build(),
                DecodeReady.newBuilder().setEngineId("decode-1").setInstanceEpoch(3).setLeaseId("lease-r1").setLeaseEpoch(2)
                        .setDestBlocks(blocks(500, 78)).setLeaseDeadlineMs(1_733_000_010_000L).setLayout(layout()).build(),
                DecodeRejected.newBuilder().setEngineId("decode-1").setInstanceEpoch(3).setReason("no free pages").build(),
                LeaseHeartbeat.newBuilder().setEngineId("decode-1").setLeaseId("lease-r1").setLeaseEpoch(2).setExtendToMs(1_733_000_020_000L).build(),
                TransferStarted.newBuilder().setOrderId("r1/o/0").setAttempt(0).setWorkerId("worker:prefill-0").setTransport("tcp").build(),
                TransferCompleted.newBuilder().setOrderId("r1/o/0").setAttempt(0).setWorkerId("worker:prefill-0")
                        .setBytes(78L * 32 * 2 * 32768).setDurationUs(4_200).build(),
                TransferFailed.newBuilder().setOrderId("r1/o/0").setAttempt(1).setWorkerId("worker:prefill-0")
                        .setReason("connection reset").setRetriable(true).build(),
                DecodeCompleted.newBuilder().setEngineId("decode-1").setOutputTokens(256).setRecomputed(true).build(),
                CancelRequested.newBuilder().setRequestedBy("proxy-1").setReason("client disconnected").build(),
                EngineEpochChanged.newBuilder().setEngineId("prefill-0").setInstanceEpoch(8).setDeregistered(true).build(),
                Tick.newBuilder().setPartition(5).build());
        List<RequestEvent> out = new ArrayList<>();
        for (int i = 0; i < payloads.size(); i++) {
            out.add(RequestEvent.newBuilder().setRequestId("req-0001").setEventId("req-0001/" + i)
                    .setSource("engine:prefill-0").setEventTimeMs(1_733_000_000_000L + i).setPayload(payloads.get(i)).build());
        }
        return out;
    }

    /** One Decision per branch of {@code Decision.payload}, in schema order. */
    public static List<Decision> decisions() {
        List<Object> payloads = List.of(
                TransferOrder.newBuilder().setOrderId("r1/o/0").setAttempt(0).setSourceEngineId("prefill-0").setSourceInstanceEpoch(7)
                        .setDestEngineId("decode-1").setDestInstanceEpoch(3).setSourceBlocks(blocks(0, 40, 100, 38))
                        .setDestBlocks(blocks(500, 78)).setLayout(layout()).setLeaseId("lease-r1").setLeaseEpoch(2)
                        .setAuthToken(ByteBuffer.wrap("hmac-sha256-0123456789abcdef0123456789abcdef".getBytes(StandardCharsets.US_ASCII)))
                        .setDeadlineMs(1_733_000_005_000L).setTransport("tcp").build(),
                AbortTransfer.newBuilder().setOrderId("r1/o/0").setAttempt(0).setSourceEngineId("prefill-0")
                        .setDestEngineId("decode-1").setReason("cancelled").build(),
                ReleaseDecided.newBuilder().setEngineId("decode-1").setSide(ReleaseSide.DECODE).setBlocks(blocks(500, 78))
                        .setLeaseId("lease-r1").setLeaseEpoch(2L).setReason("request finished").build(),
                KvReady.newBuilder().setDecodeEngineId("decode-1").setOrderId("r1/o/0").setBytes(163_577_856L).build(),
                RecomputeDecided.newBuilder().setDecodeEngineId("decode-1").setReason("3 transfer attempts failed").build(),
                RequestOutcome.newBuilder().setKind(OutcomeKind.TIMED_OUT).setReason("lease expired").setAttempts(2)
                        .setPrefillEngineId("prefill-0").setDecodeEngineId("decode-1").setKvBytes(163_577_856L)
                        .setTimings(PhaseTimings.newBuilder().setAdmittedMs(1L).setPrefillCompletedMs(2L).setDecodeReadyMs(3L)
                                .setOrderIssuedMs(4L).setTransferCompletedMs(null).setFinishedMs(6L).build()).build(),
                InputRejected.newBuilder().setEventId("req-0001/9").setEventType("TransferCompleted").setState("RETRY_WAIT")
                        .setReason("stale attempt 0").build());
        List<Decision> out = new ArrayList<>();
        for (int i = 0; i < payloads.size(); i++) {
            out.add(Decision.newBuilder().setRequestId("req-0001").setDecisionId("req-0001/" + i).setSeq(i)
                    .setStreamTimeMs(1_733_000_001_000L + i).setCauseEventId(i == 4 ? null : "req-0001/" + i)
                    .setPayload(payloads.get(i)).build());
        }
        return out;
    }

    public static DeadLetter deadLetter() {
        return DeadLetter.newBuilder().setComponent("decider").setTopic("orbitkv.request-events").setPartition(3).setOffset(42)
                .setOriginalKey(ByteBuffer.wrap("req-0001".getBytes(StandardCharsets.UTF_8)))
                .setOriginalValue(ByteBuffer.wrap(new byte[] {(byte) 0xC3, 0x01, 0, 0, 0}))
                .setReason("cannot decode record").setErrorType("UNDECODABLE").setDeadLetteredAtMs(1_733_000_002_000L).build();
    }

    public static RequestAnswered requestAnswered() {
        return RequestAnswered.newBuilder().setRequestId("req-0001").setProxyId("proxy-1").setRoute("pd").setStatus(200).setEnd("ANSWERED")
                .setPrefillEngineId("prefill-0").setDecodeEngineId("decode-0").setPromptTokens(120).setStream(true).setTtftUs(38_000L)
                .setHandoffUs(18_000L).setTotalUs(70_000L).setAnsweredAtMs(1_733_000_003_000L).build();
    }

    /** A stored run of two blocks, an eviction and a clear: every branch of the KV cache event. */
    public static List<io.orbitkv.pd.events.KvCacheEvent> kvCacheEvents() {
        ByteBuffer h1 = ByteBuffer.wrap(new byte[32]);
        byte[] b2 = new byte[32];
        b2[0] = 7;
        ByteBuffer h2 = ByteBuffer.wrap(b2);
        List<Integer> tokens = new ArrayList<>();
        for (int i = 0; i < 32; i++) {
            tokens.add(1000 + i);
        }
        return List.of(
                kv(1, io.orbitkv.pd.events.BlockStored.newBuilder().setBlockHashes(List.of(h1, h2)).setTokenIds(tokens).setBlockSize(16)
                        .setMedium("GPU").setLoraName("lora-a").setExtraKeys(java.util.Arrays.asList(List.of("lora-a"), null)).build()),
                kv(2, io.orbitkv.pd.events.BlockRemoved.newBuilder().setBlockHashes(List.of(h2)).build()),
                kv(3, io.orbitkv.pd.events.AllBlocksCleared.newBuilder().setReason("reset").build()));
    }

    private static io.orbitkv.pd.events.KvCacheEvent kv(long seq, Object payload) {
        return io.orbitkv.pd.events.KvCacheEvent.newBuilder().setEngineId("prefill-0").setInstanceEpoch(1_733_000_000_000L).setSeq(seq)
                .setEventTimeMs(1_733_000_004_000L + seq).setPayload(payload).build();
    }

    /** Every sample of every top-level type. */
    public static List<SpecificRecord> all() {
        List<SpecificRecord> out = new ArrayList<>();
        out.add(engineRegistration());
        out.addAll(requestEvents());
        out.addAll(decisions());
        out.add(deadLetter());
        out.add(requestAnswered());
        out.addAll(kvCacheEvents());
        return out;
    }
}
