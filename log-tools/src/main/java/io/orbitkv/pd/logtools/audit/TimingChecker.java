package io.orbitkv.pd.logtools.audit;

import static io.orbitkv.pd.logtools.audit.RuleChecker.time;

import io.orbitkv.pd.events.PhaseTimings;
import io.orbitkv.pd.logtools.LogSlice;
import io.orbitkv.pd.logtools.TopicRole;
import io.orbitkv.pd.logtools.audit.Observation.DecisionRead;
import io.orbitkv.pd.logtools.audit.Observation.OutcomeDecided;
import io.orbitkv.pd.logtools.audit.Observation.Repeat;
import io.orbitkv.pd.logtools.audit.RequestHistory.Fact;
import io.orbitkv.pd.logtools.audit.RequestHistory.Kind;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * The timings rule ({@link Rule#TIMINGS_INCONSISTENT}): an outcome's milestones are the stream times of the steps
 * that reached them, so they must match the log and each other, and the decider's stream time never goes back.
 * A milestone is compared exactly only where the slice starts at the partition's log start, since stream time
 * before the slice is unknown.
 */
record TimingChecker(LogSlice slice) implements RuleChecker {

    @Override
    public void check(RequestHistory r, Observation seen, Violations out) {
        switch (seen) {
            case DecisionRead read when read.repeat() == Repeat.NEW && read.decision().getStreamTimeMs() < r.lastDecisionTime ->
                    out.add(Rule.TIMINGS_INCONSISTENT, r.id, read.where(), read.type() + " seq " + read.decision().getSeq()
                            + " decided at stream time " + time(read.decision().getStreamTimeMs()) + ", before the previous decision ("
                            + time(r.lastDecisionTime) + "): stream time never goes back");
            case OutcomeDecided o -> milestones(r, o, out);
            default -> { }
        }
    }

    private void milestones(RequestHistory r, OutcomeDecided o, Violations out) {
        PhaseTimings tm = o.outcome().getTimings();
        long t = r.finishedAt;
        boolean exact = slice.fromLogStart(TopicRole.REQUEST_EVENTS, r.partition);
        List<String> bad = new ArrayList<>();
        if (tm.getFinishedMs() == null || tm.getFinishedMs() != t) {
            bad.add("finished_ms " + tm.getFinishedMs() + " but the outcome was decided at " + t);
        }
        Fact admit = r.first(Kind.ADMITTED);
        if (admit != null) {
            if (tm.getAdmittedMs() == null) {
                bad.add("admitted_ms missing for an admitted request");
            } else if (exact && tm.getAdmittedMs() != admit.streamTime) {
                bad.add("admitted_ms " + tm.getAdmittedMs() + " but " + admit.eventId + " was processed at " + admit.streamTime);
            }
        }
        milestone(bad, "prefill_completed_ms", tm.getPrefillCompletedMs(), r, Kind.PREFILL, exact);
        milestone(bad, "decode_ready_ms", tm.getDecodeReadyMs(), r, Kind.DECODE_READY, exact);
        if (!Objects.equals(tm.getOrderIssuedMs(), r.firstOrderAt < 0 ? null : r.firstOrderAt)) {
            bad.add("order_issued_ms " + tm.getOrderIssuedMs() + " but the first order was at " + (r.firstOrderAt < 0 ? "none" : r.firstOrderAt));
        }
        if (!Objects.equals(tm.getTransferCompletedMs(), r.kvReadyAt < 0 ? null : r.kvReadyAt)) {
            bad.add("transfer_completed_ms " + tm.getTransferCompletedMs() + " but KvReady was at " + (r.kvReadyAt < 0 ? "none" : r.kvReadyAt));
        }
        Long[] chain = {tm.getAdmittedMs(), tm.getOrderIssuedMs(), tm.getTransferCompletedMs(), tm.getFinishedMs()};
        String[] names = {"admitted", "order_issued", "transfer_completed", "finished"};
        for (int i = 1; i < chain.length; i++) {
            for (int j = 0; j < i; j++) {
                if (chain[i] != null && chain[j] != null && chain[i] < chain[j]) {
                    bad.add(names[i] + " " + chain[i] + " before " + names[j] + " " + chain[j]);
                }
            }
        }
        for (Long side : new Long[] {tm.getPrefillCompletedMs(), tm.getDecodeReadyMs()}) {
            boolean mayFollow = r.firstOrderAhead && side == tm.getPrefillCompletedMs(); // an order ahead precedes the prefill
            if (side != null && tm.getOrderIssuedMs() != null && side > tm.getOrderIssuedMs() && !mayFollow) {
                bad.add("an order issued (" + tm.getOrderIssuedMs() + ") before both sides were in (" + side + ")");
            }
            if (side != null && tm.getFinishedMs() != null && side > tm.getFinishedMs()) {
                bad.add("a milestone " + side + " after finished " + tm.getFinishedMs());
            }
        }
        if (!bad.isEmpty()) {
            out.add(Rule.TIMINGS_INCONSISTENT, r.id, o.where(), "RequestOutcome " + o.outcome().getKind() + " timings: " + String.join("; ", bad));
        }
    }

    private static void milestone(List<String> bad, String name, Long value, RequestHistory r, Kind kind, boolean exact) {
        Fact f = r.first(kind);
        // Strictly before: stream time is the partition's running maximum, so a fact processed after the outcome has a stream
        // time >= the finish; at the same millisecond the order is unknown, and an audit must not invent violations.
        if (value == null && f != null && f.streamTime < r.finishedAt) {
            bad.add(name + " missing although " + f.eventId + " was processed");
        } else if (value != null && f != null && exact && value != f.streamTime) {
            bad.add(name + " " + value + " but " + f.eventId + " was processed at " + f.streamTime);
        }
    }
}
