package io.orbitkv.pd.logtools.audit;

import static io.orbitkv.pd.logtools.SyntheticRun.POLICY;
import static io.orbitkv.pd.logtools.SyntheticRun.SERDES;
import static io.orbitkv.pd.logtools.SyntheticRun.decision;
import static io.orbitkv.pd.logtools.SyntheticRun.fact;
import static io.orbitkv.pd.logtools.SyntheticRun.next;
import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.orbitkv.pd.decider.DeciderPolicy;
import io.orbitkv.pd.events.AbortTransfer;
import io.orbitkv.pd.events.CancelRequested;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.DecodeCompleted;
import io.orbitkv.pd.events.DecodeReady;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.LeaseHeartbeat;
import io.orbitkv.pd.events.PhaseTimings;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferFailed;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.logtools.LogRecord;
import io.orbitkv.pd.logtools.Progress;
import io.orbitkv.pd.logtools.SyntheticRun;
import io.orbitkv.pd.logtools.TopicRole;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import org.junit.jupiter.api.Test;

/**
 * Every audit rule on a synthetic run of the real decider: the run itself audits clean, and each planted violation is
 * reported, with its rule and request id, and nothing is reported about any other request.
 */
class AuditorTest {

    private static AuditReport audit(SyntheticRun run) {
        return audit(run, POLICY);
    }

    private static AuditReport audit(SyntheticRun run, DeciderPolicy policy) {
        return Auditor.audit(run.source(), SERDES, policy, 1000, Progress.NONE);
    }

    /** The planted violation is reported for {@code id}, and every violation reported is about {@code id}. */
    private static void assertOnly(AuditReport report, Rule rule, String id) {
        assertThat(report.violations()).as(text(report)).anySatisfy(v -> {
            assertThat(v.rule()).isEqualTo(rule);
            assertThat(v.requestId()).isEqualTo(id);
        });
        assertThat(report.violations()).as(text(report)).allSatisfy(v -> assertThat(v.requestId()).isEqualTo(id));
        assertThat(report.clean()).isFalse();
    }

    /** What a push of the request's first order moves: its destination pages in every layer. */
    private static long orderBytes(SyntheticRun run, String id) {
        TransferOrder o = (TransferOrder) decision(run.decision(id, TransferOrder.class)).getPayload();
        return o.getDestBlocks().stream().mapToLong(io.orbitkv.pd.events.BlockRun::getCount).sum()
                * io.orbitkv.pd.kv.KvGeometry.of(o.getLayout()).bytesPerBlock();
    }

    private static String text(AuditReport r) {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        r.writeText(new PrintStream(b, true, StandardCharsets.UTF_8));
        return b.toString(StandardCharsets.UTF_8);
    }

    @Test
    void aRunOfTheRealDeciderAuditsClean() {
        AuditReport r = audit(SyntheticRun.copy());
        assertThat(r.violations()).as(text(r)).isEmpty();
        assertThat(r.clean()).isTrue();
        assertThat(r.checked()).isEqualTo(SyntheticRun.OPTIONS.requests());
        assertThat(r.admitted()).isEqualTo(SyntheticRun.OPTIONS.requests());
        assertThat(r.openAtEnd()).isZero();
        assertThat(r.outcomes().values().stream().mapToLong(Long::longValue).sum()).isEqualTo(SyntheticRun.OPTIONS.requests());
        assertThat(r.outcomes()).containsKeys("COMPLETED", "CANCELLED", "FAILED", "TIMED_OUT");
        assertThat(r.pagesReleased()).isEqualTo(r.pagesHeld()).isPositive();
        assertThat(text(r)).contains("CLEAN");
    }

