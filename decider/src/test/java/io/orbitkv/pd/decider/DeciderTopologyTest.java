package io.orbitkv.pd.decider;

import static io.orbitkv.pd.decider.Facts.*;
import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.events.AbortTransfer;
import io.orbitkv.pd.events.DeadLetter;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.FailurePolicy;
import io.orbitkv.pd.events.InputRejected;
import io.orbitkv.pd.events.KvLayout;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.RecomputeDecided;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.schemas.EventText;
import io.orbitkv.pd.schemas.OrderTokens;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.apache.kafka.streams.KeyValue;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/** Given/when/then scenarios of the decider topology in a TopologyTestDriver. */
class DeciderTopologyTest {

    private final DeciderDriver d = new DeciderDriver(fastPolicy());

    @AfterEach
    void close() {
        d.close();
    }

    private static List<String> types(List<Decision> ds) {
        return ds.stream().map(EventText::typeOf).toList();
    }

    private static <T> T payload(List<Decision> ds, Class<T> type) {
        return ds.stream().map(Decision::getPayload).filter(type::isInstance).map(type::cast).findFirst().orElseThrow();
    }

    @Test
    void perFactTimingsReachTheListenerByEventIdAndUndecodableRecordsDoNot() {
        DeciderMetrics metrics = DeciderMetrics.noop();
        List<String> seen = new java.util.ArrayList<>();
        metrics.factTimings((eventId, start, end) -> {
            assertThat(end).isGreaterThanOrEqualTo(start);
            seen.add(eventId);
        });
        try (DeciderDriver timed = new DeciderDriver(fastPolicy(), metrics)) {
            RequestEvent adm = admitted("t1");
            timed.pipe(1000, adm).pipeRaw(1001, "t1".getBytes(StandardCharsets.UTF_8), new byte[] {1, 2, 3});
            assertThat(seen).containsExactly(adm.getEventId());
            metrics.factTimings(null);
            timed.pipe(1002, decodeReady("t1", run(0, 2)));
            assertThat(seen).hasSize(1);
        }
    }

    @Test
    void aFailingTimingListenerIsRemovedAndDecidingGoesOn() {
        DeciderMetrics metrics = DeciderMetrics.noop();
        java.util.concurrent.atomic.AtomicInteger calls = new java.util.concurrent.atomic.AtomicInteger();
        metrics.factTimings((eventId, start, end) -> {
            calls.incrementAndGet();
            throw new IllegalStateException("observer bug");
        });
        try (DeciderDriver timed = new DeciderDriver(fastPolicy(), metrics)) {
            timed.pipe(1000, admitted("f1")).pipe(1001, decodeReady("f1", run(100, 8))).pipe(1002, prefillCompleted("f1", run(0, 8)));
            assertThat(types(timed.decisions())).containsExactly("TransferOrder");
            assertThat(calls).hasValue(1);
        }
    }

