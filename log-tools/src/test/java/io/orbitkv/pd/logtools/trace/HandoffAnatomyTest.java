package io.orbitkv.pd.logtools.trace;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.DecodeCompleted;
import io.orbitkv.pd.events.DecodeReady;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestAnswered;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferFailed;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.events.TransferStarted;
import io.orbitkv.pd.logtools.SyntheticLog;
import io.orbitkv.pd.logtools.trace.HandoffAnatomy.Observation;
import io.orbitkv.pd.tracing.Hop;
import io.orbitkv.pd.tracing.Marks;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** A request's records with their timing marks give its hops, each from one mark to the next, whatever their order. */
class HandoffAnatomyTest {

    private static final String R = "req-1";
    private static final List<BlockRun> RUNS = List.of(BlockRun.newBuilder().setStart(0).setCount(4).build());

    private static Observation fact(String eventId, Object payload, String marks) {
        return new Observation(RequestEvent.newBuilder().setRequestId(R).setEventId(R + "/" + eventId).setSource("t").setEventTimeMs(1)
                .setPayload(payload).build(), Marks.parse(marks));
    }

    private static Observation decision(int seq, String cause, Object payload, String marks) {
        return new Observation(Decision.newBuilder().setRequestId(R).setDecisionId(R + "/" + seq).setSeq(seq).setStreamTimeMs(1)
                .setCauseEventId(cause == null ? null : R + "/" + cause).setPayload(payload).build(), Marks.parse(marks));
    }

    private static TransferOrder order(int attempt) {
        return TransferOrder.newBuilder().setOrderId(R + "/o").setAttempt(attempt).setSourceEngineId("p").setSourceInstanceEpoch(1)
                .setDestEngineId("d").setDestInstanceEpoch(2).setSourceBlocks(RUNS).setDestBlocks(RUNS).setLayout(SyntheticLog.layout())
                .setLeaseId("l").setLeaseEpoch(1).setAuthToken(ByteBuffer.wrap(new byte[] {1})).setDeadlineMs(0).setTransport("auto").build();
    }

    /** One request's records, all timing marks present (µs). */
    private static List<Observation> story() {
        List<Observation> o = new ArrayList<>();
        o.add(fact("admitted", RequestAdmitted.newBuilder().setModel("m").setPromptTokens(100).setMaxTokens(16).setPrefillEngineId("p")
                .setDecodeEngineId("d").build(), "in=1000,out=1100"));
        o.add(fact("decode-ready", DecodeReady.newBuilder().setEngineId("d").setInstanceEpoch(2).setLeaseId("l").setLeaseEpoch(1)
                .setDestBlocks(RUNS).setLeaseDeadlineMs(0).build(), "in=1200,out=1500"));
        o.add(fact("prefill-completed", PrefillCompleted.newBuilder().setEngineId("p").setInstanceEpoch(1).setSourceBlocks(RUNS).setNumTokens(100)
                .build(), "in=1300,c0=1400,c1=9400,out=9500"));
        o.add(decision(0, "prefill-completed", order(1), "in=10000,out=10100"));
        o.add(fact("o#1/started", TransferStarted.newBuilder().setOrderId(R + "/o").setAttempt(1).setWorkerId("w").setTransport("tcp").build(),
                "in=11000,run=11200,out=11300"));
        o.add(fact("o#1/completed", TransferCompleted.newBuilder().setOrderId(R + "/o").setAttempt(1).setWorkerId("w").setBytes(8 << 20)
                .setDurationUs(7_000).build(), "in=11000,run=11200,conn=11400,adm=11500,w1=18000,ack=18500,out=18600"));
        o.add(decision(1, "o#1/completed", KvReady.newBuilder().setDecodeEngineId("d").setOrderId(R + "/o").setBytes(8 << 20).build(),
                "in=19000,out=19100"));
        o.add(fact("decode-completed", DecodeCompleted.newBuilder().setEngineId("d").setOutputTokens(16).build(),
                "in=1200,kv=19800,first=20000,out=52000"));
        o.add(new Observation(RequestAnswered.newBuilder().setRequestId(R).setProxyId("proxy").setRoute("pd").setStatus(200).setEnd("ANSWERED")
                .setTtftUs(19_300L).setHandoffUs(9_800L).setTotalUs(51_000L).setAnsweredAtMs(1).build(),
                Marks.parse("in=1000,pf=10500,first=20300,end=52000,out=52100")));
        return o;
    }

    private static Map<Hop, Long> spans(HandoffAnatomy a) {
        Map<Hop, Long> m = new LinkedHashMap<>();
        a.spans().forEach(s -> m.put(s.hop(), s.micros()));
        return m;
    }

