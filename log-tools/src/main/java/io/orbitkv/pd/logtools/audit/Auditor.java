package io.orbitkv.pd.logtools.audit;

import io.orbitkv.pd.decider.DeciderPolicy;
import io.orbitkv.pd.logtools.LogRecord;
import io.orbitkv.pd.logtools.LogSlice;
import io.orbitkv.pd.logtools.LogSource;
import io.orbitkv.pd.logtools.Progress;
import io.orbitkv.pd.schemas.EventSerdes;
import java.util.Arrays;
import java.util.List;

/**
 * Checks the decider's invariants ({@link Rule}) over a recorded log, streaming: one pass in merged order, state
 * per request that is bounded by what the request holds (its page sets, at most a few attempts, a handful of
 * significant facts) rather than by how many events it had, and requests dropped once they are finished and
 * older than the decider's own retention. Every value is decoded with the deployment's real serdes; a record
 * that does not decode is counted and shown, never a crash.
 *
 * <p>How it reconstructs order: the facts of a request are in one partition in processing order; decisions of a
 * request are totally ordered by {@code seq}; a decision names the fact that caused it; and the audit tracks
 * each partition's stream time (the largest timestamp so far, as Kafka Streams does), so it knows the stream time
 * at which the decider processed each fact. Rules compare those, never wall clocks. Where the log cannot tell
 * (facts of equal timestamps read before a decision they came after), a rule errs toward silence: a correct
 * run must audit clean.
 *
 * <p>Requests in flight at the end of the log are not violations: a missing outcome or release counts only
 * when the partition's stream time ran past every deadline the request could still have been waiting for.
 *
 * <p>The work is split so that each part can be read alone: a {@link RequestLedger} folds the records into one
 * {@link RequestHistory} per request, and one {@link RuleChecker} per rule family judges what it observes. Not
 * thread-safe; one instance audits one log.
 */
public final class Auditor {

    private final AuditReport report;
    private final long slack;
    private final RequestLedger ledger;
    private final RuleChecker.Violations violations;
    /**
     * In the order they see each observation, which is the order a record's violations are listed in: a record's
     * decision log first, then its timings, outcome, pages, epochs, orders and retries.
     */
    private final List<RuleChecker> checkers;

    /**
     * @param serdes    the deployment's serdes (values are decoded with them)
     * @param policy    the decider's policy (timeouts, drain, attempts) the log was made under
     * @param slice     what is being audited (used to tell requests that began before the slice)
     * @param maxListed violations listed in the report (all are counted)
     */
    public Auditor(EventSerdes serdes, DeciderPolicy policy, LogSlice slice, int maxListed) {
        this.report = new AuditReport(slice, maxListed);
        long longest = max(policy.prefillTimeout().toMillis(), policy.decodeReadyTimeout().toMillis(), policy.leaseDuration().toMillis(),
                policy.transferTimeout().toMillis(), policy.admissionGrace().toMillis());
        // A release may wait up to twice the lease for a given-up attempt's report (RequestStateMachine: settle_by_ms).
        this.slack = longest + policy.drainGrace().toMillis() + 2 * policy.leaseDuration().toMillis() + policy.backoffMax().toMillis() + 1_000;
        this.checkers = List.of(new DecisionLogChecker(), new TimingChecker(slice), new OutcomeChecker(slack), new PageChecker(policy),
                new EpochChecker(), new OrderChecker(), new TransferChecker(), new RetryChecker(policy));
        this.ledger = new RequestLedger(serdes, policy, slice, slack, report, this::check);
        this.violations = ledger::violation;
    }

    /** Audits everything {@code source} holds. */
    public static AuditReport audit(LogSource source, EventSerdes serdes, DeciderPolicy policy, int maxListed, Progress progress) {
        long t0 = System.nanoTime();
        Auditor a = new Auditor(serdes, policy, source.slice(), maxListed);
        source.read(LogSource.RecordFilter.ALL, a::accept, progress);
        return a.finish(System.nanoTime() - t0);
    }

    /**
     * How far (ms of stream time) past a request's last activity the log must run before a missing outcome or
     * release is a violation rather than work in flight: the longest deadline of the policy, plus the drain
     * grace, the longest backoff and a tick.
     */
    public long slackMs() {
        return slack;
    }

    /** Feeds one record, in merged order. */
    public void accept(LogRecord r) {
        ledger.accept(r);
    }

    /** Ends the audit: the checks that need the whole story run for every request still held. */
    public AuditReport finish(long elapsedNanos) {
        ledger.finish();
        report.elapsedNanos = elapsedNanos;
        return report;
    }

    private void check(RequestHistory request, Observation seen) {
        for (RuleChecker c : checkers) {
            c.check(request, seen, violations);
        }
    }

    private static long max(long... v) {
        return Arrays.stream(v).max().orElse(0);
    }
}
