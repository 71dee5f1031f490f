package io.orbitkv.pd.logtools.audit;

/**
 * One broken invariant, located.
 *
 * @param rule      which invariant
 * @param requestId the request it concerns
 * @param where     the record that showed it ({@code topic-partition@offset}), or "end of log"
 * @param message   what is wrong, with the ids and times involved
 */
public record Violation(Rule rule, String requestId, String where, String message) {

    @Override
    public String toString() {
        return requestId + "  " + rule + "  " + where + "  " + message;
    }
}