    @Test
    void decodeReadyFirstThenPrefillOrdersOneTransferAndCompletes() {
        // given an admitted request whose decode side is ready first
        d.pipe(1000, admitted("r1")).pipe(1001, decodeReady("r1", run(100, 8)));
        assertThat(d.decisions()).isEmpty();

        // when prefill completes
        d.pipe(1010, prefillCompleted("r1", run(0, 8)));

        // then exactly one order, to the prefill engine's worker, with the lease epoch and a valid token
        List<Decision> ds = d.decisions();
        assertThat(types(ds)).containsExactly("TransferOrder");
        TransferOrder o = payload(ds, TransferOrder.class);
        assertThat(o.getOrderId()).isEqualTo("r1/a1");
        assertThat(o.getLeaseEpoch()).isEqualTo(1);
        byte[] token = new byte[o.getAuthToken().remaining()];
        o.getAuthToken().duplicate().get(token);
        assertThat(new OrderTokens("test-auth-key-0123456789".getBytes(StandardCharsets.UTF_8))
                .verify("r1/a1", 1, o.getDestEngineId(), o.getDestInstanceEpoch(), o.getDestBlocks(), token)).isTrue();
        assertThat(new OrderTokens("test-auth-key-0123456789".getBytes(StandardCharsets.UTF_8))
                .verify("r1/a1", 1, o.getDestEngineId(), o.getDestInstanceEpoch() + 1, o.getDestBlocks(), token))
                .as("a token does not verify for the destination's next instance epoch").isFalse();
        assertThat(ds.get(0).getDecisionId()).isEqualTo("r1/0");
        assertThat(d.commands()).extracting(kv -> kv.key).containsExactly(PREFILL);

        // when the transfer completes: KV ready to decode, prefill pages released
        d.pipe(1020, started("r1", 1)).pipe(1030, completed("r1", 1));
        ds = d.decisions();
        assertThat(types(ds)).containsExactly("KvReady", "ReleaseDecided");
        assertThat(payload(ds, ReleaseDecided.class).getSide()).isEqualTo(ReleaseSide.PREFILL);
        List<KeyValue<String, Decision>> cmds = d.commands();
        assertThat(cmds).extracting(kv -> kv.key + ":" + EventText.typeOf(kv.value)).containsExactly("decode-0:KvReady", "prefill-0:ReleaseDecided");

        // when decode finishes: decode pages released and one COMPLETED outcome
        d.pipe(1500, decodeCompleted("r1"));
        ds = d.decisions();
        assertThat(types(ds)).containsExactly("ReleaseDecided", "RequestOutcome");
        assertThat(payload(ds, ReleaseDecided.class).getSide()).isEqualTo(ReleaseSide.DECODE);
        RequestOutcome out = payload(ds, RequestOutcome.class);
        assertThat(out.getKind()).isEqualTo(OutcomeKind.COMPLETED);
        assertThat(out.getTimings().getAdmittedMs()).isEqualTo(1000);
        assertThat(out.getTimings().getFinishedMs()).isEqualTo(1500);
        assertThat(d.deadLetters()).isEmpty();
    }

    @Test
    void prefillFirstAndFactsBeforeAdmissionAreHeldUntilAdmitted() {
        d.pipe(1000, prefillCompleted("r2", run(0, 4))).pipe(1001, decodeReady("r2", run(10, 4)));
        assertThat(d.decisions()).isEmpty();
        d.pipe(1002, admitted("r2"));
        assertThat(types(d.decisions())).containsExactly("TransferOrder");
    }

    @Test
    void cancelDuringTransferAbortsAndReleasesOnlyAfterTheAttemptSettles() {
        d.pipe(1000, admitted("r3")).pipe(1001, decodeReady("r3", run(0, 2))).pipe(1002, prefillCompleted("r3", run(5, 2)));
        d.decisions();
        d.pipe(1003, cancel("r3"));
        List<Decision> ds = d.decisions();
        assertThat(types(ds)).containsExactly("AbortTransfer", "RequestOutcome");
        assertThat(payload(ds, RequestOutcome.class).getKind()).isEqualTo(OutcomeKind.CANCELLED);
        // the worker confirms the aborted attempt stopped: now both sides are released, once
        d.pipe(1004, failed("r3", 1, false));
        assertThat(d.decisions()).extracting(x -> ((ReleaseDecided) x.getPayload()).getSide())
                .containsExactly(ReleaseSide.PREFILL, ReleaseSide.DECODE);
        d.pipe(1005, failed("r3", 1, false)).pipe(1006, completed("r3", 1));
        assertThat(types(d.decisions())).isEmpty();
    }

    @Test
    void abortedAttemptThatNeverReportsIsDrainedByStreamTime() {
        d.pipe(1000, admitted("r4")).pipe(1001, decodeReady("r4", run(0, 2))).pipe(1002, prefillCompleted("r4", run(5, 2)));
        d.pipe(1003, cancel("r4"));
        d.decisions();
        d.pipe(1400, tick(0));
        assertThat(d.decisions()).isEmpty();
        d.pipe(1003 + 500, tick(0)); // drain grace is 500 ms in the fast policy
        assertThat(d.decisions()).as("the attempt has not reported: a lagging sender may still start it").isEmpty();
        d.pipe(1003 + 6000, tick(0)); // twice the 3 s lease after the abort: its sender is taken as gone
        assertThat(types(d.decisions())).containsExactly("ReleaseDecided", "ReleaseDecided");
    }

