package io.orbitkv.pd.logtools.audit;

import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.logtools.audit.Observation.DecisionRead;
import io.orbitkv.pd.logtools.audit.Observation.Repeat;
import io.orbitkv.pd.logtools.audit.Observation.UndecodableDecision;

/**
 * The decision log rules ({@link Rule#DECISION_SEQUENCE}, {@link Rule#DECISION_CONFLICT},
 * {@link Rule#UNDECODABLE_DECISION}): one decider, deterministic, writes each request's decisions as a gapless
 * sequence under the request's key, so readers of one partition see all of them and a redelivery is the same bytes.
 */
final class DecisionLogChecker implements RuleChecker {

    @Override
    public void check(RequestHistory r, Observation seen, Violations out) {
        switch (seen) {
            case UndecodableDecision u -> out.add(Rule.UNDECODABLE_DECISION, u.key() == null ? "?" : u.key(), u.where(), u.reason());
            case DecisionRead read -> sequence(r, read, out);
            default -> { }
        }
    }

    private static void sequence(RequestHistory r, DecisionRead read, Violations out) {
        Decision d = read.decision();
        String where = read.where();
        if (!d.getRequestId().equals(read.key())) {
            out.add(Rule.DECISION_SEQUENCE, r.id, where, "decision for " + r.id + " keyed by '" + read.key()
                    + "': readers of one request's partition would miss it");
        }
        if (read.repeat() == Repeat.CONFLICTING) {
            out.add(Rule.DECISION_CONFLICT, r.id, where, "decision " + d.getDecisionId() + " (" + read.type() + ") differs from the decision"
                    + " with the same seq recorded earlier: the request was decided twice");
        }
        if (read.repeat() != Repeat.NEW) {
            return;
        }
        int seq = d.getSeq();
        if (seq > r.nextSeq) {
            out.add(Rule.DECISION_SEQUENCE, r.id, where, "decision seq " + seq + " (" + read.type() + ") where " + r.nextSeq + " was next: "
                    + (seq - r.nextSeq) + " decision(s) missing from the log");
        }
        if (!d.getDecisionId().equals(r.id + "/" + seq)) {
            out.add(Rule.DECISION_SEQUENCE, r.id, where, "decision id '" + d.getDecisionId() + "' is not '" + r.id + "/" + seq + "'");
        }
    }
}
