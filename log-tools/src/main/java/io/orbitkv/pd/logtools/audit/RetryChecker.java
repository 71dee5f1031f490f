package io.orbitkv.pd.logtools.audit;

import static io.orbitkv.pd.logtools.audit.RuleChecker.time;

import io.orbitkv.pd.decider.DeciderPolicy;
import io.orbitkv.pd.logtools.audit.Observation.IssuedOrder;
import io.orbitkv.pd.logtools.audit.Observation.NewAttempt;
import io.orbitkv.pd.logtools.audit.RequestHistory.Attempt;

/**
 * The retry rules ({@link Rule#RETRY_OUT_OF_BOUNDS}, {@link Rule#RETRY_WITHOUT_FAILURE}, {@link Rule#RETRY_BEFORE_BACKOFF}):
 * attempts are numbered 1, 2, 3 ... up to {@code decider.retry.max-attempts}, and attempt n+1 follows a retriable
 * failure, abort or deadline of attempt n by at least the policy's backoff.
 */
record RetryChecker(DeciderPolicy policy) implements RuleChecker {

    @Override
    public void check(RequestHistory r, Observation seen, Violations out) {
        if (seen instanceof NewAttempt(IssuedOrder o)) {
            attempt(r, o, out);
        }
    }

    private void attempt(RequestHistory r, IssuedOrder o, Violations out) {
        String what = o.what();
        String where = o.where();
        long t = o.t();
        int a = o.order().getAttempt();
        if (a != r.lastAttempt + 1) {
            out.add(Rule.RETRY_OUT_OF_BOUNDS, r.id, where, what + " is attempt " + a + " after attempt " + r.lastAttempt);
        }
        if (a > policy.maxAttempts() || a < 1) {
            out.add(Rule.RETRY_OUT_OF_BOUNDS, r.id, where, what + " is attempt " + a + ", beyond decider.retry.max-attempts="
                    + policy.maxAttempts());
        }
        Attempt prev = r.attempts.get(a - 1);
        if (a <= 1 || prev == null) {
            return;
        }
        // A failure report after the attempt had already ended — the decider aborted it, or its deadline passed — is the
        // consequence of that end (a worker told to abort reports ABORTED, retriable=false), not a reason against retrying.
        boolean endedBeforeItsReport = prev.failed != null && ((prev.abortedAt != null && prev.abortedAt <= prev.failed)
                || prev.order.getDeadlineMs() <= prev.failed);
        if (prev.failed != null && !prev.failedRetriable && !endedBeforeItsReport) {
            out.add(Rule.RETRY_WITHOUT_FAILURE, r.id, where, what + " after attempt " + (a - 1) + " failed for good (retriable=false)");
            return;
        }
        long signal = Long.MAX_VALUE;
        if (prev.failed != null) {
            signal = prev.failed;
        }
        if (prev.abortedAt != null) {
            signal = Math.min(signal, prev.abortedAt);
        }
        if (t >= prev.order.getDeadlineMs()) {
            signal = Math.min(signal, prev.order.getDeadlineMs());
        }
        if (signal == Long.MAX_VALUE) {
            out.add(Rule.RETRY_WITHOUT_FAILURE, r.id, where, what + ": attempt " + (a - 1) + " neither failed nor timed out (deadline "
                    + time(prev.order.getDeadlineMs()) + ")");
        } else if (t < signal + policy.backoffMs(a)) {
            out.add(Rule.RETRY_BEFORE_BACKOFF, r.id, where, what + " only " + (t - signal) + " ms after attempt " + (a - 1)
                    + " failed; the backoff before attempt " + a + " is " + policy.backoffMs(a) + " ms");
        }
    }
}
