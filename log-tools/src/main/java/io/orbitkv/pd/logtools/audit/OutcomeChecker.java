package io.orbitkv.pd.logtools.audit;

import static io.orbitkv.pd.logtools.audit.RuleChecker.time;

import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.logtools.audit.Observation.Ended;
import io.orbitkv.pd.logtools.audit.Observation.OutcomeDecided;
import io.orbitkv.pd.logtools.audit.Observation.OutcomeRepeated;
import io.orbitkv.pd.logtools.audit.RequestHistory.Kind;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * The outcome rules ({@link Rule#OUTCOME_MISSING}, {@link Rule#OUTCOME_DUPLICATE}, {@link Rule#OUTCOME_UNADMITTED},
 * {@link Rule#OUTCOME_INCONSISTENT}): exactly one outcome per admitted request, and one that agrees with the log.
 * A missing outcome counts only once the log runs the slack past the request's last activity, so work in flight
 * at the end of the log is never a violation.
 */
record OutcomeChecker(long slack) implements RuleChecker {

    @Override
    public void check(RequestHistory r, Observation seen, Violations out) {
        switch (seen) {
            case OutcomeRepeated o -> out.add(Rule.OUTCOME_DUPLICATE, r.id, o.where(), "second RequestOutcome " + o.outcome().getKind()
                    + " (seq " + o.seq() + ") after " + r.outcomeKind + " (seq " + r.outcomeSeq + ")");
            case OutcomeDecided o -> consistent(r, o.outcome(), o.where(), out);
            case Ended e -> ended(r, e, out);
            default -> { }
        }
    }

    private static void consistent(RequestHistory r, RequestOutcome out, String where, Violations violations) {
        List<String> wrong = new ArrayList<>();
        if (out.getAttempts() != r.lastAttempt) {
            wrong.add("attempts " + out.getAttempts() + " but the log has " + r.lastAttempt + " order(s)");
        }
        if (r.admitted() && (!Objects.equals(out.getPrefillEngineId(), r.prefillEngine) || !Objects.equals(out.getDecodeEngineId(), r.decodeEngine))) {
            wrong.add("engines " + out.getPrefillEngineId() + "/" + out.getDecodeEngineId() + " but admitted for " + r.prefillEngine + "/"
                    + r.decodeEngine);
        }
        if (out.getKind() == OutcomeKind.COMPLETED && ((r.kvReadyAt < 0 && r.recomputeAt < 0) || r.first(Kind.DECODE_COMPLETED) == null)) {
            wrong.add("COMPLETED without " + (r.kvReadyAt < 0 && r.recomputeAt < 0 ? "KvReady or RecomputeDecided" : "DecodeCompleted"));
        }
        if (out.getKind() == OutcomeKind.CANCELLED && r.first(Kind.CANCEL) == null) {
            wrong.add("CANCELLED without a CancelRequested");
        }
        if (out.getKvBytes() > 0 && r.kvReadyAt < 0) {
            wrong.add("kv_bytes " + out.getKvBytes() + " without KvReady");
        }
        if (!wrong.isEmpty()) {
            violations.add(Rule.OUTCOME_INCONSISTENT, r.id, where, "RequestOutcome " + out.getKind() + ": " + String.join("; ", wrong));
        }
    }

    private void ended(RequestHistory r, Ended e, Violations out) {
        boolean admitted = r.admitted();
        long end = e.streamTime();
        if (admitted && r.outcomes == 0 && !e.inFlight()) {
            out.add(Rule.OUTCOME_MISSING, r.id, "end of log", "admitted at " + time(r.first(Kind.ADMITTED).streamTime) + ", last activity "
                    + time(r.lastActivity) + ", but no RequestOutcome although the log runs to " + time(end) + " ("
                    + (end - r.lastActivity) + " ms later; every deadline is within " + slack + " ms)");
        }
        // A request known only by facts whose admission never came ends FAILED once the admission grace passed (since
        // 2026-12-04; older logs have no outcome for it).
        boolean closedUnadmitted = r.neverAdmitted && r.outcomes == 1 && r.outcomeKind == OutcomeKind.FAILED;
        if (!admitted && r.outcomes > 0 && !closedUnadmitted) {
            out.add(Rule.OUTCOME_UNADMITTED, r.id, "end of log", r.outcomes + " RequestOutcome(s) (" + r.outcomeKind + ") for a request that"
                    + " was never admitted");
        }
    }
}