    @Test
    void missingOutcome() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("handoff");
        run.remove(run.decision(id, RequestOutcome.class));
        assertOnly(audit(run), Rule.OUTCOME_MISSING, id);
    }

    @Test
    void secondOutcome() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("handoff");
        Decision last = run.lastDecision(id);
        RequestOutcome again = RequestOutcome.newBuilder((RequestOutcome) decision(run.decision(id, RequestOutcome.class)).getPayload()).build();
        run.addDecision(next(last, last.getStreamTimeMs() + 5, again, null));
        assertOnly(audit(run), Rule.OUTCOME_DUPLICATE, id);
    }

    @Test
    void outcomeOfANeverAdmittedRequest() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("decode-rejected");
        run.remove(run.fact(id, io.orbitkv.pd.events.RequestAdmitted.class));
        AuditReport r = audit(run);
        assertThat(r.violations()).anySatisfy(v -> {
            assertThat(v.rule()).isEqualTo(Rule.OUTCOME_UNADMITTED);
            assertThat(v.requestId()).isEqualTo(id);
        });
    }

    /**
     * A request whose facts came first and whose admission came only after the admission grace (a partition leader moving
     * while the proxy's write waited): the decider closed it FAILED with no engines and refused the late admission. That
     * outcome is consistent with what the decider had read when it decided; the audit used to judge it against the
     * admission that arrived later (OUTCOME_INCONSISTENT, TIMINGS_INCONSISTENT: seen in the partitions chaos run).
     */
    @Test
    void anOutcomeDecidedBeforeALateAdmissionIsJudgedByWhatTheDeciderHadRead() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("decode-rejected");
        LogRecord admission = run.fact(id, io.orbitkv.pd.events.RequestAdmitted.class);
        RequestEvent admitted = fact(admission);
        run.remove(admission);
        run.editDecision(run.decision(id, RequestOutcome.class), d -> {
            RequestOutcome o = RequestOutcome.newBuilder((RequestOutcome) d.getPayload()).setPrefillEngineId(null).setDecodeEngineId(null)
                    .setTimings(io.orbitkv.pd.events.PhaseTimings.newBuilder(((RequestOutcome) d.getPayload()).getTimings()).setAdmittedMs(null)
                            .build()).build();
            d.setPayload(o);
            return d;
        });
        // as the decider writes it: the grace timer refuses the admission that never came, then closes the request
        Decision outcome = decision(run.decision(id, RequestOutcome.class));
        run.insertDecision(id, outcome.getSeq(), outcome.getStreamTimeMs(), io.orbitkv.pd.events.InputRejected.newBuilder().setEventId(id)
                .setEventType("RequestAdmitted").setState("AWAITING_ADMISSION").setReason("facts arrived but the request was never admitted"
                        + " within 5000 ms; releasing their pages").build(), null);
        long late = run.lastDecision(id).getStreamTimeMs() + 100;
        run.addFact(RequestEvent.newBuilder(admitted).setEventTimeMs(late).build());
        AuditReport r = audit(run);
        assertThat(r.violations()).as(text(r)).noneMatch(v -> v.requestId().equals(id));
    }

    @Test
    void outcomeThatContradictsTheLog() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("handoff");
        run.editDecision(run.decision(id, RequestOutcome.class), d -> {
            RequestOutcome o = RequestOutcome.newBuilder((RequestOutcome) d.getPayload()).setAttempts(2).build();
            d.setPayload(o);
            return d;
        });
        assertOnly(audit(run), Rule.OUTCOME_INCONSISTENT, id);
    }

    @Test
    void pagesNeverReleased() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("handoff");
        // the decode release is the second to last decision; drop it and renumber the outcome so the seq stays gapless
        LogRecord release = run.decisions(id).stream().filter(r -> decision(r).getPayload() instanceof ReleaseDecided rd
                && rd.getSide() == ReleaseSide.DECODE).findFirst().orElseThrow();
        int seq = decision(release).getSeq();
        run.remove(release);
        run.editDecision(run.decision(id, RequestOutcome.class), d -> {
            d.setSeq(seq);
            d.setDecisionId(id + "/" + seq);
            return d;
        });
        assertOnly(audit(run), Rule.PAGES_NOT_RELEASED, id);
    }

    @Test
    void pagesReleasedTwice() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("handoff");
        Decision last = run.lastDecision(id);
        run.addDecision(next(last, last.getStreamTimeMs() + 1, decision(run.decision(id, ReleaseDecided.class)).getPayload(), null));
        assertOnly(audit(run), Rule.PAGES_RELEASED_TWICE, id);
    }

    @Test
    void releaseWhileAnAbortedAttemptMayStillPush() {
        SyntheticRun run = SyntheticRun.copy();
        // a cancel mid-transfer whose worker never reported: the pages wait for the drain window, unless the decider errs
        String id = run.request("cancel", rid -> run.facts(rid).stream().noneMatch(r -> fact(r).getPayload() instanceof TransferFailed));
        long abortedAt = decision(run.decision(id, AbortTransfer.class)).getStreamTimeMs();
        for (LogRecord r : run.decisions(id)) {
            if (decision(r).getPayload() instanceof ReleaseDecided) {
                run.editDecision(r, d -> {
                    d.setStreamTimeMs(abortedAt + 1);
                    return d;
                });
            }
        }
        assertOnly(audit(run), Rule.RELEASE_BEFORE_DRAIN, id);
    }

    @Test
    void orderAfterTheOutcome() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("handoff");
        Decision last = run.lastDecision(id);
        TransferOrder o = (TransferOrder) decision(run.decision(id, TransferOrder.class)).getPayload();
        run.addDecision(next(last, last.getStreamTimeMs() + 1, TransferOrder.newBuilder(o).setAttempt(2).setOrderId(id + "/a2").build(), null));
        assertOnly(audit(run), Rule.ORDER_AFTER_OUTCOME, id);
    }

    @Test
    void orderAfterACancel() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("cancel");
        Decision last = run.lastDecision(id);
        TransferOrder o = (TransferOrder) decision(run.decision(id, TransferOrder.class)).getPayload();
        run.addDecision(next(last, last.getStreamTimeMs() + 1, TransferOrder.newBuilder(o).setAttempt(2).setOrderId(id + "/a2").build(), null));
        assertOnly(audit(run), Rule.ORDER_AFTER_CANCEL, id);
    }

    @Test
    void cancelThatNoDecisionAnswered() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("handoff");
        RequestEvent done = fact(run.fact(id, TransferCompleted.class));
        run.addFact(RequestEvent.newBuilder(done).setEventId(id + "/cancel-ignored").setSource("proxy-0").setEventTimeMs(done.getEventTimeMs() + 1)
                .setPayload(CancelRequested.newBuilder().setRequestedBy("proxy-0").setReason("client disconnected").build()).build());
        assertOnly(audit(run), Rule.CANCEL_IGNORED, id);
    }

    @Test
    void orderAfterTheLeaseExpired() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("handoff", rid -> run.facts(rid).stream().noneMatch(r -> fact(r).getPayload() instanceof LeaseHeartbeat));
        run.editFact(run.fact(id, DecodeReady.class), e -> {
            DecodeReady dr = DecodeReady.newBuilder((DecodeReady) e.getPayload()).setLeaseDeadlineMs(e.getEventTimeMs() + 2).build();
            e.setPayload(dr);
            return e;
        });
        assertOnly(audit(run), Rule.ORDER_AFTER_LEASE_EXPIRY, id);
    }

    @Test
    void orderWithAStaleLeaseEpoch() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("handoff");
        run.editDecision(run.decision(id, TransferOrder.class), d -> {
            d.setPayload(TransferOrder.newBuilder((TransferOrder) d.getPayload()).setLeaseEpoch(0).build());
            return d;
        });
        assertOnly(audit(run), Rule.STALE_EPOCH, id);
    }

    @Test
    void aPushThatLandedLessThanItsOrdersPagesInEveryLayer() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("handoff");
        long whole = orderBytes(run, id);
        run.editFact(run.fact(id, TransferCompleted.class), e -> {
            e.setPayload(TransferCompleted.newBuilder((TransferCompleted) e.getPayload()).setBytes(whole - whole / 32).build()); // a layer short
            return e;
        });
        AuditReport r = audit(run);
        assertOnly(r, Rule.PUSH_PARTIAL, id);
        assertThat(text(r)).contains("says " + (whole - whole / 32) + " bytes moved").contains("are " + whole + " bytes");
    }

    @Test
    void aPushOfAnOrderAheadOfItsPrefillThatLandedForAPrefillNeverReportedComplete() {
        SyntheticRun run = SyntheticRun.copy();
        // a request whose order went out ahead of its prefill (no source pages): the prefill's report and the order's copy
        // that followed it gone, its push landed — what a layer-by-layer push that ran ahead of an unfinished prefill would leave
        String id = run.request("handoff", rid -> ((TransferOrder) decision(run.decision(rid, TransferOrder.class)).getPayload()).getSourceBlocks()
                .isEmpty());
        run.decisions(id).stream().filter(r -> decision(r).getPayload() instanceof TransferOrder o && !o.getSourceBlocks().isEmpty())
                .toList().forEach(run::remove);
        run.remove(run.fact(id, io.orbitkv.pd.events.PrefillCompleted.class));
        AuditReport r = audit(run);
        assertThat(r.violations()).as(text(r)).anySatisfy(v -> {
            assertThat(v.rule()).isEqualTo(Rule.PUSH_PARTIAL);
            assertThat(v.requestId()).isEqualTo(id);
            assertThat(v.message()).contains("an order ahead of its prefill, landed but the source never reported the prefill complete");
        });
    }

    @Test
    void pushAcknowledgedAfterTheLeaseWasReleased() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("cancel", rid -> run.facts(rid).stream().noneMatch(r -> fact(r).getPayload() instanceof TransferFailed));
        long released = run.decisions(id).stream().map(SyntheticRun::decision).filter(d -> d.getPayload() instanceof ReleaseDecided rd
                && rd.getSide() == ReleaseSide.DECODE).mapToLong(Decision::getStreamTimeMs).findFirst().orElseThrow();
        RequestEvent started = fact(run.fact(id, io.orbitkv.pd.events.TransferStarted.class));
        run.addFact(RequestEvent.newBuilder(started).setEventId(id + "/late-ack").setEventTimeMs(released + 20)
                .setPayload(TransferCompleted.newBuilder().setOrderId(id + "/a1").setAttempt(1).setWorkerId("w").setBytes(orderBytes(run, id))
                        .setDurationUs(1).build())
                .build());
        assertOnly(audit(run), Rule.PUSH_ACK_STALE_EPOCH, id);
    }

    @Test
    void pushAcknowledgedBeforeTheReleaseWasReadIntoPagesNoDecodeReadyHeld() {
        // A corrupted log the audit once crashed on (a NullPointerException in EpochChecker): the order names its decode
        // pages under a lease no accepted DecodeReady held (so the attempt has no destination hold), and its push is
        // acknowledged in a record read before the DECODE release yet at a later stream time than the release.
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("cancel", rid -> run.facts(rid).stream().noneMatch(r -> fact(r).getPayload() instanceof TransferFailed));
        for (LogRecord r : run.decisions(id)) {
            if (decision(r).getPayload() instanceof TransferOrder) {
                run.editDecision(r, d -> {
                    d.setPayload(TransferOrder.newBuilder((TransferOrder) d.getPayload()).setLeaseId("forged-lease").build());
                    return d;
                });
            }
        }
        LogRecord releaseRecord = run.decisions(id).stream().filter(r -> decision(r).getPayload() instanceof ReleaseDecided rd
                && rd.getSide() == ReleaseSide.DECODE).findFirst().orElseThrow();
        Decision release = decision(releaseRecord);
        long ackedAt = release.getStreamTimeMs() + 1;
        // the release and the decisions after it keep their stream time but are read after the acknowledgement: records of
        // one timestamp are read facts first, then decisions in offset order (so still in seq order)
        for (LogRecord r : run.decisions(id)) {
            if (decision(r).getSeq() >= release.getSeq() && r.timestamp() < ackedAt) {
                run.remove(r);
                run.addRaw(new LogRecord(r.role(), r.topic(), r.partition(), r.offset(), ackedAt, r.key(), r.value(), false, r.timing()));
            }
        }
        RequestEvent started = fact(run.fact(id, io.orbitkv.pd.events.TransferStarted.class));
        run.addFact(RequestEvent.newBuilder(started).setEventId(id + "/early-read-ack").setEventTimeMs(ackedAt)
                .setPayload(TransferCompleted.newBuilder().setOrderId(id + "/a1").setAttempt(1).setWorkerId("w").setBytes(orderBytes(run, id))
                        .setDurationUs(1).build())
                .build());
        AuditReport r = audit(run); // used to throw a NullPointerException
        assertOnly(r, Rule.STALE_EPOCH, id);
        assertOnly(r, Rule.PUSH_ACK_STALE_EPOCH, id);
        assertThat(r.violations()).as(text(r)).extracting(Violation::rule).containsOnly(Rule.STALE_EPOCH, Rule.PUSH_ACK_STALE_EPOCH);
        // found when the release is read, and dated by the release itself (the order has no destination hold)
        assertThat(r.violations()).as(text(r)).filteredOn(v -> v.rule() == Rule.PUSH_ACK_STALE_EPOCH).singleElement().satisfies(v -> {
            assertThat(v.where()).isEqualTo(releaseRecord.where());
            assertThat(v.message()).contains("forged-lease").contains("released at " + RuleChecker.time(release.getStreamTimeMs()));
        });
    }

    @Test
    void retriesBeyondTheLimit() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("retry");
        DeciderPolicy oneAttempt = new DeciderPolicy(POLICY.prefillTimeout(), POLICY.decodeReadyTimeout(), POLICY.transferTimeout(),
                POLICY.leaseDuration(), POLICY.admissionGrace(), POLICY.drainGrace(), POLICY.retention(), 1, POLICY.backoffBase(),
                POLICY.backoffMax(), POLICY.maxRuns(), POLICY.historyLimit(), POLICY.authKey());
        AuditReport r = audit(run, oneAttempt);
        assertThat(r.violations()).anySatisfy(v -> {
            assertThat(v.rule()).isEqualTo(Rule.RETRY_OUT_OF_BOUNDS);
            assertThat(v.requestId()).isEqualTo(id);
        });
        assertThat(r.violations()).allSatisfy(v -> assertThat(v.rule()).isEqualTo(Rule.RETRY_OUT_OF_BOUNDS));
    }

    @Test
    void retryOfAnAttemptThatDidNotFail() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("handoff");
        Decision first = decision(run.decision(id, TransferOrder.class));
        TransferOrder o = (TransferOrder) first.getPayload();
        // a second order right after the first: the decider issues one only after a failure or a timeout
        run.insertDecision(id, first.getSeq() + 1, first.getStreamTimeMs(), TransferOrder.newBuilder(o).setAttempt(2).setOrderId(id + "/a2").build(),
                first.getCauseEventId());
        AuditReport r = audit(run);
        assertThat(r.violations()).anySatisfy(v -> {
            assertThat(v.rule()).isEqualTo(Rule.RETRY_WITHOUT_FAILURE);
            assertThat(v.requestId()).isEqualTo(id);
        });
    }

    /**
     * The by-hand partition run of issue 31: attempt 1's deadline passed (the decider aborted it and ordered attempt 2), and
     * only then did the worker's report of the abort arrive, {@code ABORTED} with retriable=false. The retry followed the
     * timeout; the audit flagged it {@code RETRY_WITHOUT_FAILURE} (4× in that run).
     */
    @Test
    void aNonRetriableReportAfterTheAttemptTimedOutDoesNotForbidTheRetry() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("retry");
        LogRecord failed = run.fact(id, TransferFailed.class);
        run.editFact(failed, e -> {
            TransferFailed tf = (TransferFailed) e.getPayload();
            e.setPayload(TransferFailed.newBuilder(tf).setRetriable(false).build());
            return e;
        });
        LogRecord second = run.decisions(id).stream().filter(r -> decision(r).getPayload() instanceof TransferOrder o && o.getAttempt() == 2)
                .findFirst().orElseThrow();
        long failedAt = fact(failed).getEventTimeMs();
        java.util.function.LongConsumer deadline = ms -> run.decisions(id).stream()
                .filter(r -> decision(r).getPayload() instanceof TransferOrder o && o.getAttempt() == 1)
                .forEach(r -> run.editDecision(r, d -> {
                    d.setPayload(TransferOrder.newBuilder((TransferOrder) d.getPayload()).setDeadlineMs(ms).build());
                    return d;
                }));
        deadline.accept(failedAt - 1);
        assertThat(audit(run).violations()).as("the retry followed attempt 1's deadline").noneMatch(v -> v.rule() == Rule.RETRY_WITHOUT_FAILURE);
        // The same report with attempt 1 still within its deadline: that retry is a violation.
        deadline.accept(decision(second).getStreamTimeMs() + 60_000);
        assertThat(audit(run).violations()).anySatisfy(v -> assertThat(v.rule()).isEqualTo(Rule.RETRY_WITHOUT_FAILURE));
    }

    @Test
    void retryBeforeItsBackoff() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("retry");
        long failedAt = fact(run.fact(id, TransferFailed.class)).getEventTimeMs();
        LogRecord second = run.decisions(id).stream().filter(r -> decision(r).getPayload() instanceof TransferOrder o && o.getAttempt() == 2)
                .findFirst().orElseThrow();
        run.editDecision(second, d -> {
            d.setStreamTimeMs(failedAt + 1);
            return d;
        });
        assertOnly(audit(run), Rule.RETRY_BEFORE_BACKOFF, id);
    }

    @Test
    void timingsThatContradictTheLog() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("handoff");
        run.editDecision(run.decision(id, RequestOutcome.class), d -> {
            RequestOutcome o = (RequestOutcome) d.getPayload();
            PhaseTimings t = PhaseTimings.newBuilder(o.getTimings()).setTransferCompletedMs(o.getTimings().getOrderIssuedMs() - 1).build();
            d.setPayload(RequestOutcome.newBuilder(o).setTimings(t).build());
            return d;
        });
        assertOnly(audit(run), Rule.TIMINGS_INCONSISTENT, id);
    }

    @Test
    void aGapInTheDecisionLog() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("handoff");
        run.remove(run.decision(id, KvReady.class));
        assertOnly(audit(run), Rule.DECISION_SEQUENCE, id);
    }

    @Test
    void twoDifferentDecisionsWithOneId() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("handoff");
        Decision kv = decision(run.decision(id, KvReady.class));
        Decision last = run.lastDecision(id);
        run.addDecision(Decision.newBuilder(kv).setStreamTimeMs(last.getStreamTimeMs() + 1)
                .setPayload(KvReady.newBuilder((KvReady) kv.getPayload()).setBytes(1).build()).build());
        assertOnly(audit(run), Rule.DECISION_CONFLICT, id);
    }

    @Test
    void anIdenticalRedeliveredDecisionIsNotAViolation() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("handoff");
        Decision kv = decision(run.decision(id, KvReady.class));
        run.addDecision(kv);
        AuditReport r = audit(run);
        assertThat(r.clean()).as(text(r)).isTrue();
        assertThat(text(r)).contains("1 identical redelivered decisions");
    }

    @Test
    void abortOfAnAttemptNeverOrdered() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("decode-rejected");
        Decision last = run.lastDecision(id);
        run.addDecision(next(last, last.getStreamTimeMs() + 1, AbortTransfer.newBuilder().setOrderId(id + "/a1").setAttempt(1)
                .setSourceEngineId("prefill-0").setDestEngineId("decode-0").setReason("?").build(), null));
        assertOnly(audit(run), Rule.ABORT_WITHOUT_ORDER, id);
    }

    @Test
    void undecodableRecordsAreCountedAndShownNotFatal() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("handoff");
        LogRecord kv = run.decision(id, KvReady.class);
        byte[] garbage = {(byte) 0xC3, 0x01, 1, 2, 3};
        run.addRaw(LogRecord.of(TopicRole.DECISIONS, kv.topic(), kv.partition(), 5_000_000, kv.timestamp() + 1, kv.key(), garbage));
        LogRecord f = run.fact(id, DecodeCompleted.class);
        run.addRaw(LogRecord.of(TopicRole.REQUEST_EVENTS, f.topic(), f.partition(), 5_000_001, f.timestamp() + 1, f.key(), new byte[] {0x13, 0x37}));
        AuditReport r = audit(run);
        assertThat(r.undecodableCount()).isEqualTo(2);
        assertThat(r.undecodableSamples()).extracting(AuditReport.Undecodable::where)
                .containsExactlyInAnyOrder(kv.topic() + "-" + kv.partition() + "@5000000", f.topic() + "-" + f.partition() + "@5000001");
        // an undecodable fact is dead-lettered by the decider; an undecodable decision breaks a promise
        assertOnly(r, Rule.UNDECODABLE_DECISION, id);
    }

    @Test
    void aRequestStillInFlightAtTheEndIsNotAViolation() {
        SyntheticRun run = SyntheticRun.copy();
        // cut the log right after the last request's order: nothing is over yet, and the log ends within its deadlines
        String id = SyntheticRun.copy().request("handoff", rid -> rid.compareTo("syn-000200") > 0);
        long cut = decision(run.decision(id, TransferOrder.class)).getStreamTimeMs();
        run.records().stream().filter(r -> r.timestamp() > cut).forEach(run::remove);
        AuditReport r = audit(run);
        assertThat(r.clean()).as(text(r)).isTrue();
        assertThat(r.openAtEnd()).isPositive();
    }

    @Test
    void aSliceFromTheMiddleChecksTheRequestsItHoldsWholeAndLeavesOutTheRest() {
        SyntheticRun run = SyntheticRun.copy(SyntheticRun.SLOW);
        long cut = SyntheticRun.SLOW.startMs() + 3_000; // a quarter of the requests started before
        io.orbitkv.pd.logtools.LogSlice s = SyntheticRun.slice();
        io.orbitkv.pd.logtools.LogSlice later = new io.orbitkv.pd.logtools.LogSlice(s.origin(), s.serdeMode(), s.createdMs(), null,
                s.topics().stream().map(t -> new io.orbitkv.pd.logtools.LogSlice.TopicSlice(t.name(), t.role(), t.partitions().stream()
                        .map(p -> new io.orbitkv.pd.logtools.LogSlice.PartitionRange(p.partition(), p.start(), p.end(), false)).toList())).toList());
        Auditor a = new Auditor(SERDES, POLICY, later, 100);
        run.records().stream().filter(r -> r.timestamp() >= cut).forEach(a::accept);
        AuditReport r = a.finish(1);
        assertThat(r.violations()).as(text(r)).isEmpty();
        assertThat(r.partial()).isPositive();
        assertThat(r.checked()).isPositive();
        assertThat(r.checked() + r.partial()).isLessThanOrEqualTo(SyntheticRun.SLOW.requests());
    }

    @Test
    void theJsonReportNamesEveryViolation() throws Exception {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("handoff");
        run.remove(run.decision(id, RequestOutcome.class));
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        audit(run).writeJson(b);
        JsonNode json = new ObjectMapper().readTree(b.toByteArray());
        assertThat(json.get("clean").asBoolean()).isFalse();
        assertThat(json.get("violations_by_rule").get("OUTCOME_MISSING").asInt()).isEqualTo(1);
        assertThat(json.get("violations").get(0).get("request_id").asText()).isEqualTo(id);
        assertThat(json.get("records").get("decisions").asLong()).isPositive();
    }

    @Test
    void slackCoversEveryDeadlineOfThePolicy() {
        Auditor a = new Auditor(SERDES, POLICY, SyntheticRun.slice(), 10);
        assertThat(a.slackMs()).isGreaterThanOrEqualTo(POLICY.prefillTimeout().plus(POLICY.drainGrace()).toMillis());
        assertThat(Duration.ofMillis(a.slackMs())).isLessThan(Duration.ofMinutes(5));
    }
}