    @Test
    void everyHopRunsFromOneMarkToTheNextAndTheHandoffsSpansAddUp() {
        HandoffAnatomy a = HandoffAnatomy.of(story());
        Map<Hop, Long> s = spans(a);
        assertThat(s).containsEntry(Hop.ADMIT, 100L).containsEntry(Hop.PREFILL_REQUEST, 200L).containsEntry(Hop.PREFILL_QUEUE, 100L)
                .containsEntry(Hop.PREFILL_COMPUTE, 8_000L).containsEntry(Hop.PREFILL_REPORT, 100L).containsEntry(Hop.PREFILL_ANSWER, 1_000L)
                .containsEntry(Hop.FACT_TO_DECIDER, 500L).containsEntry(Hop.DECIDER_ORDER, 100L).containsEntry(Hop.ORDER_TO_WORKER, 900L)
                .containsEntry(Hop.WORKER_QUEUE, 200L).containsEntry(Hop.TRANSFER_SETUP, 200L).containsEntry(Hop.TRANSFER_ADMISSION, 100L)
                .containsEntry(Hop.TRANSFER_WIRE, 6_500L).containsEntry(Hop.TRANSFER_APPLY, 500L).containsEntry(Hop.TRANSFER_REPORT, 100L)
                .containsEntry(Hop.REPORT_TO_DECIDER, 400L).containsEntry(Hop.DECIDER_KV_READY, 100L).containsEntry(Hop.KV_READY_TO_ENGINE, 700L)
                .containsEntry(Hop.ENGINE_FIRST_TOKEN, 200L).containsEntry(Hop.FIRST_TOKEN_TO_PROXY, 300L);
        // all of them but the two shortcuts' hops, in the order a request crosses them
        assertThat(s.keySet()).containsExactlyElementsOf(java.util.Arrays.stream(Hop.values())
                .filter(h -> h != Hop.PREFILL_TO_WORKER && h != Hop.LANDED_TO_ENGINE).toList());
        assertThat(a.path()).isEqualTo(HandoffAnatomy.path(false, false));
        // From the fact that completed the pair to the first token at the proxy, the hops are contiguous.
        long path = 0;
        for (Hop h : a.path()) {
            path += s.get(h);
        }
        assertThat(path).isEqualTo(20_300 - 9_500);
        assertThat(a.ttftMicros()).isEqualTo(19_300);
        assertThat(a.handoffMicros()).isEqualTo(9_800);
        assertThat(a.transferMicros()).isEqualTo(7_000);
        assertThat(a.transferBytes()).isEqualTo(8 << 20);
        assertThat(a.startMicros()).isEqualTo(1_000);
        assertThat(a.route()).isEqualTo("pd");
    }

    @Test
    void theOrderOfTheRecordsDoesNotMatter() {
        List<Observation> shuffled = story();
        Collections.reverse(shuffled);
        assertThat(spans(HandoffAnatomy.of(shuffled))).isEqualTo(spans(HandoffAnatomy.of(story())));
    }

    @Test
    void theAttemptThatMovedTheKvIsTheOneMeasuredAndMissingMarksAreLeftOut() {
        List<Observation> o = new ArrayList<>(story());
        // the first attempt failed: its order and its report are in the log before the second attempt's
        o.add(decision(5, "prefill-completed", order(2), "in=30000,out=30100"));
        o.removeIf(x -> x.event() instanceof RequestEvent e && e.getPayload() instanceof TransferCompleted);
        o.add(fact("o#1/failed", TransferFailed.newBuilder().setOrderId(R + "/o").setAttempt(1).setWorkerId("w").setReason("x").setRetriable(true)
                .build(), "in=11000,out=11500"));
        o.add(fact("o#2/completed", TransferCompleted.newBuilder().setOrderId(R + "/o").setAttempt(2).setWorkerId("w").setBytes(1).setDurationUs(1)
                .build(), "in=30500,run=30600,out=31000"));
        o.removeIf(x -> x.event() instanceof RequestAnswered);
        Map<Hop, Long> s = spans(HandoffAnatomy.of(o));
        assertThat(s).containsEntry(Hop.DECIDER_ORDER, 100L).containsEntry(Hop.ORDER_TO_WORKER, 400L).containsEntry(Hop.WORKER_QUEUE, 100L);
        // no transport marks on that report, no answer record: those hops are not guessed
        assertThat(s).doesNotContainKeys(Hop.TRANSFER_WIRE, Hop.TRANSFER_REPORT, Hop.FIRST_TOKEN_TO_PROXY, Hop.PREFILL_ANSWER);
        assertThat(HandoffAnatomy.of(o).ttftMicros()).isEqualTo(-1);
    }

