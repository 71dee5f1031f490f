package io.orbitkv.pd.transport;

import io.orbitkv.pd.kv.BlockRuns;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvPool;
import io.orbitkv.pd.schemas.OrderTokens;
import java.util.EnumMap;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.LongSupplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The receiving side's admission control, shared by every transport: a push may write into the local pool only
 * after {@link #open} accepted it, and each write only inside the pages it was accepted for.
 *
 * <p>{@link #open} checks, in this order: the push is for this engine; for its current instance epoch; the token
 * verifies (HMAC over order id, lease epoch, destination runs, keyed by {@code auth.key}); the order attempt was
 * not aborted and its request is not being recomputed here; the lease epoch is current (not older than the
 * newest epoch seen or announced for the lease, not released); every destination run lies inside the pool; the
 * page shapes match. Fences ({@link #releaseLease}, {@link #abortAttempt}, {@link #fenceRequest}) refuse new
 * pushes and stop open sessions: they return only after any frame that was being written has landed, so once a
 * fence returns, no byte of a fenced push can still reach the pages.
 *
 * <p>Fence memory is bounded ({@code maxFences} per kind, oldest forgotten first); a forgotten fence still
 * leaves the token, the lease's newest epoch and the instance epoch in the way of a late push.
 */
public final class PushGate {

    private static final Logger log = LoggerFactory.getLogger(PushGate.class);
    /** How long a fence waits for a frame in progress before giving up (and saying so). */
    private static final long FENCE_WAIT_MS = 10_000;

    private final String engineId;
    private final LongSupplier instanceEpoch;
    private final KvPool pool;
    private final OrderTokens tokens;
    private final int maxRuns;
    private final int maxFences;
    private final Map<Long, ReceiveSession> sessions = new ConcurrentHashMap<>();
    private final AtomicLong nextSession = new AtomicLong();
    private final Map<String, long[]> leases;
    private final Map<String, String> abortedAttempts;
    private final Map<String, String> fencedRequests;
    private final LongAdder accepted = new LongAdder();
    private final LongAdder bytesWritten = new LongAdder();
    private final Map<TransferError, LongAdder> refused = new EnumMap<>(TransferError.class);
    private volatile ReceiveListener listener = (transport, nanos) -> { };
    private volatile LandingListener landing;
    /** What the complete sessions of each push (order id#attempt) wrote, until its destination pages are all written. */
    private final Map<String, Landing> landings;

    /** A push's count of its pieces (every session's, once complete) and whether its landing was announced. */
    private static final class Landing {
        final Coverage wrote;
        /** Bytes of complete sessions that claimed no pieces (their transport's sender wrote the memory: counted by size). */
        long unclaimed;
        boolean announced;

        Landing(int regions) {
            wrote = new Coverage(regions);
        }
    }

    /** The reasons {@link #open} refuses a push for, in the order it checks them. */
    public static final java.util.List<TransferError> REFUSALS = java.util.List.of(TransferError.WRONG_ENGINE, TransferError.STALE_EPOCH,
            TransferError.UNAUTHORIZED, TransferError.ABORTED, TransferError.OUT_OF_RANGE, TransferError.LAYOUT_MISMATCH);

    /** Hears of every receive session that ended, on the thread that closed it (for metrics: must be cheap, must not throw). */
    @FunctionalInterface
    public interface ReceiveListener {
        /**
         * @param transport the transport that received it
         * @param nanos     admission to close
         */
        void ended(String transport, long nanos);
    }

    /** Hears of every push whose bytes have all landed (see {@link #onLanded}). */
    @FunctionalInterface
    public interface LandingListener {
        /** On the receiving thread of the push's last part: must be cheap and must not throw. */
        void landed(PushRequest request, long bytes);
    }

    /**
     * @param engineId      the engine whose pool this gate guards
     * @param instanceEpoch its current instance epoch (read on every push)
     * @param pool          the pool pushes write into
     * @param tokens        verifies order tokens (the decider's key)
     * @param maxRuns       most destination runs one push may name
     * @param maxFences     fences remembered per kind
     */
    public PushGate(String engineId, LongSupplier instanceEpoch, KvPool pool, OrderTokens tokens, int maxRuns, int maxFences) {
        this.engineId = Objects.requireNonNull(engineId, "engineId");
        this.instanceEpoch = Objects.requireNonNull(instanceEpoch, "instanceEpoch");
        this.pool = Objects.requireNonNull(pool, "pool");
        this.tokens = Objects.requireNonNull(tokens, "tokens");
        this.maxRuns = maxRuns;
        this.maxFences = maxFences;
        this.leases = lru(maxFences);
        this.abortedAttempts = lru(maxFences);
        this.fencedRequests = lru(maxFences);
        this.landings = lru(maxFences);
        for (TransferError e : TransferError.values()) {
            refused.put(e, new LongAdder());
        }
        warmUp(tokens);
    }

    /**
     * Verifies a few thousand tokens of its own, so the HMAC and the admission checks are compiled before the first push
     * (at a few pushes a second they may never be: the cuda push's admission took ~170 µs in situ without this, ~120 µs with it).
     */
    private static void warmUp(OrderTokens tokens) {
        java.util.List<io.orbitkv.pd.events.BlockRun> runs = java.util.List.of(BlockRuns.run(0, 8), BlockRuns.run(64, 8));
        byte[] token = tokens.sign("warm-up/a1", 1, "warm-up", 1, runs);
        for (int i = 0; i < 3000; i++) {
            if (!tokens.verify("warm-up/a1", 1, "warm-up", 1, runs, token) || BlockRuns.problem("warm-up", runs, 1024, 64) != null) {
                throw new IllegalStateException("order token warm-up failed");
            }
        }
    }

    private static <V> Map<String, V> lru(int max) {
        return new LinkedHashMap<>(256, 0.75f, false) {
            @Override
            protected boolean removeEldestEntry(Map.Entry<String, V> eldest) {
                return size() > max;
            }
        };
    }

    public String engineId() {
        return engineId;
    }

    public long instanceEpoch() {
        return instanceEpoch.getAsLong();
    }

    public KvPool pool() {
        return pool;
    }

    /** Tells {@code listener} of every receive session that ends from now on (one listener; the worker's metrics). */
    public void listen(ReceiveListener listener) {
        this.listener = Objects.requireNonNull(listener, "listener");
    }

    /**
     * Tells {@code listener} of every push whose destination pages have all been written by receive sessions that
     * completed without a fence (all of a push's stripes, whatever the transport): the moment a decode engine may read
     * them. Once per push (order id and attempt).
     */
    public void onLanded(LandingListener listener) {
        this.landing = listener;
    }

    /**
     * Admits a push, or refuses it with the reason.
     *
     * @param transport      the transport receiving it ({@link KvTransport#name()}), for metrics
     * @param request        what the sender presented
     * @param senderGeometry the page shape of the sender's pool
     * @throws TransferException {@link TransferError#WRONG_ENGINE}, {@link TransferError#STALE_EPOCH},
     *                           {@link TransferError#UNAUTHORIZED}, {@link TransferError#ABORTED},
     *                           {@link TransferError#OUT_OF_RANGE} or {@link TransferError#LAYOUT_MISMATCH}
     */
    public ReceiveSession open(String transport, PushRequest request, KvGeometry senderGeometry) {
        try {
            ReceiveSession s = admit(transport, request, senderGeometry);
            accepted.increment();
            return s;
        } catch (TransferException e) {
            refused.get(e.kind()).increment();
            log.atWarn().addKeyValue("orderId", request.orderId()).addKeyValue("sender", request.senderId())
                    .addKeyValue("error", e.kind()).log("push refused: " + e.getMessage());
            throw e;
        }
    }

    private ReceiveSession admit(String transport, PushRequest r, KvGeometry senderGeometry) {
        if (!engineId.equals(r.destEngineId())) {
            throw new TransferException(TransferError.WRONG_ENGINE, r.describe() + " is for engine '" + r.destEngineId()
                    + "' but this worker serves '" + engineId + "'");
        }
        long epoch = instanceEpoch.getAsLong();
        if (r.destInstanceEpoch() != epoch) {
            throw new TransferException(TransferError.STALE_EPOCH, r.describe() + " was issued for instance epoch " + r.destInstanceEpoch()
                    + " of " + engineId + ", which is now at instance epoch " + epoch + " (the engine restarted: its pages are not the ones ordered)");
        }
        if (!tokens.verify(r.orderId(), r.leaseEpoch(), r.destEngineId(), r.destInstanceEpoch(), r.destRuns(), r.token())) {
            throw new TransferException(TransferError.UNAUTHORIZED, "authorization token of " + r.describe() + " does not verify over its "
                    + r.destRuns().size() + " destination runs (forged or altered order, or auth.key differs from the decider's)");
        }
        ReceiveSession session;
        synchronized (this) {
            String aborted = abortedAttempts.get(attemptKey(r.orderId(), r.attempt()));
            if (aborted != null) {
                throw new TransferException(TransferError.ABORTED, r.describe() + " attempt " + r.attempt() + " was aborted: " + aborted);
            }
            String fenced = fencedRequests.get(r.requestId());
            if (fenced == null) {
                fenced = fencedRequests.get(requestOf(r.orderId()));
            }
            if (fenced != null) {
                throw new TransferException(TransferError.ABORTED, "request of " + r.describe() + " no longer takes pushes here: " + fenced);
            }
            long[] lease = leases.get(r.leaseId());
            if (lease != null && r.leaseEpoch() <= lease[1]) {
                throw new TransferException(TransferError.STALE_EPOCH, "lease " + r.leaseId() + " epoch " + r.leaseEpoch()
                        + " was released (through epoch " + lease[1] + "): its pages may belong to another request now");
            }
            if (lease != null && r.leaseEpoch() < lease[0]) {
                throw new TransferException(TransferError.STALE_EPOCH, "lease " + r.leaseId() + " is at epoch " + lease[0] + ", "
                        + r.describe() + " carries epoch " + r.leaseEpoch());
            }
            String bad = BlockRuns.problem("dest_blocks of " + r.describe(), r.destRuns(), pool.geometry().numBlocks(), maxRuns);
            if (bad != null) {
                throw new TransferException(TransferError.OUT_OF_RANGE, bad);
            }
            String mismatch = senderGeometry.incompatibility(pool.geometry());
            if (mismatch != null) {
                throw new TransferException(TransferError.LAYOUT_MISMATCH, r.describe() + ": page shapes differ: " + mismatch);
            }
            if (lease == null) {
                leases.put(r.leaseId(), new long[] {r.leaseEpoch(), Long.MIN_VALUE});
            } else {
                lease[0] = Math.max(lease[0], r.leaseEpoch());
            }
            session = new ReceiveSession(this, nextSession.incrementAndGet(), transport, r, pool, BlockRuns.intervals(r.destRuns()));
            sessions.put(session.id(), session);
        }
        return session;
    }

    /**
     * The engine released the lease's pages (or is about to reuse them): pushes with this lease at
     * {@code epoch} or older are refused from now on, and open ones stop.
     */
    public void releaseLease(String leaseId, long epoch) {
        synchronized (this) {
            long[] lease = leases.computeIfAbsent(leaseId, k -> new long[] {epoch, Long.MIN_VALUE});
            lease[1] = Math.max(lease[1], epoch);
            lease[0] = Math.max(lease[0], epoch);
        }
        fence(s -> s.request().leaseId().equals(leaseId) && s.request().leaseEpoch() <= epoch,
                new TransferException(TransferError.STALE_EPOCH, "lease " + leaseId + " epoch " + epoch + " was released during the push"));
    }

    /** The engine moved the lease to {@code epoch} (e.g. before recomputing into its pages): older epochs are refused. */
    public void advanceLease(String leaseId, long epoch) {
        synchronized (this) {
            long[] lease = leases.computeIfAbsent(leaseId, k -> new long[] {epoch, Long.MIN_VALUE});
            lease[0] = Math.max(lease[0], epoch);
        }
        fence(s -> s.request().leaseId().equals(leaseId) && s.request().leaseEpoch() < epoch,
                new TransferException(TransferError.STALE_EPOCH, "lease " + leaseId + " moved to epoch " + epoch + " during the push"));
    }

    /** The decider aborted this attempt: refuse it, stop it if it is being written. */
    public void abortAttempt(String orderId, int attempt, String reason) {
        synchronized (this) {
            abortedAttempts.put(attemptKey(orderId, attempt), reason);
        }
        fence(s -> s.request().orderId().equals(orderId) && s.request().attempt() == attempt,
                new TransferException(TransferError.ABORTED, "order " + orderId + " attempt " + attempt + " was aborted: " + reason));
    }

    /** No push of this request may land any more (the decode engine recomputes into the pages). */
    public void fenceRequest(String requestId, String reason) {
        synchronized (this) {
            fencedRequests.put(requestId, reason);
        }
        fence(s -> s.request().requestId().equals(requestId) || requestOf(s.request().orderId()).equals(requestId),
                new TransferException(TransferError.ABORTED, "request " + requestId + " no longer takes pushes: " + reason));
    }

    private void fence(java.util.function.Predicate<ReceiveSession> match, TransferException why) {
        for (ReceiveSession s : sessions.values()) {
            if (match.test(s) && !s.stop(why, FENCE_WAIT_MS)) {
                log.atError().addKeyValue("orderId", s.request().orderId())
                        .log("fence: a frame of the push was still being written after " + FENCE_WAIT_MS + " ms");
            }
        }
    }

    /**
     * A session's bytes join its push's count ({@link ReceiveSession#complete}); null, or why they cannot: some were
     * already written by another complete part of the same push.
     */
    TransferException count(ReceiveSession s, Coverage wrote) {
        PushRequest r = s.request();
        synchronized (this) {
            Landing l = landings.computeIfAbsent(attemptKey(r.orderId(), r.attempt()), k -> new Landing(pool.geometry().regionCount()));
            if (wrote.bytes() == 0 || l.announced) {
                // no pieces: counted by its bytes when it closes (a transport may end its last frame after completing);
                // after the landing: the attempt executed again (a source worker restarted before its report was durable),
                // the same bytes into the same pages, neither counted nor announced again
                return null;
            }
            if (l.wrote.overlaps(wrote)) {
                refused.get(TransferError.OUT_OF_RANGE).increment();
                return new TransferException(TransferError.OUT_OF_RANGE, r.describe() + ": a part of the push wrote pages another part already"
                        + " wrote (a piece twice); not counted");
            }
            l.wrote.addAll(wrote);
        }
        return null;
    }

    void closed(ReceiveSession s, long nanos) {
        sessions.remove(s.id());
        bytesWritten.add(s.bytesWritten());
        listener.ended(s.transport(), nanos);
        LandingListener l = landing;
        if (s.isComplete() && s.bytesWritten() > 0) { // counted with or without a listener: a landed attempt takes repeats
            PushRequest r = s.request();
            long expected = BlockRuns.totalBlocks(r.destRuns()) * pool.geometry().bytesPerBlock();
            boolean whole = false;
            synchronized (this) {
                // every write lay inside the destination pages and none overlapped another: the count is the whole pages
                // exactly when every byte of every layer's pieces is in place
                Landing got = landings.get(attemptKey(r.orderId(), r.attempt()));
                if (got != null && s.claimedBytes() == 0) {
                    got.unclaimed += s.bytesWritten();
                }
                if (got != null && !got.announced && got.wrote.bytes() + got.unclaimed == expected) {
                    got.announced = true;
                    whole = true;
                }
            }
            if (whole && l != null) {
                l.landed(r, expected);
            }
        }
    }

    /** Open sessions (pushes being received). */
    public int openSessions() {
        return sessions.size();
    }

    public long acceptedPushes() {
        return accepted.sum();
    }

    public long refusedPushes(TransferError kind) {
        return refused.get(kind).sum();
    }

    /** Bytes written by closed sessions. */
    public long bytesWritten() {
        return bytesWritten.sum();
    }

    private static String attemptKey(String orderId, int attempt) {
        return orderId + "#" + attempt;
    }

    /** {@code r/a3} → {@code r}: the decider names order ids {@code <request id>/a<attempt>}. */
    static String requestOf(String orderId) {
        int i = orderId.lastIndexOf("/a");
        return i < 0 ? orderId : orderId.substring(0, i);
    }
}
