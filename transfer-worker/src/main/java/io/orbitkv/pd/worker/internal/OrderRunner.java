package io.orbitkv.pd.worker.internal;

import io.orbitkv.pd.engine.client.EngineDirectory;
import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.events.TransportEndpoint;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvPool;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.tracing.Hop;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceContext;
import io.orbitkv.pd.transport.KvTransport;
import io.orbitkv.pd.transport.PeerEndpoint;
import io.orbitkv.pd.transport.PushRequest;
import io.orbitkv.pd.transport.Transfer;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import io.orbitkv.pd.transport.TransferResult;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Executes transfer orders for the local (source) engine: at most {@code concurrency} at a time, each (order id,
 * attempt) once, reporting started, then completed (bytes, duration) or failed (reason, retriable). An
 * {@code AbortTransfer} cancels the attempt wherever it is (parked, queued or pushing). An order's record counts as
 * done — and its offset may be committed — only once its terminal report is acknowledged by the broker.
 *
 * <p>An order issued ahead of the prefill ({@code await_prefill}) is parked until the source pages are known: from the
 * engine's own {@code PrefillCompleted} when the engine reports through this worker's engine API
 * ({@link #prefillCompleted}: the push starts then, with no Kafka hop in between), or from the decider's second copy of
 * the order, which carries them — whichever comes first; the other is a duplicate. The worker writes the engine's fact
 * before it pushes, with the same producer, so the log still shows PrefillCompleted before TransferStarted.
 */
public final class OrderRunner implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(OrderRunner.class);

    /** What happened to an (order id, attempt). */
    enum State { PARKED, QUEUED, RUNNING, COMPLETED, FAILED, ABORTED }

    private static final class Attempt {
        State state;
        String abortReason;
        Transfer transfer;
        String transport = "none";

        Attempt(State s) {
            state = s;
        }
    }

    private final String engineId;
    private final long instanceEpoch;
    private final KvPool pool;
    private final List<KvTransport> transports;
    private final EngineDirectory directory;
    private final EventReporter reporter;
    private final String workerId;
    private final Duration peerWait;
    private final Map<String, Attempt> orders;
    private final ExecutorService executor;
    private final AtomicInteger queued = new AtomicInteger();
    private final AtomicLong completed = new AtomicLong();
    private final AtomicLong failed = new AtomicLong();
    private final WorkerMetrics metrics;
    /** Orders issued ahead of the prefill, by request id, until their source pages are known. */
    private final Map<String, Parked> parked = new LinkedHashMap<>();
    /** The engine's recent prefill results (by request id), for an order ahead that arrives after them. */
    private final Map<String, LocalPrefill> prefills;

    /** An order ahead of the prefill, waiting, with what {@link #submit} got. */
    private record Parked(String requestId, TransferOrder order, Attempt entry, TraceContext trace, long orderTimestampMs, Runnable done) { }

    /**
     * What the engine reported through the engine API: the pages and first token of a finished prefill (blocks null:
     * the prefill failed), with when the engine computed it (its {@code c1} mark, 0 if none) and when the worker got it.
     */
    private record LocalPrefill(List<BlockRun> blocks, long instanceEpoch, Integer firstToken, long computedMicros, long receivedMicros,
                                String failure) { }

    public OrderRunner(String engineId, long instanceEpoch, KvPool pool, List<KvTransport> transports, EngineDirectory directory,
                       EventReporter reporter, String workerId, int concurrency, int dedupeCapacity, Duration peerWait) {
        this(engineId, instanceEpoch, pool, transports, directory, reporter, workerId, concurrency, dedupeCapacity, peerWait, WorkerMetrics.noop());
    }

    public OrderRunner(String engineId, long instanceEpoch, KvPool pool, List<KvTransport> transports, EngineDirectory directory,
                       EventReporter reporter, String workerId, int concurrency, int dedupeCapacity, Duration peerWait, WorkerMetrics metrics) {
        this.metrics = metrics;
        this.engineId = engineId;
        this.instanceEpoch = instanceEpoch;
        this.pool = pool;
        this.transports = List.copyOf(transports);
        this.directory = directory;
        this.reporter = reporter;
        this.workerId = workerId;
        this.peerWait = peerWait;
        this.orders = new LinkedHashMap<>(1024, 0.75f, false) {
            @Override
            protected boolean removeEldestEntry(Map.Entry<String, Attempt> eldest) {
                return size() > dedupeCapacity;
            }
        };
        this.executor = Executors.newFixedThreadPool(concurrency, Thread.ofPlatform().daemon().name("worker-order-", 0).factory());
        this.prefills = new LinkedHashMap<>(256, 0.75f, false) {
            @Override
            protected boolean removeEldestEntry(Map.Entry<String, LocalPrefill> eldest) {
                return size() > dedupeCapacity;
            }
        };
    }

    private static String key(String orderId, int attempt) {
        return orderId + "#" + attempt;
    }

    /** Orders accepted but not started yet. */
    public int queued() {
        return queued.get();
    }

    public long completedCount() {
        return completed.get();
    }

    public long failedCount() {
        return failed.get();
    }

    /**
     * Takes an order for execution. {@code done} runs once the order's terminal report is durable (or at once for a
     * duplicate, which is not executed again).
     */
    public void submit(String requestId, TransferOrder o, Runnable done) {
        submit(requestId, o, null, 0, done, 0, Marks.nowMicros());
    }

    /**
     * As {@link #submit(String, TransferOrder, Runnable)}, continuing {@code trace} (the order's, or null) on the
     * reports; {@code orderTimestampMs} is the order record's timestamp (0 if unknown), for the wait histogram;
     * {@code decidedMicros} the order's {@code out} mark (0 if none) and {@code receivedMicros} when this worker read it,
     * the first marks of the reports.
     */
    public void submit(String requestId, TransferOrder o, TraceContext trace, long orderTimestampMs, Runnable done, long decidedMicros,
                       long receivedMicros) {
        metrics.hop(Hop.ORDER_TO_WORKER, decidedMicros, receivedMicros);
        String k = key(o.getOrderId(), o.getAttempt());
        Attempt e;
        TransferOrder run = o;
        Runnable alsoDone = null;
        synchronized (orders) {
            e = orders.get(k);
            if (e != null && e.state == State.PARKED && !o.getAwaitPrefill()) {
                // The decider's copy with the source pages, before the engine told this worker: run it now.
                Parked p = parked.remove(requestId);
                alsoDone = p == null ? null : p.done();
                e.state = State.QUEUED;
            } else if (e != null && e.state != State.ABORTED) {
                log.atInfo().addKeyValue("orderId", o.getOrderId()).addKeyValue("attempt", o.getAttempt()).addKeyValue("state", e.state)
                        .log("duplicate order ignored");
                done.run();
                return;
            } else {
                if (e == null) {
                    e = new Attempt(State.QUEUED);
                    orders.put(k, e);
                }
                if (o.getAwaitPrefill() && e.state != State.ABORTED) {
                    LocalPrefill lp = prefills.get(requestId);
                    if (lp == null) {
                        e.state = State.PARKED;
                        parked.put(requestId, new Parked(requestId, o, e, trace, orderTimestampMs, done));
                        return;
                    }
                    if (lp.blocks() == null) {
                        e.abortReason = "the engine's prefill failed: " + lp.failure();
                    } else {
                        run = withSource(o, lp); // the engine reported first: this order is what starts the push
                    }
                }
            }
        }
        enqueue(requestId, run, e, trace, orderTimestampMs, alsoDone == null ? done : both(done, alsoDone), receivedMicros, 0);
    }

    private static Runnable both(Runnable a, Runnable b) {
        return () -> {
            a.run();
            b.run();
        };
    }

    /** The order ahead, completed with the pages and first token the engine reported. */
    private static TransferOrder withSource(TransferOrder o, LocalPrefill p) {
        // the decode engine's cached prefix stays where it is: the order's dest_blocks start after it, so do the pages pushed
        return TransferOrder.newBuilder(o).setSourceBlocks(io.orbitkv.pd.kv.BlockRuns.skip(p.blocks(), o.getSkipBlocks()))
                .setSourceInstanceEpoch(p.instanceEpoch())
                .setFirstToken(p.firstToken() != null ? p.firstToken() : o.getFirstToken()).build();
    }

    /**
     * The engine reported a finished prefill through the engine API (the worker has already handed the fact to its
     * producer): an order parked for that request starts now, marked as received at {@code receivedMicros};
     * {@code computedMicros}: when the engine finished the prefill (0 if its fact did not say).
     */
    public void prefillCompleted(String requestId, List<BlockRun> blocks, long instanceEpoch, Integer firstToken, long computedMicros,
                                 long receivedMicros) {
        local(requestId, new LocalPrefill(List.copyOf(blocks), instanceEpoch, firstToken, computedMicros, receivedMicros, null));
    }

    /** The engine reported that a prefill failed: an order parked for that request fails now instead of waiting. */
    public void prefillFailed(String requestId, String reason, long receivedMicros) {
        local(requestId, new LocalPrefill(null, -1, null, 0, receivedMicros, reason));
    }

    private void local(String requestId, LocalPrefill p) {
        Parked w;
        synchronized (orders) {
            prefills.put(requestId, p);
            w = parked.remove(requestId);
            if (w == null) {
                return;
            }
            w.entry().state = State.QUEUED;
            if (p.blocks() == null && w.entry().abortReason == null) {
                w.entry().abortReason = "the engine's prefill failed: " + p.failure();
            }
        }
        if (p.blocks() != null) {
            metrics.hop(Hop.PREFILL_TO_WORKER, p.computedMicros(), p.receivedMicros()); // the short path: no decider between
        }
        enqueue(w.requestId(), p.blocks() == null ? w.order() : withSource(w.order(), p), w.entry(), w.trace(), w.orderTimestampMs(), w.done(),
                p.receivedMicros(), p.blocks() == null ? 0 : p.receivedMicros());
    }

    /**
     * Runs the order on an order thread. {@code receivedMicros}: when this worker got what lets it run — the order, or
     * the engine's prefill fact for a parked order ahead, whose time {@code engineFactMicros} (else 0) then also is
     * ({@link Marks#ENGINE_FACT}: the anatomy's path skips the decider).
     */
    private void enqueue(String requestId, TransferOrder o, Attempt entry, TraceContext trace, long orderTimestampMs, Runnable done,
                         long receivedMicros, long engineFactMicros) {
        boolean byEngine = engineFactMicros > 0;
        queued.incrementAndGet();
        executor.execute(() -> {
            queued.decrementAndGet();
            metrics.started(orderTimestampMs);
            Marks marks = Marks.receivedAt(receivedMicros);
            if (byEngine) {
                marks.at(Marks.ENGINE_FACT, engineFactMicros);
            }
            marks.mark(Marks.RUN);
            metrics.hop(Hop.WORKER_QUEUE, receivedMicros, marks.get(Marks.RUN).getAsLong());
            try {
                run(requestId, o, entry, trace, done, marks);
            } finally {
                metrics.finished();
            }
        });
    }

    /** The decider aborted this attempt: stop it if it runs, refuse it if it has not started. */
    public void abort(String orderId, int attempt, String reason) {
        Transfer t = null;
        Parked p = null;
        synchronized (orders) {
            Attempt e = orders.computeIfAbsent(key(orderId, attempt), k -> new Attempt(State.ABORTED));
            if (e.abortReason == null) {
                e.abortReason = reason;
            }
            if (e.state == State.RUNNING) {
                t = e.transfer;
            }
            if (e.state == State.PARKED) {
                for (Parked w : parked.values()) {
                    if (w.entry() == e) {
                        p = w;
                    }
                }
                if (p != null) {
                    parked.remove(p.requestId());
                    e.state = State.QUEUED;
                }
            }
        }
        if (p != null) {
            // reported as failed (aborted before it started) through the normal path, which also commits its offset
            enqueue(p.requestId(), p.order(), p.entry(), p.trace(), p.orderTimestampMs(), p.done(), Marks.nowMicros(), 0);
        }
        log.atInfo().addKeyValue("orderId", orderId).addKeyValue("attempt", attempt).log("abort requested: " + reason);
        if (t != null) {
            t.cancel(reason);
        }
    }

    private void run(String requestId, TransferOrder o, Attempt entry, TraceContext trace, Runnable done, Marks marks) {
        long t0 = System.nanoTime();
        CompletableFuture<Void> report;
        try {
            TransferResult r = execute(requestId, o, entry, trace, marks);
            marks.addAll("", r.marks());
            hops(marks);
            metrics.completed(r.transport(), r.durationNanos(), r.bytes());
            synchronized (orders) {
                entry.state = State.COMPLETED;
                entry.transfer = null;
            }
            completed.incrementAndGet();
            log.atInfo().addKeyValue("orderId", o.getOrderId()).addKeyValue("attempt", o.getAttempt()).addKeyValue("bytes", r.bytes())
                    .addKeyValue("ms", r.durationNanos() / 1_000_000).addKeyValue("GBps", String.format("%.2f", r.gigabytesPerSecond()))
                    .addKeyValue("transport", r.transport()).addKeyValue("marks", r.marks().format()).log("transfer completed");
            report = reporter.completed(requestId, o.getOrderId(), o.getAttempt(), r.bytes(), r.durationNanos() / 1000, trace, marks);
            metrics.hop(Hop.TRANSFER_REPORT, marks.get(TransferResult.ACKED).orElse(0), marks.get(Marks.OUT).orElse(0));
        } catch (TransferException e) {
            synchronized (orders) {
                entry.state = e.kind() == TransferError.ABORTED ? State.ABORTED : State.FAILED;
                entry.transfer = null;
            }
            failed.incrementAndGet();
            metrics.failed(entry.transport, e.kind(), e.retriable());
            log.atWarn().addKeyValue("orderId", o.getOrderId()).addKeyValue("attempt", o.getAttempt()).addKeyValue("retriable", e.retriable())
                    .addKeyValue("ms", (System.nanoTime() - t0) / 1_000_000).log("transfer failed: " + e.reason());
            report = reporter.failed(requestId, o.getOrderId(), o.getAttempt(), e.reason(), e.retriable(), trace, marks);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            log.atWarn().addKeyValue("orderId", o.getOrderId()).log("worker stopping: order left for the next start");
            return; // its offset stays uncommitted: a restarted worker executes it again
        } catch (RuntimeException e) {
            synchronized (orders) {
                entry.state = State.FAILED;
            }
            failed.incrementAndGet();
            metrics.failed(entry.transport, TransferError.INTERNAL, true);
            log.atError().setCause(e).addKeyValue("orderId", o.getOrderId()).log("transfer failed unexpectedly");
            report = reporter.failed(requestId, o.getOrderId(), o.getAttempt(), TransferError.INTERNAL + ": " + e, true, trace, marks);
        }
        report.whenComplete((v, err) -> {
            if (err == null) {
                done.run();
            }
            // else: the report is not durable, so the offset is not committed; a restart re-executes the order.
        });
    }

    /** The push's hops on this worker's clock: queue is recorded at the start, the report when it is sent. */
    private void hops(Marks m) {
        long run = m.get(Marks.RUN).orElse(0);
        long conn = m.get(TransferResult.CONNECTED).orElse(0);
        long adm = m.get(TransferResult.ADMITTED).orElse(0);
        long w1 = m.get(TransferResult.WRITTEN).orElse(0);
        metrics.hop(Hop.TRANSFER_SETUP, run, conn);
        metrics.hop(Hop.TRANSFER_ADMISSION, conn, adm);
        metrics.hop(Hop.TRANSFER_WIRE, adm, w1);
        metrics.hop(Hop.TRANSFER_APPLY, w1, m.get(TransferResult.ACKED).orElse(0));
    }

    private TransferResult execute(String requestId, TransferOrder o, Attempt entry, TraceContext trace, Marks marks) throws InterruptedException {
        synchronized (orders) {
            if (entry.abortReason != null) {
                throw new TransferException(TransferError.ABORTED, "aborted before it started: " + entry.abortReason);
            }
            entry.state = State.RUNNING;
        }
        if (!engineId.equals(o.getSourceEngineId())) {
            throw new TransferException(TransferError.WRONG_ENGINE, "order's source engine is '" + o.getSourceEngineId() + "', this worker serves '"
                    + engineId + "'");
        }
        if (o.getAwaitPrefill() && o.getSourceBlocks().isEmpty()) {
            throw new TransferException(TransferError.INTERNAL, "order " + o.getOrderId() + " has no source pages yet");
        }
        if (o.getSourceInstanceEpoch() != instanceEpoch) {
            throw new TransferException(TransferError.STALE_EPOCH, "order names instance epoch " + o.getSourceInstanceEpoch() + " of " + engineId
                    + ", which is now at instance epoch " + instanceEpoch + " (the source pages are gone)");
        }
        if (o.getDeadlineMs() > 0 && System.currentTimeMillis() > o.getDeadlineMs()) {
            throw new TransferException(TransferError.TIMEOUT, "the order's deadline passed before the worker got to it");
        }
        KvGeometry orderLayout;
        try {
            orderLayout = KvGeometry.of(o.getLayout());
        } catch (IllegalArgumentException e) {
            throw new TransferException(TransferError.LAYOUT_MISMATCH, "order's layout is invalid: " + e.getMessage());
        }
        String mismatch = orderLayout.incompatibility(pool.geometry());
        if (mismatch != null) {
            throw new TransferException(TransferError.LAYOUT_MISMATCH, "order's layout differs from this engine's pool: " + mismatch);
        }
        EngineRegistration dest = directory.await(o.getDestEngineId(), o.getDestInstanceEpoch(), peerWait).orElseThrow(
                () -> new TransferException(TransferError.UNKNOWN_PEER, "destination engine '" + o.getDestEngineId() + "' is not registered"
                        + " (waited " + peerWait.toMillis() + " ms)"));
        if (dest.getDeregistered()) {
            throw new TransferException(TransferError.STALE_EPOCH, "destination engine " + o.getDestEngineId() + " left (deregistered)");
        }
        if (dest.getInstanceEpoch() != o.getDestInstanceEpoch()) {
            throw new TransferException(dest.getInstanceEpoch() > o.getDestInstanceEpoch() ? TransferError.STALE_EPOCH : TransferError.UNKNOWN_PEER,
                    "destination engine " + o.getDestEngineId() + " is registered at instance epoch " + dest.getInstanceEpoch()
                            + ", the order names " + o.getDestInstanceEpoch());
        }
        TransferPlan plan;
        try {
            plan = TransferPlan.build(pool.geometry(), o.getSourceBlocks(), KvGeometry.of(dest.getLayout()), o.getDestBlocks());
        } catch (IllegalArgumentException e) {
            throw new TransferException(e.getMessage().startsWith("layout") ? TransferError.LAYOUT_MISMATCH : TransferError.OUT_OF_RANGE,
                    "cannot plan the order: " + e.getMessage());
        }
        Choice c = choose(o, dest);
        entry.transport = c.transport().name();
        Transfer t = c.transport().push(PushRequest.of(requestId, o, workerId), pool, plan, c.peer());
        // Reported once the push is under way (its stripes run on their own threads): the report's serialization and
        // send are not on the push's path. Same producer, same partition: it still precedes the push's outcome.
        reporter.started(requestId, o.getOrderId(), o.getAttempt(), c.transport().name(), trace, marks.copy());
        String abort;
        synchronized (orders) {
            entry.transfer = t;
            abort = entry.abortReason;
        }
        if (abort != null) {
            t.cancel(abort);
        }
        try {
            return t.result().get();
        } catch (ExecutionException e) {
            if (e.getCause() instanceof TransferException te) {
                throw te;
            }
            throw new TransferException(TransferError.INTERNAL, String.valueOf(e.getCause()), e.getCause());
        } catch (InterruptedException e) {
            t.cancel("worker stopping");
            throw e;
        }
    }

    private record Choice(KvTransport transport, PeerEndpoint peer) { }

    /** The first of this worker's transports (in preference order) that the destination registered and that can reach it. */
    private Choice choose(TransferOrder o, EngineRegistration dest) {
        String wanted = o.getTransport() == null || o.getTransport().isBlank() ? "auto" : o.getTransport();
        List<String> offered = new ArrayList<>();
        for (TransportEndpoint e : dest.getEndpoints()) {
            offered.add(e.getTransport());
        }
        for (KvTransport t : transports) {
            if (!"auto".equals(wanted) && !wanted.equals(t.name())) {
                continue;
            }
            for (TransportEndpoint e : dest.getEndpoints()) {
                PeerEndpoint peer = PeerEndpoint.of(dest.getEngineId(), dest.getInstanceEpoch(), e);
                if (e.getTransport().equals(t.name()) && t.canReach(peer)) {
                    return new Choice(t, peer);
                }
            }
        }
        throw new TransferException(TransferError.NO_TRANSPORT, "no common transport for order transport '" + wanted + "': this worker offers "
                + transports.stream().map(KvTransport::name).toList() + ", " + dest.getEngineId() + " registered " + offered);
    }

    @Override
    public void close() {
        List<Transfer> running = new ArrayList<>();
        synchronized (orders) {
            for (Attempt e : orders.values()) {
                if (e.state == State.RUNNING && e.transfer != null) {
                    running.add(e.transfer);
                }
            }
        }
        running.forEach(t -> t.cancel("worker stopping"));
        synchronized (orders) {
            parked.clear(); // their offsets stay uncommitted: a restarted worker parks them again
        }
        executor.shutdownNow();
        try {
            if (!executor.awaitTermination(10, TimeUnit.SECONDS)) {
                log.warn("orders still running 10 s after the worker was asked to stop");
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