    @Test
    void anAttemptThatNeverStartedIsMeasuredToItsFailureReport() {
        List<Observation> o = new ArrayList<>(story());
        o.removeIf(x -> x.event() instanceof RequestEvent e && (e.getPayload() instanceof TransferStarted || e.getPayload() instanceof TransferCompleted));
        o.add(fact("o#1/failed", TransferFailed.newBuilder().setOrderId(R + "/o").setAttempt(1).setWorkerId("w").setReason("ABORTED: before it started")
                .setRetriable(false).build(), "in=10800,run=10900,out=11000"));
        Map<Hop, Long> s = spans(HandoffAnatomy.of(o));
        assertThat(s).containsEntry(Hop.ORDER_TO_WORKER, 700L).containsEntry(Hop.WORKER_QUEUE, 100L).doesNotContainKey(Hop.TRANSFER_SETUP);
    }

    @Test
    void recordsWithoutMarksGiveNoHops() {
        List<Observation> bare = story().stream().map(x -> new Observation(x.event(), Marks.empty())).toList();
        HandoffAnatomy a = HandoffAnatomy.of(bare);
        assertThat(a.spans()).isEmpty();
        assertThat(a.startMicros()).isEqualTo(-1);
    }

    @Test
    void anOrderStartedByTheEnginesOwnFactAndKvHandedOverOnLandingTakeTheShortPath() {
        List<Observation> o = admittedAndOrderedAhead(true);
        o.add(fact("prefill-completed", PrefillCompleted.newBuilder().setEngineId("p").setInstanceEpoch(1).setSourceBlocks(RUNS).setNumTokens(100)
                .build(), "in=1300,c0=1400,c1=9400,api=9450,out=9500"));
        o.add(fact("o#1/completed", TransferCompleted.newBuilder().setOrderId(R + "/o").setAttempt(1).setWorkerId("w").setBytes(8 << 20)
                .setDurationUs(1_000).build(), "in=9460,ef=9460,run=9480,conn=9500,adm=9520,w1=9560,ack=10400,out=10500"));
        o.add(fact("decode-completed", DecodeCompleted.newBuilder().setEngineId("d").setOutputTokens(16).build(),
                "in=1200,kv=10450,first=10600,out=52000"));
        o.add(decision(1, "o#1/completed", KvReady.newBuilder().setDecodeEngineId("d").setOrderId(R + "/o").setBytes(8 << 20).build(),
                "in=12000,out=12100"));
        o.add(new Observation(RequestAnswered.newBuilder().setRequestId(R).setProxyId("proxy").setRoute("pd").setStatus(200).setEnd("ANSWERED")
                .setTtftUs(9_900L).setHandoffUs(1_000L).setTotalUs(51_000L).setAnsweredAtMs(1).build(),
                Marks.parse("in=1000,pf=9600,first=10900,end=52000,out=52100")));
        HandoffAnatomy a = HandoffAnatomy.of(o);
        Map<Hop, Long> s = spans(a);
        assertThat(a.path()).isEqualTo(HandoffAnatomy.path(true, true)).contains(Hop.PREFILL_TO_WORKER, Hop.LANDED_TO_ENGINE)
                .doesNotContain(Hop.FACT_TO_DECIDER, Hop.ORDER_TO_WORKER, Hop.REPORT_TO_DECIDER, Hop.KV_READY_TO_ENGINE);
        assertThat(s).containsEntry(Hop.PREFILL_TO_WORKER, 60L).containsEntry(Hop.WORKER_QUEUE, 20L).containsEntry(Hop.LANDED_TO_ENGINE, 50L)
                .doesNotContainKeys(Hop.FACT_TO_DECIDER, Hop.DECIDER_ORDER, Hop.ORDER_TO_WORKER, Hop.TRANSFER_REPORT, Hop.KV_READY_TO_ENGINE);
        long path = 0;
        for (Hop h : a.path()) {
            path += s.get(h);
        }
        assertThat(path).as("prefill computed → first token at the proxy").isEqualTo(10_900 - 9_400);
    }

