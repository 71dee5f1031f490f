package io.orbitkv.pd.dashboard.internal;

/**
 * Keys of the window stores and the counter and histogram names inside their aggregates: the one place both the
 * processor (writer) and the queries (readers) take them from. Durations are in microseconds.
 */
public final class StatsKeys {

    private StatsKeys() { }

    /** Counter {@code admitted}. */
    public static final String REQUESTS = "requests";
    /** Counters per outcome kind, {@code kv_bytes}, {@code attempts}; histograms per phase. */
    public static final String OUTCOMES = "outcomes";
    /** Counters {@code orders}, {@code retries}; histogram {@code decision}. */
    public static final String ORDERS = "orders";
    /** Counters {@code completed}, {@code failed}, {@code failed_retriable}, {@code bytes}; histogram {@code duration}. */
    public static final String TRANSFERS = "transfers";
    /** Counters {@code <source>|<kind>|<reason class>}. */
    public static final String FAILURES = "failures";
    /** Counter {@code rejected_inputs} (InputRejected decisions). */
    public static final String INPUTS = "inputs";
    /** Histograms per hop of the handoff, named by {@code Hop} key (wall clock, from the records' timing marks). */
    public static final String HOPS = "hops";
    /** Per engine: {@code as_prefill}, {@code as_decode}, outcome kinds, {@code kv_bytes}, {@code transfer_failed}, {@code fail|<class>}; histogram {@code handoff}. */
    public static final String ENGINE_PREFIX = "engine/";

    public static final String ADMITTED = "admitted";
    public static final String KV_BYTES = "kv_bytes";
    public static final String ATTEMPTS = "attempts";
    public static final String ORDERS_COUNT = "orders";
    public static final String RETRIES = "retries";
    public static final String COMPLETED = "completed";
    public static final String FAILED = "failed";
    public static final String FAILED_RETRIABLE = "failed_retriable";
    public static final String BYTES = "bytes";
    public static final String REJECTED_INPUTS = "rejected_inputs";
    public static final String AS_PREFILL = "as_prefill";
    public static final String AS_DECODE = "as_decode";
    public static final String TRANSFER_FAILED = "transfer_failed";
    public static final String FAIL_PREFIX = "fail|";

    public static final String H_PREFILL = "prefill";
    public static final String H_DECODE_READY = "decode_ready";
    public static final String H_HANDOFF = "handoff";
    public static final String H_DECODE = "decode";
    public static final String H_END_TO_END = "end_to_end";
    public static final String H_DECISION = "decision";
    public static final String H_TRANSFER = "duration";

    /** Outcome kinds shown everywhere, in this order. */
    public static final String[] KINDS = {"COMPLETED", "CANCELLED", "TIMED_OUT", "FAILED"};

    /** Distinct failure reason classes kept per window and key; the rest count as "other". */
    public static final int MAX_REASONS = 64;
    public static final int MAX_ENGINE_REASONS = 16;
}