    @Test
    void retriableFailuresAreRetriedWithBackoffThenRecomputed() {
        d.pipe(1000, admitted("r5", FailurePolicy.RECOMPUTE)).pipe(1001, decodeReady("r5", run(0, 2)))
                .pipe(1002, prefillCompleted("r5", run(5, 2)));
        d.decisions();
        d.pipe(1010, failed("r5", 1, true));
        assertThat(d.decisions()).isEmpty();
        d.pipe(1110, tick(0)); // backoff base 100 ms
        assertThat(payload(d.decisions(), TransferOrder.class).getAttempt()).isEqualTo(2);
        d.pipe(1120, failed("r5", 2, true)).pipe(1320, tick(0));
        assertThat(payload(d.decisions(), TransferOrder.class).getAttempt()).isEqualTo(3);
        d.pipe(1330, failed("r5", 3, true));
        List<Decision> ds = d.decisions();
        assertThat(types(ds)).containsExactly("ReleaseDecided", "RecomputeDecided");
        assertThat(payload(ds, RecomputeDecided.class).getReason()).contains("3 times");
        d.pipe(2000, decodeCompleted("r5"));
        assertThat(payload(d.decisions(), RequestOutcome.class).getKind()).isEqualTo(OutcomeKind.COMPLETED);
    }

    @Test
    void decodeRejectionReleasesPrefillPagesAtOnce() {
        d.pipe(1000, admitted("r6")).pipe(1001, prefillCompleted("r6", run(0, 3))).pipe(1002, decodeRejected("r6"));
        List<Decision> ds = d.decisions();
        assertThat(types(ds)).containsExactly("ReleaseDecided", "RequestOutcome");
        assertThat(payload(ds, RequestOutcome.class).getKind()).isEqualTo(OutcomeKind.FAILED);
    }

    @Test
    void incompatibleLayoutsAreRefusedWithTheReason() {
        KvLayout fp16 = KvLayout.newBuilder(layout()).setDtype(Dtype.FP16).build();
        d.pipe(1000, admitted("r7")).pipe(1001, decodeReady("r7", 1, fp16, run(0, 2))).pipe(1002, prefillCompleted("r7", run(5, 2)));
        RequestOutcome out = payload(d.decisions(), RequestOutcome.class);
        assertThat(out.getKind()).isEqualTo(OutcomeKind.FAILED);
        assertThat(out.getReason()).contains("dtype BF16 (prefill) vs FP16 (decode)");
    }

    @Test
    void prefillTimeoutFiresFromStreamTimeAndReleasesTheLease() {
        d.pipe(1000, admitted("r8")).pipe(1001, decodeReady("r8", run(0, 2)));
        d.pipe(2999, tick(0));
        assertThat(d.decisions()).isEmpty();
        d.pipe(3000, tick(0));
        List<Decision> ds = d.decisions();
        assertThat(types(ds)).containsExactly("ReleaseDecided", "RequestOutcome");
        assertThat(payload(ds, RequestOutcome.class).getKind()).isEqualTo(OutcomeKind.TIMED_OUT);
        assertThat(payload(ds, ReleaseDecided.class).getLeaseEpoch()).isEqualTo(1L);
    }

    @Test
    void heartbeatsExtendTheLease() {
        d.pipe(1000, admitted("r9")).pipe(1001, decodeReady("r9", run(0, 2))).pipe(1002, prefillCompleted("r9", run(5, 2)))
                .pipe(1003, completed("r9", 1));
        d.decisions();
        d.pipe(3500, heartbeat("r9", 1, 10_000)).pipe(6000, tick(0));
        assertThat(d.decisions()).isEmpty(); // lease 3 s from the heartbeat at 3.5 s
        d.pipe(6500, tick(0));
        assertThat(payload(d.decisions(), RequestOutcome.class).getReason()).contains("expired");
    }

    @Test
    void engineRestartVoidsTheLease() {
        d.pipe(1000, admitted("r10")).pipe(1001, decodeReady("r10", run(0, 2))).pipe(1002, prefillCompleted("r10", run(5, 2)));
        d.decisions();
        d.pipe(1003, epochChanged("r10", DECODE, 2));
        List<Decision> ds = d.decisions();
        assertThat(types(ds)).containsExactly("ReleaseDecided", "AbortTransfer", "RequestOutcome");
        assertThat(payload(ds, RequestOutcome.class).getReason()).contains("restarted");
        d.pipe(1004, completed("r10", 1));
        assertThat(types(d.decisions())).containsExactly("ReleaseDecided"); // the prefill side, once the attempt settled
    }