    @Test
    void kvHandedOverOnLandingButReadAfterTheDecidersKvReadyWasOutIsStillTheShortPath() {
        // the decode engine read its worker's kv_ready late (a busy machine): its land mark, not the time, says which it was
        List<Observation> o = admittedAndOrderedAhead(true);
        o.add(fact("prefill-completed", PrefillCompleted.newBuilder().setEngineId("p").setInstanceEpoch(1).setSourceBlocks(RUNS).setNumTokens(100)
                .build(), "in=1300,c0=1400,c1=9400,api=9450,out=9500"));
        o.add(fact("o#1/completed", TransferCompleted.newBuilder().setOrderId(R + "/o").setAttempt(1).setWorkerId("w").setBytes(8 << 20)
                .setDurationUs(1_000).build(), "in=9460,ef=9460,run=9480,conn=9500,adm=9520,w1=9560,ack=10400,out=10500"));
        o.add(decision(1, "o#1/completed", KvReady.newBuilder().setDecodeEngineId("d").setOrderId(R + "/o").setBytes(8 << 20).build(),
                "in=12000,out=12100"));
        o.add(fact("decode-completed", DecodeCompleted.newBuilder().setEngineId("d").setOutputTokens(16).build(),
                "in=1200,kv=12300,land=10380,first=12400,out=52000"));
        HandoffAnatomy a = HandoffAnatomy.of(o);
        assertThat(a.path()).isEqualTo(HandoffAnatomy.path(true, true));
        assertThat(spans(a)).containsEntry(Hop.LANDED_TO_ENGINE, 12_300L - 10_400L).doesNotContainKey(Hop.KV_READY_TO_ENGINE);

        // without the mark (a log of engines that did not carry it) the time decides: the decider's KvReady came first
        o.set(o.size() - 1, fact("decode-completed", DecodeCompleted.newBuilder().setEngineId("d").setOutputTokens(16).build(),
                "in=1200,kv=12300,first=12400,out=52000"));
        assertThat(spans(HandoffAnatomy.of(o))).containsEntry(Hop.KV_READY_TO_ENGINE, 200L).doesNotContainKey(Hop.LANDED_TO_ENGINE);
    }

    @Test
    void anOrderAheadStartedByItsCopyWithThePagesIsTimedFromThatCopy() {
        List<Observation> o = admittedAndOrderedAhead(true);
        o.add(fact("prefill-completed", PrefillCompleted.newBuilder().setEngineId("p").setInstanceEpoch(1).setSourceBlocks(RUNS).setNumTokens(100)
                .build(), "in=1300,c0=1400,c1=9400,out=9500"));
        o.add(decision(1, "prefill-completed", order(1), "in=10000,out=10100"));
        o.add(fact("o#1/completed", TransferCompleted.newBuilder().setOrderId(R + "/o").setAttempt(1).setWorkerId("w").setBytes(8 << 20)
                .setDurationUs(7_000).build(), "in=11000,run=11200,conn=11400,adm=11500,w1=18000,ack=18500,out=18600"));
        Map<Hop, Long> s = spans(HandoffAnatomy.of(o));
        assertThat(s).containsEntry(Hop.FACT_TO_DECIDER, 500L).containsEntry(Hop.DECIDER_ORDER, 100L).containsEntry(Hop.ORDER_TO_WORKER, 900L)
                .doesNotContainKey(Hop.PREFILL_TO_WORKER);
    }

    @Test
    void anOrderAheadThatArrivedAfterTheEnginesFactIsTimedFromItsOwnCopy() {
        List<Observation> o = admittedAndOrderedAhead(false);
        o.add(fact("prefill-completed", PrefillCompleted.newBuilder().setEngineId("p").setInstanceEpoch(1).setSourceBlocks(RUNS).setNumTokens(100)
                .build(), "in=1300,c0=1400,c1=1900,out=1950"));
        // the worker had its engine's fact already: the order ahead started the push when it arrived
        o.add(fact("o#1/completed", TransferCompleted.newBuilder().setOrderId(R + "/o").setAttempt(1).setWorkerId("w").setBytes(8 << 20)
                .setDurationUs(1_000).build(), "in=2500,run=2600,conn=2700,adm=2800,w1=2900,ack=3500,out=3600"));
        o.add(decision(1, "prefill-completed", order(1), "in=4000,out=4100"));
        Map<Hop, Long> s = spans(HandoffAnatomy.of(o));
        assertThat(s).containsEntry(Hop.FACT_TO_DECIDER, 500L).containsEntry(Hop.DECIDER_ORDER, 100L).containsEntry(Hop.ORDER_TO_WORKER, 400L);
    }

    /** The decode pages held (out at 1500) and the order issued ahead of the prefill (in 2000, out 2100); admitted first if asked. */
    private static List<Observation> admittedAndOrderedAhead(boolean admitted) {
        List<Observation> o = new ArrayList<>();
        if (admitted) {
            o.add(fact("admitted", RequestAdmitted.newBuilder().setModel("m").setPromptTokens(100).setMaxTokens(16).setPrefillEngineId("p")
                    .setDecodeEngineId("d").build(), "in=1000,out=1100"));
        }
        o.add(fact("decode-ready", DecodeReady.newBuilder().setEngineId("d").setInstanceEpoch(2).setLeaseId("l").setLeaseEpoch(1)
                .setDestBlocks(RUNS).setLeaseDeadlineMs(0).build(), "in=1200,out=1500"));
        TransferOrder ahead = order(1);
        ahead.setAwaitPrefill(true);
        o.add(decision(0, "decode-ready", ahead, "in=2000,out=2100"));
        return o;
    }
}
