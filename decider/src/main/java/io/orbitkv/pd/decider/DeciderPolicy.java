package io.orbitkv.pd.decider;

import java.time.Duration;

/**
 * Everything that shapes the decider's decisions (as opposed to how it runs). Two deciders with equal policies
 * and equal input logs make equal decisions, so a replay must use the policy of the recorded run.
 *
 * @param prefillTimeout     admitted → prefill completed (or failed), else TIMED_OUT
 * @param decodeReadyTimeout admitted → decode ready (or rejected), else TIMED_OUT
 * @param transferTimeout    order issued → transfer completed, on top of the time the order's bytes take at
 *                           {@code transferMinRate}; a late attempt counts as a retriable failure
 * @param leaseDuration      a lease lives this long after decode-ready or its last heartbeat
 * @param admissionGrace     facts may precede their RequestAdmitted by this much; then their pages are released
 * @param drainGrace         after an abort, how long a push may still be in flight before the pages are freed
 * @param retention          how long a finished request's state is kept (late facts, dedupe, queries)
 * @param maxAttempts        transfer attempts per request, >= 1
 * @param backoffBase        wait before attempt 2; doubles per attempt
 * @param backoffMax         cap of the backoff
 * @param maxRuns            most block runs one fact may list
 * @param historyLimit       history entries kept per request for queries
 * @param authKey            HMAC key of order tokens (shared with the receiving workers), >= 16 bytes
 * @param orderAhead         issue the order as soon as the decode pages are held, before the prefill finishes
 *                           ({@code TransferOrder.await_prefill}): a worker that hears its engine's prefill fact itself
 *                           (the engine API) pushes the moment the engine reports, with no Kafka hop in between; the
 *                           decider sends the order again with the source pages once PrefillCompleted reaches it
 * @param transferMinRate    bytes per second the slowest link is expected to carry one push at: an attempt gets
 *                           {@code transferTimeout} plus its bytes at this rate ({@code decider.transfer.min-rate}), so a
 *                           large KV on a slow link is not failed for its size (docs/decider.md, "Transfer deadlines")
 */
public record DeciderPolicy(Duration prefillTimeout, Duration decodeReadyTimeout, Duration transferTimeout,
                            Duration leaseDuration, Duration admissionGrace, Duration drainGrace, Duration retention,
                            int maxAttempts, Duration backoffBase, Duration backoffMax, int maxRuns, int historyLimit,
                            byte[] authKey, boolean orderAhead, long transferMinRate) {

    /** 50 MB/s: 400 Mbit/s, below any link a push of KV runs over (1 GiB gets 21 s on top of the transfer timeout). */
    public static final long DEFAULT_TRANSFER_MIN_RATE = 50_000_000L;

    /** A policy with the default {@link #transferMinRate()}. */
    public DeciderPolicy(Duration prefillTimeout, Duration decodeReadyTimeout, Duration transferTimeout, Duration leaseDuration,
                         Duration admissionGrace, Duration drainGrace, Duration retention, int maxAttempts, Duration backoffBase,
                         Duration backoffMax, int maxRuns, int historyLimit, byte[] authKey, boolean orderAhead) {
        this(prefillTimeout, decodeReadyTimeout, transferTimeout, leaseDuration, admissionGrace, drainGrace, retention, maxAttempts,
                backoffBase, backoffMax, maxRuns, historyLimit, authKey, orderAhead, DEFAULT_TRANSFER_MIN_RATE);
    }

    /** A policy with {@code orderAhead} on (the default). */
    public DeciderPolicy(Duration prefillTimeout, Duration decodeReadyTimeout, Duration transferTimeout, Duration leaseDuration,
                         Duration admissionGrace, Duration drainGrace, Duration retention, int maxAttempts, Duration backoffBase,
                         Duration backoffMax, int maxRuns, int historyLimit, byte[] authKey) {
        this(prefillTimeout, decodeReadyTimeout, transferTimeout, leaseDuration, admissionGrace, drainGrace, retention, maxAttempts,
                backoffBase, backoffMax, maxRuns, historyLimit, authKey, true);
    }

    public DeciderPolicy {
        positive("decider.timeout.prefill", prefillTimeout);
        positive("decider.timeout.decode-ready", decodeReadyTimeout);
        positive("decider.timeout.transfer", transferTimeout);
        positive("decider.lease.duration", leaseDuration);
        positive("decider.admission.grace", admissionGrace);
        positive("decider.drain.grace", drainGrace);
        positive("decider.retention", retention);
        positive("decider.retry.backoff.base", backoffBase);
        positive("decider.retry.backoff.max", backoffMax);
        if (maxAttempts < 1 || maxAttempts > 100) {
            throw new IllegalArgumentException("decider.retry.max-attempts: must be 1..100, got " + maxAttempts);
        }
        if (maxRuns < 1) {
            throw new IllegalArgumentException("decider.max-runs: must be >= 1, got " + maxRuns);
        }
        if (historyLimit < 0) {
            throw new IllegalArgumentException("decider.history.limit: must be >= 0, got " + historyLimit);
        }
        if (authKey == null || authKey.length < 16) {
            throw new IllegalArgumentException("auth.key: must be at least 16 bytes");
        }
        authKey = authKey.clone();
        if (transferMinRate < 1_000_000) {
            throw new IllegalArgumentException("decider.transfer.min-rate: bytes per second, at least 1000000 (1 MB/s), got " + transferMinRate);
        }
    }

    /** How long one transfer attempt of {@code bytes} may take: the transfer timeout plus the bytes at the minimum rate. */
    public long transferBudgetMs(long bytes) {
        return transferTimeout.toMillis() + Math.max(0, bytes) * 1000 / transferMinRate;
    }

    /** Defaults: 60 s prefill and decode-ready, 10 s transfer, 30 s lease, 3 attempts from 50 ms backoff, orders ahead. */
    public static DeciderPolicy defaults(byte[] authKey) {
        return new DeciderPolicy(Duration.ofSeconds(60), Duration.ofSeconds(60), Duration.ofSeconds(10), Duration.ofSeconds(30),
                // 8 attempts, 100 ms doubling to 2 s: the retries span 7.1 s, the time a killed worker takes to be back (chaos:
                // ready ~3 s after its restart); 3 attempts 50 ms apart all failed PEER_UNREACHABLE within 150 ms (docs/chaos.md).
                Duration.ofSeconds(5), Duration.ofSeconds(5), Duration.ofMinutes(10), 8, Duration.ofMillis(100), Duration.ofSeconds(2),
                65_536, 24, authKey);
    }

    /** This policy with {@link #orderAhead()} set to {@code on}. */
    public DeciderPolicy withOrderAhead(boolean on) {
        return new DeciderPolicy(prefillTimeout, decodeReadyTimeout, transferTimeout, leaseDuration, admissionGrace, drainGrace, retention,
                maxAttempts, backoffBase, backoffMax, maxRuns, historyLimit, authKey, on, transferMinRate);
    }

    /** Backoff before {@code nextAttempt} (2, 3, ...): base · 2^(nextAttempt-2), capped. */
    public long backoffMs(int nextAttempt) {
        long ms = backoffBase.toMillis() << Math.min(20, Math.max(0, nextAttempt - 2));
        return Math.min(ms, backoffMax.toMillis());
    }

    @Override
    public byte[] authKey() {
        return authKey.clone();
    }

    private static void positive(String field, Duration d) {
        if (d == null || d.isNegative() || d.isZero()) {
            throw new IllegalArgumentException(field + ": must be a positive duration, got " + d);
        }
    }
}
