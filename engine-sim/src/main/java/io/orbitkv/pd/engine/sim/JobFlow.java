package io.orbitkv.pd.engine.sim;

import static io.orbitkv.pd.engine.sim.SimEngine.error;
import static io.orbitkv.pd.engine.sim.SimEngine.send;

import io.orbitkv.pd.engine.client.BlockAllocator;
import io.orbitkv.pd.engine.client.DecisionListener;
import io.orbitkv.pd.engine.client.EngineControl;
import io.orbitkv.pd.engine.client.KvSignal;
import io.orbitkv.pd.engine.client.api.ApiProtocol;
import io.orbitkv.pd.engine.client.http.CompletionRequest;
import io.orbitkv.pd.engine.sim.model.StepScheduler;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.kv.BulkPriority;
import io.orbitkv.pd.kv.KvPool;
import io.orbitkv.pd.metrics.ComponentMetrics;
import io.orbitkv.pd.tracing.Hop;
import io.orbitkv.pd.tracing.Marks;
import io.vertx.core.Context;
import io.vertx.core.Future;
import io.vertx.core.Promise;
import io.vertx.core.Vertx;
import io.vertx.core.http.HttpServerResponse;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import java.util.function.Consumer;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The engine's side of P/D, per request ({@link Job}) from the moment the HTTP front accepted it to its last token:
 * <ul>
 *   <li><b>prefill</b>: pages allocated, the prompt's KV computed into them, {@code PrefillCompleted} reported, the
 *       first token answered; the pages stay until a {@code ReleaseDecided} names them ({@link PageReleases});</li>
 *   <li><b>decode</b>: destination pages under a lease, {@code DecodeReady} and heartbeats, then the KV handoff's
 *       outcome: {@code KvReady} (decode while the received pages are verified beside it), {@code RecomputeDecided}
 *       (prefill here) or the request's end;</li>
 *   <li><b>colocated</b>: prefill and decode here, pages freed at the end.</li>
 * </ul>
 * The model's time is the {@link Stepper}'s: a job's prefill and decode are sequences of the engine's step scheduler,
 * and each token goes out when the step that produced it ends. Every method runs on the engine's event loop; the KV
 * bytes (materialising a prompt's KV, checking received KV) are written and read on worker threads and come back to it.
 */
final class JobFlow {

    private static final Logger log = LoggerFactory.getLogger(SimEngine.class);

    /** Monotonic counters, exposed on {@code /stats}. */
    static final class Counters {
        final LongAdder prefills = new LongAdder();
        final LongAdder decodes = new LongAdder();
        final LongAdder colocated = new LongAdder();
        final LongAdder recomputed = new LongAdder();
        final LongAdder completed = new LongAdder();
        final LongAdder verifiedPages = new LongAdder();
        final LongAdder corrupt = new LongAdder();
        final LongAdder ended = new LongAdder();
        final LongAdder clientGone = new LongAdder();
        final LongAdder rejected = new LongAdder();
        final LongAdder released = new LongAdder();
        final LongAdder leaseLost = new LongAdder();
        final LongAdder leaseUnconfirmed = new LongAdder();
    }

    private final SimEngineConfig config;
    private final SimModel model;
    private final Vertx vertx;
    private final Context ctx;
    private final KvPool pool;
    private final BlockAllocator allocator;
    private final EngineMetrics meters;
    private final Hop.Meters hops;
    private final OpenAiFormat format;
    /** The control-plane client, once the engine joined it; null for a standalone engine. */
    private final Supplier<EngineControl> client;
    private final AtomicLong leaseEpochs = new AtomicLong();
    private final Map<String, Job> jobs = new ConcurrentHashMap<>();
    private final Counters counters = new Counters();
    private final PageReleases releases;
    private final Stepper stepper;
    private long seqs;

    JobFlow(SimEngineConfig config, Vertx vertx, Context ctx, KvPool pool, BlockAllocator allocator, ComponentMetrics metrics,
            OpenAiFormat format, Supplier<EngineControl> client) {
        this.config = config;
        this.model = new SimModel(config.seed());
        this.vertx = vertx;
        this.ctx = ctx;
        this.pool = pool;
        this.allocator = allocator;
        this.meters = new EngineMetrics(metrics.registry(), config.engineId(), allocator);
        this.hops = Hop.meters(metrics.registry(), Hop.KV_READY_TO_ENGINE, Hop.LANDED_TO_ENGINE, Hop.ENGINE_FIRST_TOKEN);
        this.format = format;
        this.client = client;
        this.releases = new PageReleases(config.engineId(), allocator, counters.released);
        // frees come from the engine's context and from the decisions' thread: the waiting queue is served on the context
        allocator.onFree(() -> ctx.runOnContext(v -> admitWaiting()));
        this.stepper = new Stepper(config.engineId(), config.compute(), config.geometry().numBlocks(), config.geometry().blockSizeTokens(), ctx,
                metrics.registry());
        stepper.layerwise(config.geometry().numLayers(), config.compute().progressReports(), config.compute().progressInterval().toNanos());
    }

    /** The model's state for {@code /stats}. */
    Map<String, Object> modelStats() {
        Map<String, Object> m = new java.util.LinkedHashMap<>(stepper.stats());
        m.put("waiting_for_kv", waitingForPages.size()); // read off the context: a moment stale at worst
        return m;
    }

    /** Stops the model's clock (the engine is closing). */
    void close() {
        stepper.close();
    }

    Counters counters() {
        return counters;
    }

    /** Requests taken and not yet answered. */
    int inFlight() {
        return jobs.size();
    }

    /** What the control plane decides for this engine's pages. */
    DecisionListener decisions() {
        return releases;
    }

    private EngineControl client() {
        return client.get();
    }

    // ------------------------------------------------------------------------------------------------ a job's life

    /** The client closed the connection: stop whatever the job waits for, free what nobody else will. */
    void clientGone(Job job) {
        if (!job.finished) {
            job.gone = true;
            counters.clientGone.increment();
            stopTimers(job);
            if (!job.computing || job.onFirst == null) {
                // Out of the scheduler now: nobody reads its tokens. Before its first token the computation's end does it
                // (the first token completes the computation, which then reports or frees as before).
                stepper.abort(job.seq);
            }
            EngineControl c = client();
            if (c != null) {
                c.forget(job.rid);
            }
            if ("colocated".equals(job.mode) && !job.computing) {
                allocator.free("C:" + job.rid); // while computing, the computation frees them when it ends
            }
            jobs.remove(job.rid + "/" + job.mode);
            ctx.runOnContext(v -> admitWaiting()); // it may have been waiting for pages, ahead of others that fit
        }
    }

    private void stopTimers(Job job) {
        if (job.fenceTimer >= 0) {
            vertx.cancelTimer(job.fenceTimer);
            job.fenceTimer = -1;
        }
        if (job.heartbeatTimer >= 0) {
            vertx.cancelTimer(job.heartbeatTimer);
            job.heartbeatTimer = -1;
        }
        if (job.timeoutTimer >= 0) {
            vertx.cancelTimer(job.timeoutTimer);
            job.timeoutTimer = -1;
        }
    }

    private void finish(Job job) {
        job.finished = true;
        stopTimers(job);
        if (!job.computing) {
            stepper.abort(job.seq); // a job that ends early leaves the scheduler; one that finished has left it
        }
        jobs.remove(job.rid + "/" + job.mode);
    }

    /** Takes {@code job} in {@code mode}: counted, and found by {@code /stats} until it finishes. */
    private void take(Job job, String mode, LongAdder counter) {
        job.mode = mode;
        counter.increment();
        jobs.put(job.rid + "/" + mode, job);
    }

    // ------------------------------------------------------------------------------------------------ prefill

    void prefill(Job job) {
        take(job, "prefill", counters.prefills);
        pages(job, "P:", why -> client().prefillFailed(job.rid, why, true, job.trace, job.marks()), blocks -> prefill(job, blocks));
    }

    private void prefill(Job job, int[] blocks) {
        compute(job, blocks, StepScheduler.Role.PREFILL, () -> {
            int first = model.generate(job.tokens, 1)[0];
            EngineControl c = client();
            c.prefillCompleted(job.rid, blocks, job.tokens.length, first, job.trace, job.marks()).whenComplete((v, err) -> ctx.runOnContext(x -> {
                finish(job);
                if (err != null) {
                    if (definitelyRefused(err)) {
                        // The worker refused the fact: it never reached the log, nobody will release these pages.
                        allocator.free("P:" + job.rid);
                    } else {
                        // No acknowledgement (a timeout, a lost connection): the fact may be in the log and an order may
                        // read these pages; they stay until a release or the outcome says what the decider knew.
                        holdUnsure(ReleaseSide.PREFILL, job.rid);
                    }
                    error(job.response, 503, "cannot report the prefill of " + job.rid + ": " + err.getMessage(), "service_unavailable", null);
                    return;
                }
                if (!job.gone) {
                    job.response.putHeader(Marks.HTTP_HEADER, job.marks().mark(Marks.OUT).format());
                    send(job.response, 200, format.prefillAnswer(job, first, blocks, c.instanceEpoch()));
                }
            }));
        });
    }

    /**
     * Computes the prompt's KV: a sequence of the step scheduler ({@code part}: a P/D prefill leaves after its first token,
     * a colocated or recomputed one goes on decoding) while the bytes are written into {@code blocks} on a worker thread;
     * {@code then} runs on the loop once both are done (the first token sampled, the KV in the pages).
     */
    private void compute(Job job, int[] blocks, StepScheduler.Role part, Runnable then) {
        job.computing = true;
        long t0 = System.nanoTime();
        job.computeStartMicros = Marks.nowMicros();
        Future<Void> fill = vertx.executeBlocking(() -> {
            BulkPriority.apply(config.kvNice());
            model.writeKv(pool, blocks, job.tokens, layers -> {
                if (layers == 1 && config.corruptKvPrefix() != null && job.rid.startsWith(config.corruptKvPrefix()) && "prefill".equals(job.mode)) {
                    // engine.fault.corrupt-kv-prefix: silent corruption of one bit of layer 0, for tests of the decode side's
                    // check — before the layer counts as written, so a push layer by layer carries it too
                    MemorySegment page = pool.hostRegion(0).orElseThrow().asSlice((long) blocks[0] * pool.geometry().pageBytes());
                    page.set(ValueLayout.JAVA_BYTE, 3, (byte) (page.get(ValueLayout.JAVA_BYTE, 3) ^ 0x08));
                    log.atWarn().addKeyValue("requestId", job.rid).log("engine.fault.corrupt-kv-prefix: flipped one bit of the computed KV");
                }
                job.filledLayers = layers;
                Runnable r = job.onFilled;
                if (r != null) {
                    ctx.runOnContext(v -> r.run());
                }
            });
            return null;
        }, false);
        Promise<Void> first = Promise.promise();
        job.onFirst = first::tryComplete;
        job.seq = newSeq(job);
        int output = part == StepScheduler.Role.PREFILL ? 1 : job.request.maxTokens();
        List<byte[]> hashes = hashes(job); // looked up now, cached once computed
        EngineControl c = client();
        stepper.submit(job.seq, job.tokens.length, output, stepper.cachedTokens(hashes, job.tokens), part, steps(job),
                part == StepScheduler.Role.PREFILL && c != null && c.takesPrefillProgress() ? progress(job, blocks, c) : null);
        Future.all(first.future(), fill).onComplete(ar -> {
            job.computing = false;
            job.computeEndMicros = Marks.nowMicros();
            job.prefillNanos = System.nanoTime() - t0;
            if (ar.failed()) {
                stepper.abort(job.seq);
                log.atError().setCause(ar.cause()).addKeyValue("requestId", job.rid).log("prefill computation failed");
                error(job.response, 500, "prefill failed: " + ar.cause(), "internal_error", null);
                return;
            }
            meters.prefill(job.prefillNanos, job.tokens.length);
            reportCache(stepper.cache(hashes, job.tokens));
            if (job.gone || job.finished) {
                // Ended while computing: the prompt is computed (a prefill still reports it, a colocated job frees its
                // pages, as below), but nobody waits for more tokens.
                stepper.abort(job.seq);
            }
            then.run();
        });
    }

    /**
     * The prompt's block hashes, hashed once per job: a decode looks its cached prefix up and caches the blocks it received,
     * a recomputed one looks up and caches again — one SHA-256 per block, not one per use.
     */
    private List<byte[]> hashes(Job job) {
        if (job.hashes == null) {
            job.hashes = stepper.hashes(job.tokens);
        }
        return job.hashes;
    }

    /** A name for the job's next sequence in the scheduler: unique even when one request is prefilled and decoded here. */
    private String newSeq(Job job) {
        return job.rid + "#" + (++seqs);
    }

    /** The prefix cache changed: the events go to the engine's worker (orbitkv.kv-events), for a prefix-aware router. */
    private void reportCache(List<Object> events) {
        EngineControl c = client();
        if (c != null && !events.isEmpty()) {
            c.kvEvents(events).exceptionally(e -> {
                log.atDebug().log("KV cache events not reported: " + e);
                return null;
            });
        }
    }

    /**
     * A P/D prefill's layer-by-layer progress to the worker ({@code prefill_progress}), so it pushes each layer's KV while
     * the next computes: what the modelled step says is computed, but never a layer whose bytes the fill (a worker thread
     * writing layer after layer) has not written yet — reported at the step's points and at each layer the fill finishes,
     * only when it says more than the last report. The first report names the pages.
     */
    private Stepper.LayerListener progress(Job job, int[] blocks, EngineControl c) {
        int numLayers = config.geometry().numLayers();
        int numTokens = job.tokens.length;
        ApiProtocol.PrefillProgress[] model = {null}; // the step's latest
        ApiProtocol.PrefillProgress[] sent = {null};
        Runnable report = () -> {
            ApiProtocol.PrefillProgress m = model[0];
            if (job.gone || job.finished || m == null) {
                return;
            }
            int filled = job.filledLayers;
            // short of the fill: tokens [0, chunk end) in the layers both have (a claim the bytes back, if a smaller one)
            ApiProtocol.PrefillProgress now = filled >= numLayers ? m
                    : new ApiProtocol.PrefillProgress(job.rid, null, numTokens, 0, m.chunkEnd(), Math.min(m.layers(), filled));
            if ((now.doneTokens() == 0 && now.layers() == 0) || (sent[0] != null && !now.advances(sent[0]))) {
                return;
            }
            c.prefillProgress(job.rid, sent[0] == null ? blocks : null, numTokens, now.doneTokens(), now.chunkEnd(), now.layers());
            sent[0] = now;
        };
        job.onFilled = report;
        return (done, chunkEnd, layers) -> {
            model[0] = new ApiProtocol.PrefillProgress(job.rid, null, numTokens, done, chunkEnd, layers);
            report.run();
        };
    }

    /** What the job's steps produced: the first token completes its compute; later ones go out as they come. */
    private Stepper.Listener steps(Job job) {
        return (produced, finished) -> {
            job.produced = produced;
            Runnable first = job.onFirst;
            if (first != null) {
                job.onFirst = null;
                if (job.gone || job.finished) {
                    // Left while its prompt computed: stop decoding at the first token, not when the KV fill ends (a
                    // slow fill on a busy machine let a gone job decode all its tokens). The compute still ends.
                    stepper.abort(job.seq);
                }
                first.run();
            } else if (job.drain != null) {
                job.drain.run();
            }
        };
    }

    // ------------------------------------------------------------------------------------------------ decode

    void decode(Job job) {
        take(job, "decode", counters.decodes);
        pages(job, "D:", why -> client().decodeRejected(job.rid, why, job.trace, job.marks()), blocks -> decode(job, blocks));
    }

    private void decode(Job job, int[] blocks) {
        EngineControl c = client();
        // Move only what is missing: the prompt's first blocks this engine holds in its prefix cache are written here (on
        // a worker thread, beside the transfer of the rest); decode-ready says how many, and the order skips them. At
        // least one block always moves (the one the prefill's last token is in).
        int cachedBlocks = config.compute().skipCached() ? Math.min(stepper.cachedBlocks(hashes(job)), blocks.length - 1) : 0;
        if (cachedBlocks > 0) {
            int[] mine = java.util.Arrays.copyOf(blocks, cachedBlocks);
            int[] tokens = java.util.Arrays.copyOf(job.tokens, cachedBlocks * config.geometry().blockSizeTokens());
            job.restored = vertx.executeBlocking(() -> {
                BulkPriority.apply(config.kvNice());
                model.writeKv(pool, mine, tokens);
                return null;
            }, false);
        }
        job.leaseEpoch = leaseEpochs.incrementAndGet();
        job.leaseId = "lease/" + config.engineId() + "/" + job.rid;
        long waitStart = System.nanoTime();
        job.awaitingKv = true;
        c.awaitKv(job.rid).whenComplete((signal, err) -> ctx.runOnContext(v -> {
            job.kvWaitNanos = System.nanoTime() - waitStart;
            meters.kvWait(job.kvWaitNanos);
            onKvSignal(job, blocks, signal);
        }));
        long leaseMs = config.leaseDuration().toMillis();
        releases.announced(job.rid, job.leaseId, job.leaseEpoch);
        // Self-fencing (docs/engine-api.md, "Leases and partitions"): the decider counts a lease from when its fact reached the
        // log, after it was sent; the pages are surely ours until lease - margin after the last fact we know was written.
        job.leaseUntilNanos = System.nanoTime() + leaseValidNanos();
        armFence(job);
        long readySent = System.nanoTime();
        job.unconfirmed.add(readySent);
        c.decodeReady(job.rid, job.leaseId, job.leaseEpoch, blocks, System.currentTimeMillis() + leaseMs, cachedBlocks, job.trace, job.marks())
                .thenRun(() -> ctx.runOnContext(v -> confirmed(job, readySent)));
        // Until the KV is in, heartbeats go often enough that a lease nobody acknowledges any more is seen within
        // engine.kv.confirm-timeout (a KV wait is short: it rarely sees one); then at the lease's own period.
        heartbeats(job, waitingBeat());
        job.timeoutTimer = vertx.setTimer(config.kvTimeout().toMillis(), id -> {
            job.timeoutTimer = -1;
            if (!job.finished && !job.gone) {
                c.forget(job.rid);
                finish(job);
                error(job.response, 504, "the KV of request " + job.rid + " did not arrive within " + config.kvTimeout(), "timeout", null);
            }
        });
    }

    /** The heartbeat period while a decode waits for its KV: a quarter of the confirm timeout, at most the lease's period. */
    private Duration waitingBeat() {
        Duration q = config.kvConfirm().dividedBy(4);
        return q.compareTo(config.heartbeat()) < 0 ? q : config.heartbeat();
    }

    /** Heartbeats the job's lease every {@code period} (replacing the current timer); while the KV is awaited, checks it is confirmed. */
    private void heartbeats(Job job, Duration period) {
        if (job.heartbeatTimer >= 0) {
            vertx.cancelTimer(job.heartbeatTimer);
        }
        long leaseMs = config.leaseDuration().toMillis();
        job.heartbeatTimer = vertx.setPeriodic(Math.max(1, period.toMillis()), id -> {
            if (job.finished || job.gone) {
                return;
            }
            if (job.awaitingKv && unconfirmedFor(job) >= config.kvConfirm().toNanos()) {
                giveUpUnconfirmed(job);
                return;
            }
            long sent = System.nanoTime();
            job.unconfirmed.add(sent);
            client().heartbeat(job.rid, job.leaseId, job.leaseEpoch, System.currentTimeMillis() + leaseMs, ++job.heartbeats, job.trace, null)
                    .thenRun(() -> ctx.runOnContext(v -> {
                        confirmed(job, sent);
                        renewed(job, sent);
                    }));
        });
    }

    /** A lease fact sent at {@code sentNanos} was acknowledged: it, and every one sent before it, is confirmed. */
    private static void confirmed(Job job, long sentNanos) {
        while (!job.unconfirmed.isEmpty() && job.unconfirmed.peekFirst() <= sentNanos) {
            job.unconfirmed.pollFirst();
        }
    }

    /** How long the oldest unacknowledged lease fact has waited (0: none waits). */
    private static long unconfirmedFor(Job job) {
        Long oldest = job.unconfirmed.peekFirst();
        return oldest == null ? 0 : System.nanoTime() - oldest;
    }

    /**
     * Still waiting for its KV, the decode's lease facts went unacknowledged for {@code engine.kv.confirm-timeout}: this
     * engine cannot reach Kafka, so the decider may never see its decode-ready (it waits up to its decode-ready timeout)
     * nor, if it did, hear of the handoff's end. Nothing was answered yet, so the request is given back at once (503: the
     * proxy tries other engines) instead of holding its client until the lease or the KV timeout. The pages stay held: a
     * release names them if the decode-ready is in the log; the request's outcome (the proxy cancels the attempt it gave
     * up) or the fallback frees them if it never got there.
     */
    private void giveUpUnconfirmed(Job job) {
        holdUnsure(ReleaseSide.DECODE, job.rid);
        stopUsingLease(job, counters.leaseUnconfirmed, "lease of " + job.rid + " on " + config.engineId() + " unconfirmed: its facts went"
                + " unacknowledged for " + config.kvConfirm().toMillis() + " ms while the KV was awaited (engine.kv.confirm-timeout; Kafka"
                + " unreachable?)", "lease_unconfirmed");
    }

    /**
     * The decode stops using its lease: counted and logged, a cancel naming why reported where it still can be (cut off
     * from Kafka, the decider learns it from the lease's expiry or the proxy's own cancel), and a 503 to the caller.
     */
    private void stopUsingLease(Job job, LongAdder counter, String why, String type) {
        counter.increment();
        log.atWarn().addKeyValue("requestId", job.rid).log(why);
        EngineControl c = client();
        if (c != null) {
            c.forget(job.rid);
            c.cancel(job.rid, why, job.trace, null).exceptionally(e -> null);
        }
        finish(job);
        error(job.response, 503, why, type, null);
    }

    /** Pages whose report may or may not be in the log: held until what the decider knew is known, at most the fallback. */
    private void holdUnsure(ReleaseSide side, String rid) {
        releases.unsure(side, rid);
        vertx.setTimer(UNSURE_FALLBACK_MS, id -> releases.giveUp(rid));
    }

    /** Beyond every deadline a request can have at the decider (prefill 60 s, lease 30 s, retries): unsure pages go then. */
    private static final long UNSURE_FALLBACK_MS = 600_000;

    /** Whether a failed report surely did not reach the log: the worker's engine API refused it (other than unavailable). */
    static boolean definitelyRefused(Throwable err) {
        for (Throwable t = err; t != null; t = t.getCause()) {
            if (t instanceof io.orbitkv.pd.engine.client.api.ApiException a) {
                return !io.orbitkv.pd.engine.client.api.ApiException.UNAVAILABLE.equals(a.code());
            }
        }
        return false;
    }

    private long leaseValidNanos() {
        return config.leaseDuration().minus(config.leaseMargin()).toNanos();
    }

    /** A heartbeat sent at {@code sentNanos} was written: the lease is surely held until lease - margin after that. */
    private void renewed(Job job, long sentNanos) {
        if (!job.finished && !job.gone && sentNanos + leaseValidNanos() > job.leaseUntilNanos) {
            job.leaseUntilNanos = sentNanos + leaseValidNanos();
            armFence(job);
        }
    }

    private void armFence(Job job) {
        if (job.fenceTimer >= 0) {
            vertx.cancelTimer(job.fenceTimer);
        }
        long ms = Math.max(1, (job.leaseUntilNanos - System.nanoTime() + 999_999) / 1_000_000);
        job.fenceTimer = vertx.setTimer(ms, id -> {
            job.fenceTimer = -1;
            if (job.finished || job.gone) {
                return;
            }
            if (System.nanoTime() < job.leaseUntilNanos) {
                armFence(job);
            } else {
                fence(job);
            }
        });
    }

    /**
     * No acknowledged renewal covers now: the decider may time the lease out and release its pages to another request.
     * Stop using them (the answer breaks off), say why while Kafka may still be reachable, and keep them held until a
     * release names them: a release that arrives after the partition heals then frees pages no longer in use.
     */
    private void fence(Job job) {
        stopUsingLease(job, counters.leaseLost, "lease of " + job.rid + " on " + config.engineId() + " not renewed in time (heartbeats"
                + " unacknowledged; " + config.leaseMargin().toMillis() + " ms margin): stopped using its pages", "lease_lost");
    }

    private void onKvSignal(Job job, int[] blocks, KvSignal signal) {
        if (job.finished || job.gone) {
            return;
        }
        if (job.timeoutTimer >= 0) {
            vertx.cancelTimer(job.timeoutTimer);
            job.timeoutTimer = -1;
        }
        job.awaitingKv = false;
        if (!(signal instanceof KvSignal.Ended)) {
            heartbeats(job, config.heartbeat()); // the KV is in (or recomputed here): the lease's own period from now
        }
        switch (signal) {
            case KvSignal.Ready ready -> {
                job.kvBytes = ready.bytes();
                job.kvReadyMicros = ready.receivedMicros();
                job.landedMicros = ready.landedMicros();
                hops.record(ready.onLanding() ? Hop.LANDED_TO_ENGINE : Hop.KV_READY_TO_ENGINE, ready.decidedMicros(), ready.receivedMicros());
                if (config.verify()) {
                    // A real engine never checks received KV before its first token: verify beside the decode, and let
                    // only the end of the answer wait for it, so a corrupt handoff is still refused (never answered in full).
                    long t0 = System.nanoTime();
                    io.vertx.core.Future<Void> restored = job.restored;
                    job.verified = vertx.executeBlocking(() -> {
                        BulkPriority.apply(config.kvNice());
                        if (restored != null) {
                            restored.toCompletionStage().toCompletableFuture().join(); // the cached prefix's pages, written here
                        }
                        return model.verifyKv(pool, blocks, job.tokens);
                    }, false);
                    job.verified.onComplete(ar -> {
                        job.verifyNanos = System.nanoTime() - t0;
                        if (ar.succeeded() && ar.result() == null) {
                            counters.verifiedPages.add((long) blocks.length * config.geometry().regionCount());
                        } else if (!job.gone && !job.finished) {
                            refuseCorrupt(job, ready, ar.failed() ? "verification failed: " + ar.cause() : ar.result().toString());
                        }
                    });
                }
                generate(job, false, () -> client().decodeCompleted(job.rid, job.request.maxTokens(), false, job.trace, job.marks()));
            }
            case KvSignal.Recompute rc -> {
                // The worker fences the request's pushes on the same decision; a new lease epoch marks our own writes.
                job.leaseEpoch = leaseEpochs.incrementAndGet();
                counters.recomputed.increment();
                log.atInfo().addKeyValue("requestId", job.rid).log("recomputing the prefill here: " + rc.reason());
                compute(job, blocks, StepScheduler.Role.BOTH, () -> {
                    if (!job.gone) {
                        generate(job, true, () -> client().decodeCompleted(job.rid, job.request.maxTokens(), true, job.trace, job.marks()));
                    }
                });
            }
            case KvSignal.Ended end -> {
                counters.ended.increment();
                finish(job);
                int status = end.kind() == OutcomeKind.TIMED_OUT ? 504 : end.kind() == OutcomeKind.CANCELLED ? 409 : 502;
                error(job.response, status, "request " + job.rid + " ended before its KV arrived: " + end.kind() + ": " + end.reason(),
                        end.kind() == OutcomeKind.CANCELLED ? "request_cancelled" : "handoff_failed", null);
            }
        }
    }

    /** The received KV does not verify: stop the answer (a 502, or a broken stream once it started) and cancel the request. */
    private void refuseCorrupt(Job job, KvSignal.Ready ready, String why) {
        counters.corrupt.increment();
        log.atError().addKeyValue("requestId", job.rid).addKeyValue("orderId", ready.orderId())
                .log("refusing to decode: the received KV does not verify: " + why);
        finish(job);
        // The answer breaks only once the engine's own reason is in the log: the proxy reports the broken answer as a
        // cancel of its own, and the decider must read this one first (as the Python engine does; PipelineE2EIT saw the
        // proxy's cancel win the race when the answer broke at once).
        client().cancel(job.rid, "KV verification failed on " + config.engineId() + ": " + why, job.trace, null)
                .orTimeout(10, java.util.concurrent.TimeUnit.SECONDS)
                .whenComplete((v, err) -> ctx.runOnContext(x -> error(job.response, 502, "the KV received for request " + job.rid
                        + " does not verify (" + why + "); not decoding", "kv_verification_failed", null)));
    }

    /** A job waiting for KV pages ({@code engine.kv-wait}). */
    private static final class Waiting {
        final Job job;
        final String side;
        final int need;
        final Consumer<String> rejected;
        final Consumer<int[]> then;
        long timer = -1;

        Waiting(Job job, String side, int need, Consumer<String> rejected, Consumer<int[]> then) {
            this.job = job;
            this.side = side;
            this.need = need;
            this.rejected = rejected;
            this.then = then;
        }
    }

    /** Jobs waiting for pages, first come first served (vLLM's waiting queue); touched on the engine's context only. */
    private final java.util.ArrayDeque<Waiting> waitingForPages = new java.util.ArrayDeque<>();

    /**
     * The pages for the job's prompt, held as {@code side + rid} ({@code P:}, {@code D:}, {@code C:}), handed to {@code then};
     * or none, the job then finished and answered: a request id that already holds pages here is refused (409, ids must be
     * unique), a prompt that could never fit is refused (400). A pool without enough free pages now keeps the job waiting,
     * first come first served, until frees make room (as vLLM's scheduler does), at most {@code engine.kv-wait}; then it is
     * refused (503, after {@code rejected} reported why to the control plane).
     */
    private void pages(Job job, String side, Consumer<String> rejected, Consumer<int[]> then) {
        StepScheduler.Role part = side.equals("P:") ? StepScheduler.Role.PREFILL : StepScheduler.Role.BOTH;
        if (!stepper.fits(job.tokens.length, job.request.maxTokens(), part)) {
            finish(job);
            String why = "prompt (" + job.tokens.length + " tokens)" + (part == StepScheduler.Role.PREFILL ? "" : " + max_tokens ("
                    + job.request.maxTokens() + ")") + " needs more KV than engine " + config.engineId() + " has (" + stepper.numBlocks()
                    + " blocks of " + config.geometry().blockSizeTokens() + " tokens)";
            rejected.accept(why);
            error(job.response, 400, why, "invalid_request_error", "max_tokens");
            return;
        }
        Waiting w = new Waiting(job, side, SimModel.blocksFor(config.geometry(), job.tokens.length), rejected, then);
        if (waitingForPages.isEmpty()) {
            int[] blocks = allocate(w);
            if (blocks != null || job.finished) {
                if (blocks != null) {
                    then.accept(blocks);
                }
                return;
            }
        }
        long waitMs = config.compute().kvWait().toMillis();
        if (waitMs == 0) {
            refuse(w);
            return;
        }
        waitingForPages.add(w);
        w.timer = vertx.setTimer(waitMs, id -> {
            if (waitingForPages.remove(w) && !job.finished && !job.gone) {
                refuse(w);
                admitWaiting(); // the ones behind it may fit
            }
        });
    }

    /** The pages, or null (none free, or refused 409: then the job is finished). */
    private int[] allocate(Waiting w) {
        try {
            return allocator.allocate(w.side + w.job.rid, w.need).orElse(null);
        } catch (IllegalStateException e) {
            finish(w.job);
            error(w.job.response, 409, "request id " + w.job.rid + " already holds pages on " + config.engineId() + ": request ids must be unique",
                    "invalid_request_error", "request_id");
            return null;
        }
    }

    private void refuse(Waiting w) {
        counters.rejected.increment();
        int free = allocator.numBlocks() - allocator.usedBlocks();
        w.rejected.accept("no free KV blocks on " + config.engineId() + " (" + w.need + " needed, " + free + " free)");
        finish(w.job);
        error(w.job.response, 503, "engine " + config.engineId() + " has no free KV blocks for " + w.need + " blocks"
                + (config.compute().kvWait().isZero() ? "" : " within engine.kv-wait (" + config.compute().kvWait().toMillis() + " ms)"),
                "service_unavailable", null);
    }

    /** Pages were freed: the waiting jobs that now fit start, in their order (the first that does not fit holds the rest back). */
    private void admitWaiting() {
        Waiting w;
        while ((w = waitingForPages.peek()) != null) {
            if (w.job.finished || w.job.gone) {
                waitingForPages.poll();
                vertx.cancelTimer(w.timer);
                continue;
            }
            int[] blocks = allocate(w);
            if (blocks == null && !w.job.finished) {
                return;
            }
            waitingForPages.poll();
            vertx.cancelTimer(w.timer);
            if (blocks != null) {
                w.then.accept(blocks);
            }
        }
    }

    // ------------------------------------------------------------------------------------------------ colocated

    void colocated(Job job) {
        take(job, "colocated", counters.colocated);
        pages(job, "C:", why -> { }, blocks -> colocated(job, blocks)); // nobody to report a refusal to
    }

    private void colocated(Job job, int[] blocks) {
        compute(job, blocks, StepScheduler.Role.BOTH, () -> {
            if (job.gone) {
                allocator.free("C:" + job.rid);
                return;
            }
            generate(job, false, () -> allocator.free("C:" + job.rid));
        });
    }

    // ------------------------------------------------------------------------------------------------ generation

    /**
     * Emits the answer: the first token at once (the prefill sampled it), then one token per decode step. Streams
     * server-sent events when asked. {@code done} runs once the last token is out.
     */
    private void generate(Job job, boolean recomputed, Runnable done) {
        CompletionRequest r = job.request;
        int[] out = model.generate(job.tokens, r.maxTokens());
        job.decodeStartNanos = System.nanoTime();
        if (recomputed) {
            job.mode = "recomputed";
        }
        if (job.seq == null) {
            // The KV came by transfer: decode here, from the first token the prefill sampled. Its blocks are cached now,
            // as a vLLM decode instance with prefix caching caches the blocks it received.
            reportCache(stepper.cache(hashes(job), job.tokens));
            job.seq = newSeq(job);
            job.produced = 1;
            stepper.submit(job.seq, job.tokens.length, out.length, 0, StepScheduler.Role.DECODE, steps(job));
        }
        if (r.stream()) {
            firstToken(job);
            OpenAiFormat.startStream(job.response);
            if (job.chat()) {
                OpenAiFormat.event(job.response, format.roleChunk(job));
            }
        }
        job.drain = () -> drain(job, out, done);
        job.drain.run();
    }

    /** The first token is going out now: mark it, and tell the proxy this engine's marks (headers go with it). */
    private void firstToken(Job job) {
        job.firstTokenMicros = Marks.nowMicros();
        hops.record(Hop.ENGINE_FIRST_TOKEN, job.kvReadyMicros, job.firstTokenMicros);
        job.response.putHeader(Marks.HTTP_HEADER, job.marks().format());
    }

    /** A non-streamed answer, all tokens at once, once the received KV verified. */
    private void answerWhole(Job job, int[] out, Runnable done) {
        if (job.gone || job.finished) {
            return;
        }
        if (!job.verified.isComplete()) {
            job.verified.onComplete(ar -> answerWhole(job, out, done));
            return;
        }
        firstToken(job);
        answered(job, out);
        send(job.response, 200, format.answer(job, out));
        done.run();
    }

    /** Sends what the steps produced and was not sent yet (a whole answer once all is produced); the last token only on verified KV. */
    private void drain(Job job, int[] out, Runnable done) {
        if (job.gone || job.finished) {
            return;
        }
        if (!job.request.stream()) {
            if (job.produced >= out.length) {
                answerWhole(job, out, done);
            }
            return;
        }
        HttpServerResponse resp = job.response;
        while (job.emitted < Math.min(job.produced, out.length)) {
            int i = job.emitted;
            boolean last = i == out.length - 1;
            if (last && !job.verified.isComplete()) {
                job.verified.onComplete(ar -> drain(job, out, done)); // the answer ends only on verified KV
                return;
            }
            OpenAiFormat.event(resp, format.tokenChunk(job, out[i], last));
            long now = System.nanoTime();
            if (job.emitted > 0) {
                meters.itl(now - job.lastTokenNanos);
            }
            job.lastTokenNanos = now;
            job.emitted++;
            if (last) {
                if (job.request.includeUsage()) {
                    OpenAiFormat.event(resp, format.usageChunk(job, out.length));
                }
                answered(job, out);
                OpenAiFormat.endStream(resp);
                done.run();
            }
        }
    }

    /** The last token is going out: the job is over and counted. */
    private void answered(Job job, int[] out) {
        finish(job);
        counters.completed.increment();
        meters.decode(System.nanoTime() - job.decodeStartNanos, out.length);
    }
}
