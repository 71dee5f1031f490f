package io.orbitkv.pd.dashboard.internal;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.DecodeCompleted;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.KvLayout;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.tracing.Hop;
import io.orbitkv.pd.tracing.Marks;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The dashboard joins a request's timing marks across its facts and decisions, in whichever order they are read. */
class HopJoinTest {

    private static final String R = "r";
    private static final List<BlockRun> RUNS = List.of(BlockRun.newBuilder().setStart(0).setCount(2).build());

    private record Rec(Object value, String marks) { }

    private static RequestEvent fact(String id, Object payload) {
        return RequestEvent.newBuilder().setRequestId(R).setEventId(R + "/" + id).setSource("t").setEventTimeMs(1).setPayload(payload).build();
    }

    private static List<Rec> records() {
        KvLayout layout = KvLayout.newBuilder().setNumLayers(1).setKvSplit(KvSplit.FUSED).setBlockSizeTokens(16).setNumKvHeads(1).setHeadDim(1)
                .setDtype(Dtype.BF16).setTpRank(0).setTpSize(1).setPageBytes(32).setNumBlocks(8).build();
        TransferOrder order = TransferOrder.newBuilder().setOrderId("o").setAttempt(1).setSourceEngineId("p").setSourceInstanceEpoch(1)
                .setDestEngineId("d").setDestInstanceEpoch(2).setSourceBlocks(RUNS).setDestBlocks(RUNS).setLayout(layout).setLeaseId("l")
                .setLeaseEpoch(1).setAuthToken(ByteBuffer.wrap(new byte[] {1})).setDeadlineMs(0).setTransport("auto").build();
        List<Rec> r = new ArrayList<>();
        r.add(new Rec(fact("prefill-completed", PrefillCompleted.newBuilder().setEngineId("p").setInstanceEpoch(1).setSourceBlocks(RUNS)
                .setNumTokens(20).build()), "in=100,c0=200,c1=1200,out=1300"));
        r.add(new Rec(Decision.newBuilder().setRequestId(R).setDecisionId(R + "/0").setSeq(0).setStreamTimeMs(1)
                .setCauseEventId(R + "/prefill-completed").setPayload(order).build(), "in=1800,out=1900"));
        r.add(new Rec(fact("o/completed", TransferCompleted.newBuilder().setOrderId("o").setAttempt(1).setWorkerId("w").setBytes(1)
                .setDurationUs(1).build()), "in=2500,run=2600,conn=2700,adm=2750,w1=6000,ack=6400,out=6500"));
        r.add(new Rec(Decision.newBuilder().setRequestId(R).setDecisionId(R + "/1").setSeq(1).setStreamTimeMs(1)
                .setCauseEventId(R + "/o/completed").setPayload(KvReady.newBuilder().setDecodeEngineId("d").setOrderId("o").setBytes(1).build())
                .build(), "in=7000,out=7050"));
        r.add(new Rec(fact("decode-completed", DecodeCompleted.newBuilder().setEngineId("d").setOutputTokens(4).build()),
                "in=50,kv=7600,first=7700,out=9000"));
        return r;
    }

    private static Map<Hop, Long> run(List<Rec> records, boolean[] ended) {
        Map<Hop, Long> out = new LinkedHashMap<>();
        String state = null;
        for (Rec r : records) {
            HopJoin.Step s = HopJoin.apply(state, r.value(), Marks.parse(r.marks()), 1_000);
            for (HopJoin.Measured m : s.hops()) {
                assertThat(out.put(m.hop(), m.micros())).as("%s counted once", m.hop()).isNull();
            }
            state = s.state();
        }
        ended[0] = state == null;
        return out;
    }

