package io.orbitkv.pd.worker.internal;

import io.orbitkv.pd.engine.client.api.ApiProtocol.PrefillProgress;
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
 *
 * <p>What each input does to an attempt in each state is one table, {@link #define} (as the decider's
 * {@code Transitions}): a cell changes the attempt under the runner's lock and returns what to do once the lock is
 * released (queue the push, cancel it, acknowledge a duplicate). Nothing else changes an attempt's state.
 */
public final class OrderRunner implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(OrderRunner.class);

    /**
     * Where an (order id, attempt) is: the table's columns. FENCED: aborted before any copy of its order came (the order
     * is refused when it does). LANDED, FAILED and ABORTED are terminal: reported once, every later copy a duplicate.
     */
    enum State { NEW, FENCED, PARKED, QUEUED, PUSHING, LANDED, FAILED, ABORTED }

    /** What can happen to an attempt: the table's rows. */
    enum Input {
        /** The order, issued ahead of its prefill (no source pages yet). */
        ORDER_AHEAD,
        /** The order with its source pages: an ordinary order, or the decider's second copy of an order ahead. */
        ORDER,
        /** The engine reported the request's prefill through the engine API (pages and first token). */
        PREFILL_DONE,
        /** The engine reported that the request's prefill failed. */
        PREFILL_FAILED,
        /** The engine reported how far the request's prefill has come, layer by layer ({@code prefill_progress}). */
        PROGRESS,
        /** The decider aborted the attempt. */
        ABORT,
        /** An order thread takes the queued attempt. */
        START,
        /** The attempt's push (or its refusal before pushing) ended; {@link In#ended} says how. */
        ENDED,
        /** The worker stops. */
        STOP
    }

    /** An input and what it carries (unused fields null / 0). */
    private record In(Input input, TransferOrder order, TraceContext trace, long orderTimestampMs, Runnable done, long receivedMicros,
                      LocalPrefill prefill, String reason, State ended, PrefillProgress progress, long instanceEpoch) {
        static In order(Input input, TransferOrder o, TraceContext trace, long orderTimestampMs, Runnable done, long receivedMicros) {
            return new In(input, o, trace, orderTimestampMs, done, receivedMicros, null, null, null, null, 0);
        }

        static In prefill(LocalPrefill p) {
            return new In(p.blocks() == null ? Input.PREFILL_FAILED : Input.PREFILL_DONE, null, null, 0, null, p.receivedMicros(), p, null, null,
                    null, 0);
        }

        static In progress(PrefillProgress p, long instanceEpoch, long receivedMicros) {
            return new In(Input.PROGRESS, null, null, 0, null, receivedMicros, null, null, null, p, instanceEpoch);
        }

        static In of(Input input, String reason) {
            return new In(input, null, null, 0, null, 0, null, reason, null, null, 0);
        }

        static In ended(State how) {
            return new In(Input.ENDED, null, null, 0, null, 0, null, null, how, null, 0);
        }
    }

    /** A cell of the table: changes {@code a} (under the lock); returns what to run once the lock is released, or null. */
    @FunctionalInterface
    private interface Cell {
        Runnable apply(Attempt a, In in);
    }

    /** One (order id, attempt): its state, and what it will run with once it may. */
    private static final class Attempt {
        final String key;
        State state = State.NEW;
        String abortReason;
        Transfer transfer;
        String transport = "none";
        /** Set by the order (its first copy) and kept while parked or queued. */
        String requestId;
        TransferOrder order;
        TraceContext trace;
        long orderTimestampMs;
        Runnable done;
        /** Set when the push goes layer by layer: what of its source the engine has computed. */
        PrefillReadiness readiness;

        Attempt(String key) {
            this.key = key;
        }
    }

    /** The cell of each (state, input), by ordinals; total. */
    private final Cell[][] table = new Cell[State.values().length][Input.values().length];

    private final String engineId;
    private final long instanceEpoch;
    private final KvPool pool;
    private final List<KvTransport> transports;
    private final Peers peers;
    private final EventReporter reporter;
    private final String workerId;
    private final Duration peerWait;
    private final Map<String, Attempt> orders;
    private final ExecutorService executor;
    private final AtomicInteger queued = new AtomicInteger();
    private final AtomicLong completed = new AtomicLong();
    private final AtomicLong failed = new AtomicLong();
    private final WorkerMetrics metrics;
    /** Attempts parked ahead of their prefill, by request id, until their source pages are known. */
    private final Map<String, Attempt> parked = new LinkedHashMap<>();
    /** The engine's recent prefill results (by request id), for an order ahead that arrives after them. */
    private final Map<String, LocalPrefill> prefills;
    /** Attempts pushing layer by layer while their prefill computes, by request id (the engine's reports feed them). */
    private final Map<String, Attempt> streaming = new LinkedHashMap<>();
    /** The engine's latest progress per request (with the source pages of its first), for an order ahead that comes later. */
    private final Map<String, Progress> progressSeen;
    /** Pushes of at least this many bytes go layer by layer ({@code worker.layerwise.min-bytes}); negative: never. */
    private volatile long layerwiseMinBytes = -1;
    /** Fault drills: pushes of requests whose id starts with this are held (see {@link #holdPushes}); null: none. */
    private volatile String holdPrefix;
    private volatile Duration hold = Duration.ZERO;

    /** A progress report, the source pages its request's first report named, and the instance that reported it. */
    private record Progress(PrefillProgress progress, int[] sourceBlocks, long instanceEpoch) { }

    /** The registered engines, as the worker's {@code EngineDirectory} knows them. */
    @FunctionalInterface
    public interface Peers {
        /** {@code engineId}'s registration at {@code minEpoch} or newer, waiting up to {@code timeout}; empty if none came. */
        java.util.Optional<EngineRegistration> await(String engineId, long minEpoch, Duration timeout) throws InterruptedException;
    }

    /**
     * What the engine reported through the engine API: the pages and first token of a finished prefill (blocks null:
     * the prefill failed), with when the engine computed it (its {@code c1} mark, 0 if none) and when the worker got it.
     */
    private record LocalPrefill(List<BlockRun> blocks, long instanceEpoch, Integer firstToken, long computedMicros, long receivedMicros,
                                String failure) { }

    public OrderRunner(String engineId, long instanceEpoch, KvPool pool, List<KvTransport> transports, Peers peers,
                       EventReporter reporter, String workerId, int concurrency, int dedupeCapacity, Duration peerWait) {
        this(engineId, instanceEpoch, pool, transports, peers, reporter, workerId, concurrency, dedupeCapacity, peerWait, WorkerMetrics.noop());
    }

    public OrderRunner(String engineId, long instanceEpoch, KvPool pool, List<KvTransport> transports, Peers peers,
                       EventReporter reporter, String workerId, int concurrency, int dedupeCapacity, Duration peerWait, WorkerMetrics metrics) {
        this.metrics = metrics;
        this.engineId = engineId;
        this.instanceEpoch = instanceEpoch;
        this.pool = pool;
        this.transports = List.copyOf(transports);
        this.peers = peers;
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
        this.progressSeen = new LinkedHashMap<>(256, 0.75f, false) {
            @Override
            protected boolean removeEldestEntry(Map.Entry<String, Progress> eldest) {
                return size() > dedupeCapacity;
            }
        };
        define();
        for (State st : State.values()) {
            for (Input in : Input.values()) {
                if (table[st.ordinal()][in.ordinal()] == null) {
                    throw new IllegalStateException("the worker's order table has no cell for " + st + " × " + in);
                }
            }
        }
    }

    /**
     * The table. PREFILL_DONE, PREFILL_FAILED and PROGRESS reach only a parked attempt or one pushing layer by layer
     * (they are looked up by request; any other request's report is only remembered, for an order ahead that comes later). START comes only for a queued attempt,
     * ENDED only after START (from QUEUED when START refused it). {@link #NOTHING}: the input changes nothing;
     * {@link #IMPOSSIBLE}: the runner never feeds it (an error if it does).
     */
    private void define() {
        OrderRunner t = this; // one letter, so that each row of the table fits one line
        Cell dup = t::duplicate;
        Cell keep = t::keepReason;
        //                       NEW              FENCED            PARKED           QUEUED       PUSHING        LANDED   FAILED   ABORTED
        on(Input.ORDER_AHEAD,    t::ahead,        t::reportAborted, dup,             dup,         dup,           dup,     dup,     dup);
        on(Input.ORDER,          t::queue,        t::reportAborted, t::copyFirst,    dup,         dup,           dup,     dup,     dup);
        on(Input.PREFILL_DONE,   IMPOSSIBLE,      IMPOSSIBLE,       t::fromEngine,   t::sourceDone, t::sourceDone, IMPOSSIBLE, IMPOSSIBLE, IMPOSSIBLE);
        on(Input.PREFILL_FAILED, IMPOSSIBLE,      IMPOSSIBLE,       t::failedByEngine, t::sourceFailed, t::sourceFailed, IMPOSSIBLE, IMPOSSIBLE, IMPOSSIBLE);
        on(Input.PROGRESS,       IMPOSSIBLE,      IMPOSSIBLE,       t::stream,       t::advance,  t::advance,    IMPOSSIBLE, IMPOSSIBLE, IMPOSSIBLE);
        on(Input.ABORT,          t::fence,        keep,             t::abortParked,  t::abortQueued, t::abortPush, keep,  keep,    keep);
        on(Input.START,          IMPOSSIBLE,      IMPOSSIBLE,       IMPOSSIBLE,      t::start,    IMPOSSIBLE,    IMPOSSIBLE, IMPOSSIBLE, IMPOSSIBLE);
        on(Input.ENDED,          IMPOSSIBLE,      IMPOSSIBLE,       IMPOSSIBLE,      t::end,      t::end,        IMPOSSIBLE, IMPOSSIBLE, IMPOSSIBLE);
        on(Input.STOP,           NOTHING,         NOTHING,          t::dropParked,   NOTHING,     t::stopPush,   NOTHING, NOTHING, NOTHING);
    }

    private static final Cell NOTHING = (a, in) -> null;
    private static final Cell IMPOSSIBLE = (a, in) -> {
        throw new IllegalStateException("order " + a.key + ": " + in.input() + " cannot come in state " + a.state);
    };

    private void on(Input input, Cell... byState) {
        for (State st : State.values()) {
            table[st.ordinal()][input.ordinal()] = byState[st.ordinal()];
        }
    }

    /** Runs {@code in}'s cell for {@code a}; the caller holds the lock and runs the result after releasing it. */
    private Runnable feed(Attempt a, In in) {
        return table[a.state.ordinal()][in.input().ordinal()].apply(a, in);
    }

    // ------------------------------------------------------------------------------------------------ the cells, by row

    /** NEW × ORDER_AHEAD: start from the engine's report if it came first, else park until it (or the decider's copy) does. */
    private Runnable ahead(Attempt a, In in) {
        hold(a, in);
        LocalPrefill lp = prefills.get(a.requestId);
        if (lp == null) {
            a.state = State.PARKED;
            parked.put(a.requestId, a);
            Progress p = progressSeen.get(a.requestId); // the engine is computing it already: layer by layer from here
            return p == null ? null : stream(a, In.progress(p.progress(), p.instanceEpoch(), in.receivedMicros()));
        }
        a.state = State.QUEUED;
        if (lp.blocks() == null) {
            a.abortReason = "the engine's prefill failed: " + lp.failure(); // reported as aborted before it started
            return enqueue(a, in.order(), in.receivedMicros(), 0);
        }
        return enqueue(a, withSource(in.order(), lp), in.receivedMicros(), 0); // the engine reported first: this order starts the push
    }

    /** NEW × ORDER: queue it. */
    private Runnable queue(Attempt a, In in) {
        hold(a, in);
        a.state = State.QUEUED;
        return enqueue(a, in.order(), in.receivedMicros(), 0);
    }

    /** PARKED × ORDER: the decider's copy with the source pages came before the engine told this worker: run it now. */
    private Runnable copyFirst(Attempt a, In in) {
        parked.remove(a.requestId);
        a.state = State.QUEUED;
        Runnable first = a.done;
        Runnable second = in.done();
        a.done = () -> {
            second.run();
            first.run();
        };
        a.trace = in.trace();
        a.orderTimestampMs = in.orderTimestampMs();
        return enqueue(a, in.order(), in.receivedMicros(), 0);
    }

    /** Any copy of an order already taken: not executed again; its record is done at once. */
    private Runnable duplicate(Attempt a, In in) {
        log.atInfo().addKeyValue("orderId", in.order().getOrderId()).addKeyValue("attempt", in.order().getAttempt()).addKeyValue("state", a.state)
                .log("duplicate order ignored");
        return in.done();
    }

    /** FENCED × an order: reported as failed (aborted before it started) through the ordinary path, which also commits its offset. */
    private Runnable reportAborted(Attempt a, In in) {
        hold(a, in);
        a.state = State.QUEUED; // with its abort reason: START refuses it
        return enqueue(a, in.order(), in.receivedMicros(), 0);
    }

    /** PARKED × PREFILL_DONE: the push starts now, from the pages the engine reported — no Kafka hop in between. */
    private Runnable fromEngine(Attempt a, In in) {
        parked.remove(a.requestId);
        a.state = State.QUEUED;
        LocalPrefill p = in.prefill();
        metrics.hop(Hop.PREFILL_TO_WORKER, p.computedMicros(), p.receivedMicros()); // the short path: no decider between
        return enqueue(a, withSource(a.order, p), p.receivedMicros(), p.receivedMicros());
    }

    /** PARKED × PREFILL_FAILED: fails now (as aborted) instead of waiting for the decider. */
    private Runnable failedByEngine(Attempt a, In in) {
        parked.remove(a.requestId);
        a.state = State.QUEUED;
        if (a.abortReason == null) {
            a.abortReason = "the engine's prefill failed: " + in.prefill().failure();
        }
        return enqueue(a, a.order, in.receivedMicros(), 0);
    }

    /**
     * PARKED × PROGRESS: a push large enough goes layer by layer from now on — queued with the source pages the engine's
     * first report named, each piece sent once computed; a smaller one waits for the prefill's end (no per-piece cost on
     * short prompts).
     */
    private Runnable stream(Attempt a, In in) {
        if (!layerByLayer(a.order)) {
            return null;
        }
        int[] blocks = progressSeen.get(a.requestId).sourceBlocks(); // kept before any progress is fed (progress, ahead)
        parked.remove(a.requestId);
        streaming.put(a.requestId, a);
        a.state = State.QUEUED;
        a.readiness = new PrefillReadiness(pool.geometry(), blocks, in.progress());
        log.atInfo().addKeyValue("orderId", a.order.getOrderId()).addKeyValue("attempt", a.order.getAttempt())
                .log("pushing layer by layer while the prefill computes");
        TransferOrder o = TransferOrder.newBuilder(a.order).setSourceBlocks(io.orbitkv.pd.kv.BlockRuns.skip(io.orbitkv.pd.kv.BlockRuns.fromBlocks(blocks),
                a.order.getSkipBlocks())).setSourceInstanceEpoch(in.instanceEpoch()).build();
        return enqueue(a, o, in.receivedMicros(), in.receivedMicros());
    }

    /** Whether {@code o} is pushed layer by layer: at least {@code worker.layerwise.min-bytes}, on a model of several layers. */
    private boolean layerByLayer(TransferOrder o) {
        long min = layerwiseMinBytes;
        return min >= 0 && pool.geometry().numLayers() > 1
                && io.orbitkv.pd.kv.BlockRuns.totalBlocks(o.getDestBlocks()) * pool.geometry().bytesPerBlock() >= min;
    }

    /** QUEUED or PUSHING × PROGRESS (layer by layer): more pieces are ready. */
    private Runnable advance(Attempt a, In in) {
        a.readiness.advance(in.progress());
        return null;
    }

    /** QUEUED or PUSHING × PREFILL_DONE (layer by layer): every piece is ready; the last layer goes with the first token. */
    private Runnable sourceDone(Attempt a, In in) {
        LocalPrefill p = in.prefill();
        metrics.hop(Hop.PREFILL_TO_WORKER, p.computedMicros(), p.receivedMicros());
        a.readiness.complete(p.firstToken());
        return null;
    }

    /** QUEUED or PUSHING × PREFILL_FAILED (layer by layer): the push stops; the decode engine never gets a partial KV. */
    private Runnable sourceFailed(Attempt a, In in) {
        String why = "the engine's prefill failed mid-way: " + in.prefill().failure();
        if (a.abortReason == null) {
            a.abortReason = why;
        }
        a.readiness.fail(why);
        Transfer t = a.transfer;
        return t == null ? null : () -> t.cancel(why);
    }

    /** QUEUED × ABORT: refused when an order thread takes it; one waiting for its source (layer by layer) stops waiting. */
    private Runnable abortQueued(Attempt a, In in) {
        keepReason(a, in);
        if (a.readiness != null) {
            a.readiness.fail(in.reason());
        }
        return null;
    }

    /** NEW × ABORT: the abort came before the order; the order, when it comes, is refused. */
    private Runnable fence(Attempt a, In in) {
        a.state = State.FENCED;
        return keepReason(a, in);
    }

    /** PARKED × ABORT: reported as failed (aborted before it started) now, through the ordinary path. */
    private Runnable abortParked(Attempt a, In in) {
        keepReason(a, in);
        parked.remove(a.requestId);
        a.state = State.QUEUED;
        return enqueue(a, a.order, Marks.nowMicros(), 0);
    }

    /** The first abort's reason is the one reported; a queued attempt is refused when an order thread takes it. */
    private Runnable keepReason(Attempt a, In in) {
        if (a.abortReason == null) {
            a.abortReason = in.reason();
        }
        return null;
    }

    /** PUSHING × ABORT: cancel the push (if it has not been handed its transfer yet, {@link #execute} cancels it then). */
    private Runnable abortPush(Attempt a, In in) {
        keepReason(a, in);
        orders.notifyAll(); // a held push (fault drills) ends now
        if (a.readiness != null) {
            a.readiness.fail(in.reason());
        }
        Transfer t = a.transfer;
        return t == null ? null : () -> t.cancel(in.reason());
    }

    /** QUEUED × START: pushing, unless aborted meanwhile (then refused before any byte moves). */
    private Runnable start(Attempt a, In in) {
        if (a.abortReason != null) {
            throw new TransferException(TransferError.ABORTED, "aborted before it started: " + a.abortReason);
        }
        a.state = State.PUSHING;
        return null;
    }

    /** × ENDED: the push's outcome (or the refusal before it) is the attempt's terminal state. */
    private Runnable end(Attempt a, In in) {
        streaming.remove(a.requestId, a);
        a.state = in.ended();
        a.transfer = null;
        a.order = null;
        a.done = null;
        return null;
    }

    /** PARKED × STOP: forgotten; its offset stays uncommitted, so a restarted worker parks it again. */
    private Runnable dropParked(Attempt a, In in) {
        parked.remove(a.requestId);
        return null;
    }

    /** PUSHING × STOP: the push is cancelled; its order is executed again by the next start (offset uncommitted). */
    private Runnable stopPush(Attempt a, In in) {
        if (a.readiness != null) {
            a.readiness.fail("worker stopping");
        }
        Transfer t = a.transfer;
        return t == null ? null : () -> t.cancel("worker stopping");
    }

    /** Keeps what the order's first copy brings: request, order, trace, timestamp and the record's {@code done}. */
    private static void hold(Attempt a, In in) {
        a.order = in.order();
        a.trace = in.trace();
        a.orderTimestampMs = in.orderTimestampMs();
        a.done = in.done();
    }

    // ------------------------------------------------------------------------------------------------ inputs

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
        Input input = o.getAwaitPrefill() ? Input.ORDER_AHEAD : Input.ORDER;
        Runnable then;
        synchronized (orders) {
            Attempt a = orders.computeIfAbsent(key(o.getOrderId(), o.getAttempt()), Attempt::new);
            if (a.requestId == null) {
                a.requestId = requestId;
            }
            then = feed(a, In.order(input, o, trace, orderTimestampMs, done, receivedMicros));
        }
        run(then);
    }

    private static void run(Runnable then) {
        if (then != null) {
            then.run();
        }
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
        Runnable then = null;
        synchronized (orders) {
            prefills.put(requestId, p);
            Attempt a = engineFed(requestId);
            if (a != null) {
                then = feed(a, In.prefill(p));
            }
        }
        run(then);
    }

    /** The attempt the engine's reports on {@code requestId} feed: parked for its prefill, or pushing layer by layer. */
    private Attempt engineFed(String requestId) {
        Attempt a = parked.get(requestId);
        return a != null ? a : streaming.get(requestId);
    }

    /**
     * The engine reported how far the prefill of {@code requestId} has come (instance {@code instanceEpoch}, received at
     * {@code receivedMicros}): an order parked for it may start pushing layer by layer; one doing so sends what is now
     * complete.
     */
    public void progress(String requestId, PrefillProgress p, long instanceEpoch, long receivedMicros) {
        Runnable then = null;
        synchronized (orders) {
            Progress before = progressSeen.get(requestId);
            int[] blocks = p.sourceBlocks() != null ? p.sourceBlocks() : before == null ? null : before.sourceBlocks();
            if (blocks == null) {
                return; // a later report whose first never came: nothing to push from
            }
            progressSeen.put(requestId, new Progress(p, blocks, instanceEpoch));
            Attempt a = engineFed(requestId);
            if (a != null) {
                then = feed(a, In.progress(p, instanceEpoch, receivedMicros));
            }
        }
        run(then);
    }

    /** Pushes of at least {@code minBytes} go layer by layer when the engine reports progress; negative: never. */
    public OrderRunner layerwise(long minBytes) {
        this.layerwiseMinBytes = minBytes;
        return this;
    }

    /**
     * Fault drills ({@code worker.fault.hold-push-prefix}): a push of a request whose id starts with {@code prefix} is
     * reported started and then held for {@code d} before any byte moves, so that a cancel or a lease that runs out
     * meets a push in flight (a real one lasts about a millisecond on a GPU: nothing could land within it). The
     * decider's abort ends the hold at once, the attempt reported aborted; null: none.
     */
    public OrderRunner holdPushes(String prefix, Duration d) {
        this.holdPrefix = prefix;
        this.hold = d;
        return this;
    }

    /** Holds a push of {@code entry} (reported started) for {@link #hold}, or until the decider aborts it. */
    private void hold(Attempt entry) throws InterruptedException {
        long deadline = System.nanoTime() + hold.toNanos();
        synchronized (orders) {
            while (entry.abortReason == null) {
                long left = deadline - System.nanoTime();
                if (left <= 0) {
                    return;
                }
                orders.wait(Math.max(1, left / 1_000_000));
            }
            throw new TransferException(TransferError.ABORTED, "aborted while its push was held (worker.fault.hold-push-prefix): "
                    + entry.abortReason);
        }
    }

    /** The decider aborted this attempt: stop it if it runs, refuse it if it has not started. */
    public void abort(String orderId, int attempt, String reason) {
        Runnable then;
        synchronized (orders) {
            then = feed(orders.computeIfAbsent(key(orderId, attempt), Attempt::new), In.of(Input.ABORT, reason));
        }
        log.atInfo().addKeyValue("orderId", orderId).addKeyValue("attempt", attempt).log("abort requested: " + reason);
        run(then);
    }

    /** The state of an attempt, for tests: null if this runner never heard of it (or forgot it). */
    State stateOf(String orderId, int attempt) {
        synchronized (orders) {
            Attempt a = orders.get(key(orderId, attempt));
            return a == null ? null : a.state;
        }
    }

    /**
     * Queues {@code o} for {@code a} on an order thread. {@code receivedMicros}: when this worker got what lets it run —
     * the order, or the engine's prefill fact for a parked order ahead, whose time {@code engineFactMicros} (else 0) then
     * also is ({@link Marks#ENGINE_FACT}: the anatomy's path skips the decider). Returned to run outside the lock.
     */
    private Runnable enqueue(Attempt a, TransferOrder o, long receivedMicros, long engineFactMicros) {
        String requestId = a.requestId;
        TraceContext trace = a.trace;
        long orderTimestampMs = a.orderTimestampMs;
        boolean byEngine = engineFactMicros > 0;
        return () -> {
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
                    run(requestId, o, a, trace, marks);
                } finally {
                    metrics.finished();
                }
            });
        };
    }

    private void run(String requestId, TransferOrder o, Attempt entry, TraceContext trace, Marks marks) {
        long t0 = System.nanoTime();
        CompletableFuture<Void> report;
        Runnable done;
        try {
            TransferResult r = execute(requestId, o, entry, trace, marks);
            marks.addAll("", r.marks());
            hops(marks);
            metrics.completed(r.transport(), r.durationNanos(), r.bytes());
            done = ended(entry, State.LANDED);
            completed.incrementAndGet();
            log.atInfo().addKeyValue("orderId", o.getOrderId()).addKeyValue("attempt", o.getAttempt()).addKeyValue("bytes", r.bytes())
                    .addKeyValue("ms", r.durationNanos() / 1_000_000).addKeyValue("GBps", String.format("%.2f", r.gigabytesPerSecond()))
                    .addKeyValue("transport", r.transport()).addKeyValue("marks", r.marks().format()).log("transfer completed");
            report = reporter.completed(requestId, o.getOrderId(), o.getAttempt(), r.bytes(), r.durationNanos() / 1000, trace, marks);
            metrics.hop(Hop.TRANSFER_REPORT, marks.get(TransferResult.ACKED).orElse(0), marks.get(Marks.OUT).orElse(0));
        } catch (TransferException e) {
            done = ended(entry, e.kind() == TransferError.ABORTED ? State.ABORTED : State.FAILED);
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
            done = ended(entry, State.FAILED);
            failed.incrementAndGet();
            metrics.failed(entry.transport, TransferError.INTERNAL, true);
            log.atError().setCause(e).addKeyValue("orderId", o.getOrderId()).log("transfer failed unexpectedly");
            report = reporter.failed(requestId, o.getOrderId(), o.getAttempt(), TransferError.INTERNAL + ": " + e, true, trace, marks);
        }
        Runnable recordDone = done;
        report.whenComplete((v, err) -> {
            if (err == null && recordDone != null) {
                recordDone.run();
            }
            // else: the report is not durable, so the offset is not committed; a restart re-executes the order.
        });
    }

    /** Feeds ENDED; the record's {@code done} (to run once the report is durable). */
    private Runnable ended(Attempt a, State how) {
        synchronized (orders) {
            Runnable done = a.done;
            feed(a, In.ended(how));
            return done;
        }
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
            feed(entry, In.of(Input.START, null)); // refused here if aborted while queued
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
        EngineRegistration dest = peers.await(o.getDestEngineId(), o.getDestInstanceEpoch(), peerWait).orElseThrow(
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
        String held = holdPrefix;
        boolean holding = held != null && requestId.startsWith(held);
        if (holding) {
            reporter.started(requestId, o.getOrderId(), o.getAttempt(), c.transport().name(), trace, marks.copy());
            hold(entry);
        }
        Transfer t = entry.readiness == null ? c.transport().push(PushRequest.of(requestId, o, workerId), pool, plan, c.peer())
                : c.transport().push(PushRequest.of(requestId, o, workerId), pool, plan, c.peer(), entry.readiness);
        // Reported once the push is under way (its stripes run on their own threads): the report's serialization and
        // send are not on the push's path. Same producer, same partition: it still precedes the push's outcome.
        if (!holding) {
            reporter.started(requestId, o.getOrderId(), o.getAttempt(), c.transport().name(), trace, marks.copy());
        }
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
        List<Runnable> stops = new ArrayList<>();
        synchronized (orders) {
            for (Attempt a : new ArrayList<>(orders.values())) {
                Runnable then = feed(a, In.of(Input.STOP, "worker stopping"));
                if (then != null) {
                    stops.add(then);
                }
            }
        }
        stops.forEach(Runnable::run);
        synchronized (orders) {
            parked.clear(); // any the dedupe memory forgot as well: their offsets stay uncommitted
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
