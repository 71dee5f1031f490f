package io.orbitkv.pd.logtools.audit;

/**
 * The invariants {@code orbitkv-pd audit} checks, each a promise of DESIGN.md ("exactly one outcome", "fencing",
 * "one decider, deterministic") seen from the log alone. {@code docs/log-tools.md} explains each rule and why it
 * cannot fire on a correct run.
 */
public enum Rule {
    OUTCOME_MISSING("outcomes", "an admitted request has no RequestOutcome although the log runs past every deadline it had"),
    OUTCOME_DUPLICATE("outcomes", "a request has more than one RequestOutcome"),
    OUTCOME_UNADMITTED("outcomes", "a RequestOutcome for a request that was never admitted (other than the one FAILED outcome after the admission grace)"),
    OUTCOME_INCONSISTENT("outcomes", "the outcome contradicts the log (attempts, engines, a completion without KV, a cancel without a cancel)"),
    PAGES_NOT_RELEASED("pages", "a page set a fact reported as held was never released (and the log runs past its drain)"),
    PAGES_RELEASED_TWICE("pages", "a page set released more often than it was held (twice, or never held)"),
    RELEASE_BEFORE_DRAIN("pages", "pages released while a transfer attempt could still push into or read from them"),
    ORDER_AFTER_OUTCOME("orders", "a TransferOrder after the request's outcome"),
    ORDER_AFTER_CANCEL("orders", "a TransferOrder after an accepted CancelRequested"),
    CANCEL_IGNORED("orders", "an accepted CancelRequested of an admitted request that no decision answered"),
    ORDER_AFTER_LEASE_EXPIRY("orders", "a TransferOrder at or after the end of the destination lease"),
    ABORT_WITHOUT_ORDER("orders", "an AbortTransfer of an attempt that was never ordered"),
    STALE_EPOCH("epochs", "an order or decode release that does not carry the lease epoch / instance epochs of the pages it names"),
    PUSH_ACK_STALE_EPOCH("epochs", "a TransferCompleted (a push acknowledged) after the destination lease was released"),
    PUSH_PARTIAL("transfers", "a TransferCompleted (a push landed) that moved other than its order's destination pages in every layer, or that"
            + " completed an order ahead of its prefill before the source reported the prefill complete (a partial KV, layer by layer)"),
    RETRY_OUT_OF_BOUNDS("retries", "attempt numbers not 1, 2, 3 ... or beyond decider.retry.max-attempts"),
    RETRY_WITHOUT_FAILURE("retries", "a new attempt although the previous one neither failed retriably nor timed out"),
    RETRY_BEFORE_BACKOFF("retries", "a new attempt before the backoff after the previous one's failure"),
    TIMINGS_INCONSISTENT("timings", "phase timings that disagree with the log or with each other, or decision time running backwards"),
    DECISION_SEQUENCE("decision log", "decision seq numbers with gaps, ids not <request>/<seq>, or a decision keyed by another request"),
    DECISION_CONFLICT("decision log", "two different decisions with the same id"),
    UNDECODABLE_DECISION("decision log", "a record on the decisions topic that does not decode (only the decider writes there)");

    private final String group;
    private final String description;

    Rule(String group, String description) {
        this.group = group;
        this.description = description;
    }

    /** The family of promises the rule belongs to (outcomes, pages, orders, epochs, retries, timings, decision log). */
    public String group() {
        return group;
    }

    public String description() {
        return description;
    }
}