    @Test
    void hopsInsideOneRecordAndBetweenTwoAreEachCountedOnceAndTheStateGoesWhenComplete() {
        boolean[] ended = new boolean[1];
        Map<Hop, Long> hops = run(records(), ended);
        assertThat(hops).containsEntry(Hop.PREFILL_QUEUE, 100L).containsEntry(Hop.PREFILL_COMPUTE, 1000L).containsEntry(Hop.PREFILL_REPORT, 100L)
                .containsEntry(Hop.FACT_TO_DECIDER, 500L).containsEntry(Hop.DECIDER_ORDER, 100L).containsEntry(Hop.ORDER_TO_WORKER, 600L)
                .containsEntry(Hop.WORKER_QUEUE, 100L).containsEntry(Hop.TRANSFER_SETUP, 100L).containsEntry(Hop.TRANSFER_ADMISSION, 50L)
                .containsEntry(Hop.TRANSFER_WIRE, 3250L).containsEntry(Hop.TRANSFER_APPLY, 400L).containsEntry(Hop.TRANSFER_REPORT, 100L)
                .containsEntry(Hop.REPORT_TO_DECIDER, 500L).containsEntry(Hop.DECIDER_KV_READY, 50L).containsEntry(Hop.KV_READY_TO_ENGINE, 550L)
                .containsEntry(Hop.ENGINE_FIRST_TOKEN, 100L);
        assertThat(ended[0]).as("nothing left to join: the request's state is dropped").isTrue();
    }

    @Test
    void decisionsReadBeforeTheFactsTheyFollowGiveTheSameHops() {
        List<Rec> r = records();
        List<Rec> decisionsFirst = new ArrayList<>(r.stream().filter(x -> x.value() instanceof Decision).toList());
        decisionsFirst.addAll(r.stream().filter(x -> x.value() instanceof RequestEvent).toList());
        boolean[] ended = new boolean[1];
        assertThat(run(decisionsFirst, ended)).isEqualTo(run(records(), new boolean[1]));
        assertThat(ended[0]).isTrue();
    }

    /** The short path (engine API): the worker started on its engine's own fact, the decode engine had its KV on landing. */
    private static List<Rec> shortPath() {
        List<Rec> r = new ArrayList<>(records());
        // the decider's copy with the pages and its KvReady still come, beside the handoff
        r.set(2, new Rec(r.get(2).value(), "in=1250,ef=1250,run=1260,conn=1300,adm=1310,w1=4000,ack=4300,out=4400"));
        r.set(4, new Rec(r.get(4).value(), "in=50,kv=4350,land=4290,first=4500,out=9000"));
        return r;
    }

    @Test
    void theShortPathsHopsAreCountedAndTheHopsBesideItAreNot() {
        boolean[] ended = new boolean[1];
        Map<Hop, Long> hops = run(shortPath(), ended);
        assertThat(hops).containsEntry(Hop.PREFILL_TO_WORKER, 50L).containsEntry(Hop.LANDED_TO_ENGINE, 50L).containsEntry(Hop.WORKER_QUEUE, 10L)
                .doesNotContainKeys(Hop.FACT_TO_DECIDER, Hop.ORDER_TO_WORKER, Hop.REPORT_TO_DECIDER, Hop.KV_READY_TO_ENGINE);
        assertThat(ended[0]).isTrue();

        // any order of the records gives the same hops; the engine hearing before the sender's ACK waited 0 beyond it
        List<Rec> reversed = new ArrayList<>(shortPath());
        java.util.Collections.reverse(reversed);
        assertThat(run(reversed, ended)).isEqualTo(hops);
        assertThat(ended[0]).isTrue();
        List<Rec> early = shortPath();
        early.set(4, new Rec(early.get(4).value(), "in=50,kv=4200,land=4190,first=4500,out=9000"));
        assertThat(run(early, ended)).containsEntry(Hop.LANDED_TO_ENGINE, 0L);
    }

    @Test
    void aRequestWhoseOtherEndNeverComesKeepsItsFirstSightingForThePurge() {
        HopJoin.Step s = HopJoin.apply(null, records().get(0).value(), Marks.parse(records().get(0).marks()), 4_242);
        assertThat(s.state()).isNotNull();
        assertThat(HopJoin.seen(s.state())).isEqualTo(4_242);
        assertThat(HopJoin.seen("garbage|nothing")).isEqualTo(-1);
    }
}