    @Test
    void badInputIsDeadLetteredAndTheAppKeepsDeciding() {
        d.pipeRaw(1000, "x".getBytes(), new byte[] {1, 2, 3});
        d.pipeKeyed(1001, "other-key", admitted("r11"));
        d.pipe(1002, completed("ghost", 1));
        d.pipe(1003, admitted("r12")).pipe(1004, decodeReady("r12", run(1020, 8)));
        List<DeadLetter> dl = d.deadLetters();
        assertThat(dl).extracting(DeadLetter::getErrorType).containsExactly("UNDECODABLE", "KEY_MISMATCH", "UNKNOWN_REQUEST", "OUT_OF_BOUNDS");
        assertThat(dl.get(0).getReason()).contains("request-events-0@0");
        assertThat(dl.get(3).getReason()).contains("outside the pool of 1024 blocks");
        // the same request still works afterwards
        d.pipe(1005, decodeReady("r12", run(0, 8))).pipe(1006, prefillCompleted("r12", run(0, 8)));
        assertThat(types(d.decisions())).containsExactly("TransferOrder");
    }

    @Test
    void illegalTransitionsAreReportedAsEventsAndDeadLettered() {
        d.pipe(1000, admitted("r13")).pipe(1001, decodeCompleted("r13"));
        assertThat(payload(d.decisions(), InputRejected.class).getReason()).contains("before its KV was ready");
        assertThat(d.deadLetters()).extracting(DeadLetter::getErrorType).containsExactly("ILLEGAL_TRANSITION");
    }

    @Test
    void duplicateFactsAreAppliedOnce() {
        var ready = decodeReady("r14", run(0, 2));
        d.pipe(1000, admitted("r14")).pipe(1001, ready).pipe(1002, ready).pipe(1003, prefillCompleted("r14", run(5, 2)));
        assertThat(types(d.decisions())).containsExactly("TransferOrder");
        assertThat(d.deadLetters()).isEmpty();
    }

    @Test
    void lateDecodePagesAfterCancelAreReleasedImmediately() {
        d.pipe(1000, admitted("r15")).pipe(1001, cancel("r15"));
        assertThat(payload(d.decisions(), RequestOutcome.class).getKind()).isEqualTo(OutcomeKind.CANCELLED);
        d.pipe(1002, decodeReady("r15", run(0, 2)));
        assertThat(payload(d.decisions(), ReleaseDecided.class).getSide()).isEqualTo(ReleaseSide.DECODE);
    }

    @Test
    void anOlderOrInvalidRegistrationNeverReplacesTheEngineInTheTable() {
        try (DeciderDriver d = new DeciderDriver(Facts.policy())) {
            var engines = d.driver().createInputTopic(d.topics.engines().name(), org.apache.kafka.common.serialization.Serdes.String().serializer(),
                    d.topics.engines().valueSerde().serializer());
            engines.pipeInput("decode-0", registration("decode-0", 5, 64));
            engines.pipeInput("decode-0", registration("decode-0", -1, 64)); // forged, older
            engines.pipeInput("decode-0", registration("decode-0", 6, -3)); // invalid layout
            engines.pipeInput("decode-0", registration("decode-9", 7, 64)); // another engine's
            org.apache.kafka.streams.state.KeyValueStore<String, byte[]> store = d.driver().getKeyValueStore(DeciderTopology.ENGINES_STORE);
            io.orbitkv.pd.events.EngineRegistration kept = d.topics.engines().valueSerde().deserializer()
                    .deserialize(d.topics.engines().name(), store.get("decode-0"));
            assertThat(kept.getInstanceEpoch()).isEqualTo(5);
            assertThat(kept.getLayout().getNumBlocks()).isEqualTo(64);
            engines.pipeInput("decode-0", registration("decode-0", 8, 64)); // its next instance
            assertThat(d.topics.engines().valueSerde().deserializer().deserialize(d.topics.engines().name(), store.get("decode-0"))
                    .getInstanceEpoch()).isEqualTo(8);
        }
    }

    private static io.orbitkv.pd.events.EngineRegistration registration(String id, long epoch, int numBlocks) {
        io.orbitkv.pd.events.KvLayout layout = Facts.layout();
        layout.setNumBlocks(numBlocks);
        return io.orbitkv.pd.events.EngineRegistration.newBuilder().setEngineId(id).setRole(io.orbitkv.pd.events.EngineRole.DECODE)
                .setInstanceEpoch(epoch).setModel("m").setHttpUrl("http://x").setEndpoints(java.util.List.of()).setRegions(java.util.List.of())
                .setRegisteredAtMs(0).setDeregistered(false).setLayout(layout).build();
    }
}
