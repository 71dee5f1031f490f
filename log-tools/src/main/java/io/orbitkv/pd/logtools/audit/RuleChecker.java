package io.orbitkv.pd.logtools.audit;

import java.time.Instant;

/**
 * One family of {@link Rule}s (a {@link Rule#group()}): the checker owns those rules' ids and messages and
 * reports them. It judges the facts {@link RequestLedger} keeps and keeps none of its own (what it must remember
 * about a request lives in the request's {@link RequestHistory}), so that a request's state is bounded and
 * dropped in one place.
 */
interface RuleChecker {

    /** Where violations go; the ledger holds them with their request until it is judged whole. */
    @FunctionalInterface
    interface Violations {
        void add(Rule rule, String requestId, String where, String message);
    }

    /**
     * Checks the family's rules at one point of the fold.
     *
     * @param request the request as the observation says, or null where the record could not be told to be one's
     */
    void check(RequestHistory request, Observation seen, Violations out);

    /** How messages show a stream time. */
    static String time(long ms) {
        return ms == Long.MAX_VALUE ? "never" : ms == Long.MIN_VALUE ? "-" : Instant.ofEpochMilli(ms).toString();
    }
}
