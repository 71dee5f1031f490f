package io.orbitkv.pd.engine.sim;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.engine.client.BlockAllocator;
import io.orbitkv.pd.engine.client.DecisionListener;
import io.orbitkv.pd.engine.client.EngineClient;
import io.orbitkv.pd.engine.client.KvSignal;
import io.orbitkv.pd.metrics.ComponentMetrics;
import io.orbitkv.pd.tracing.Hop;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceContext;
import io.orbitkv.pd.tracing.TraceHeaders;
import io.orbitkv.pd.engine.client.http.CompletionRequest;
import io.orbitkv.pd.engine.client.http.KvTransferParams;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.kv.BulkPriority;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvPool;
import io.vertx.core.Context;
import io.vertx.core.Future;
import io.vertx.core.Promise;
import io.vertx.core.Vertx;
import io.vertx.core.VertxOptions;
import io.vertx.core.buffer.Buffer;
import io.vertx.core.http.HttpMethod;
import io.vertx.core.http.HttpServer;
import io.vertx.core.http.HttpServerOptions;
import io.vertx.core.http.HttpServerRequest;
import io.vertx.core.http.HttpServerResponse;
import java.util.ArrayDeque;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.LongAdder;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A simulated inference engine: an OpenAI-compatible HTTP server ({@code /v1/completions},
 * {@code /v1/chat/completions} streaming or not, {@code /v1/models}, {@code /health}, and {@code /stats}) over a
 * paged KV pool, computing with the deterministic {@link SimModel} and taking part in P/D through the
 * {@link EngineClient}.
 *
 * <p>Per request, by its {@code kv_transfer_params}:
 * <ul>
 *   <li><b>prefill</b> ({@code do_remote_decode}): allocate pages, compute the prompt's KV into them (the compute time
 *       of the {@link ComputeModel}), report {@code PrefillCompleted}, answer with the first token; free the pages when
 *       a {@code ReleaseDecided} names them;</li>
 *   <li><b>decode</b> ({@code do_remote_prefill}): allocate destination pages under a lease, report
 *       {@code DecodeReady} (and heartbeats), wait for {@code KvReady}, then stream the tokens at once while every
 *       received page is verified against the model beside the decode (the answer ends only on verified KV; on
 *       corruption: report a cancel and answer 502, or break the stream) and report {@code DecodeCompleted}; on {@code RecomputeDecided}, compute the prefill here; free the pages on release;</li>
 *   <li><b>colocated</b> (no parameters): prefill and decode here, no events; pages freed at the end.</li>
 * </ul>
 * All request state lives on one Vert.x event loop; KV computation and verification run on worker threads.
 */
public final class SimEngine implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(SimEngine.class);
    private static final ObjectMapper JSON = CompletionRequest.json();

    private final SimEngineConfig config;
    private final SimModel model;
    private final Vertx vertx;
    private final KvPool pool;
    private final BlockAllocator allocator;
    private final ComponentMetrics metrics;
    private final EngineMetrics meters;
    private final Hop.Meters hops;
    private final AtomicLong leaseEpochs = new AtomicLong();
    /**
     * Per request, the lease this engine announced in its DecodeReady ({@code leaseId#epoch}): a decode release must
     * name exactly that one (a recompute bumps the job's epoch for its own writes, not this).
     */
    private final Map<String, String> announcedLeases = new ConcurrentHashMap<>();
    private final Map<String, Job> jobs = new ConcurrentHashMap<>();
    private final AtomicBoolean closed = new AtomicBoolean();
    private final CountDownLatch closedLatch = new CountDownLatch(1);
    private final CompletionRequest.Limits limits;
    private final Counters counters = new Counters();
    private Context ctx;
    private HttpServer server;
    private volatile EngineClient client;
    private volatile boolean ready;
    private String url;
    private int active;
    private final ArrayDeque<Runnable> waiting = new ArrayDeque<>();

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
    }

    private SimEngine(SimEngineConfig config) {
        this.config = config;
        this.model = new SimModel(config.seed());
        this.vertx = Vertx.vertx(new VertxOptions().setEventLoopPoolSize(1).setWorkerPoolSize(2).setInternalBlockingPoolSize(2));
        this.pool = config.poolPath() == null ? HostKvPool.allocate(config.geometry()) : HostKvPool.mapFile(config.geometry(), config.poolPath());
        this.allocator = new BlockAllocator(config.geometry().numBlocks());
        this.metrics = ComponentMetrics.create("engine", config.engineId());
        this.meters = new EngineMetrics(metrics.registry(), config.engineId(), allocator);
        this.hops = Hop.meters(metrics.registry(), Hop.KV_READY_TO_ENGINE, Hop.ENGINE_FIRST_TOKEN);
        this.limits = new CompletionRequest.Limits(config.maxPromptTokens() * 64, 1_000_000, 4096);
    }

    /** Maps the pool, serves HTTP, then joins the control plane (after the transfer worker announced itself). */
    public static SimEngine start(SimEngineConfig config) throws Exception {
        SimEngine e = new SimEngine(config);
        try {
            e.open();
            return e;
        } catch (Exception | Error ex) {
            e.close();
            throw ex;
        }
    }

    private void open() throws Exception {
        ctx = vertx.getOrCreateContext();
        CompletableFutureBridge<HttpServer> started = new CompletableFutureBridge<>();
        ctx.runOnContext(v -> vertx.createHttpServer(new HttpServerOptions().setHost(config.httpHost()).setPort(config.httpPort())
                        .setMaxInitialLineLength(8192).setIdleTimeout(0))
                .requestHandler(this::handle).listen().onComplete(started::complete));
        server = started.get();
        url = config.advertisedUrl() != null ? config.advertisedUrl() : "http://" + config.httpHost() + ":" + server.actualPort();
        if (config.control() != null) {
            EngineClient.Identity id = new EngineClient.Identity(config.role(), config.model(), url, config.geometry(), 0, config.tpSize(),
                    pool.memoryRegions());
            client = EngineClient.start(config.control(), id, new Decisions());
        }
        ready = true;
        log.atInfo().addKeyValue("engineId", config.engineId()).addKeyValue("role", config.role()).addKeyValue("url", url)
                .addKeyValue("pool", pool).addKeyValue("instanceEpoch", client == null ? 0 : client.instanceEpoch())
                .log(client == null ? "engine ready (standalone: colocated requests only)" : "engine ready");
    }

    public String url() {
        return url;
    }

    public int port() {
        return server.actualPort();
    }

    public SimEngineConfig config() {
        return config;
    }

    public EngineClient client() {
        return client;
    }

    public BlockAllocator allocator() {
        return allocator;
    }

    // ------------------------------------------------------------------------------------------------ HTTP

    private void handle(HttpServerRequest req) {
        long in = Marks.nowMicros();
        String path = req.path();
        try {
            if (req.method() == HttpMethod.GET && path.equals("/health")) {
                send(req.response(), ready ? 200 : 503, JSON.createObjectNode().put("status", ready ? "ok" : "starting")
                        .put("engine_id", config.engineId()).put("role", config.role().name().toLowerCase()));
            } else if (req.method() == HttpMethod.GET && path.equals("/v1/models")) {
                ObjectNode root = JSON.createObjectNode().put("object", "list");
                root.putArray("data").addObject().put("id", config.model()).put("object", "model").put("created", 0).put("owned_by", "orbitkv-sim")
                        .put("max_model_len", config.maxPromptTokens());
                send(req.response(), 200, root);
            } else if (req.method() == HttpMethod.GET && path.equals("/stats")) {
                send(req.response(), 200, stats());
            } else if (req.method() == HttpMethod.GET && path.equals("/metrics")) {
                req.response().setStatusCode(200).putHeader("content-type", ComponentMetrics.CONTENT_TYPE).end(metrics.scrape());
            } else if (path.equals("/v1/completions") || path.equals("/v1/chat/completions")) {
                if (req.method() != HttpMethod.POST) {
                    error(req.response(), 405, "use POST for " + path, "invalid_request_error", null);
                    return;
                }
                readBody(req, body -> completion(req, path.equals("/v1/completions") ? CompletionRequest.Kind.COMPLETION
                        : CompletionRequest.Kind.CHAT, body, in));
            } else {
                error(req.response(), 404, "no such endpoint: " + req.method() + " " + path, "invalid_request_error", null);
            }
        } catch (RuntimeException e) {
            log.atError().setCause(e).log("request failed");
            error(req.response(), 500, "internal error: " + e, "internal_error", null);
        }
    }

    private void readBody(HttpServerRequest req, java.util.function.Consumer<byte[]> then) {
        String len = req.getHeader("content-length");
        if (len != null && len.matches("\\d+") && Long.parseLong(len) > config.maxBodyBytes()) {
            error(req.response(), 413, "request body of " + len + " bytes is over the limit of " + config.maxBodyBytes(), "invalid_request_error", null);
            return;
        }
        Buffer acc = Buffer.buffer();
        boolean[] over = new boolean[1];
        req.handler(b -> {
            if (over[0]) {
                return;
            }
            if (acc.length() + b.length() > config.maxBodyBytes()) {
                over[0] = true;
                error(req.response(), 413, "request body is over the limit of " + config.maxBodyBytes() + " bytes", "invalid_request_error", null);
                return;
            }
            acc.appendBuffer(b);
        });
        req.endHandler(v -> {
            if (!over[0]) {
                then.accept(acc.getBytes());
            }
        });
    }

    private void completion(HttpServerRequest req, CompletionRequest.Kind kind, byte[] body, long inMicros) {
        CompletionRequest r;
        try {
            r = CompletionRequest.parse(kind, body, limits);
        } catch (CompletionRequest.Invalid e) {
            error(req.response(), 400, e.getMessage(), "invalid_request_error", e.param());
            return;
        }
        if (!ready) {
            error(req.response(), 503, "engine " + config.engineId() + " is starting", "service_unavailable", null);
            return;
        }
        int[] tokens = SimModel.tokenize(r.prompt());
        if (tokens.length > config.maxPromptTokens()) {
            error(req.response(), 400, "prompt of " + tokens.length + " tokens is longer than this engine's limit of " + config.maxPromptTokens(),
                    "invalid_request_error", "prompt");
            return;
        }
        KvTransferParams kv = r.kv();
        String rid = kv != null && kv.requestId() != null ? kv.requestId()
                : req.getHeader("x-request-id") != null ? req.getHeader("x-request-id") : "sim-" + UUID.randomUUID();
        Job job = new Job(rid, r, tokens, req.response(), TraceHeaders.fromHttp(req::getHeader).orElse(null), inMicros);
        req.response().putHeader("x-orbitkv-request-id", rid).putHeader("x-orbitkv-engine-id", config.engineId());
        req.response().closeHandler(v -> job.clientGone());
        if (kv == null || kv.colocated()) {
            colocated(job);
            return;
        }
        if (client == null) {
            error(job.response, 503, "engine " + config.engineId() + " runs standalone (no bootstrap.servers): it serves colocated requests only",
                    "service_unavailable", KvTransferParams.FIELD);
            return;
        }
        if (kv.doRemoteDecode()) {
            if (config.role() == EngineRole.DECODE) {
                error(job.response, 400, "engine " + config.engineId() + " is a decode engine: it does not prefill for others", "invalid_request_error",
                        KvTransferParams.FIELD);
                return;
            }
            prefill(job);
        } else {
            if (config.role() == EngineRole.PREFILL) {
                error(job.response, 400, "engine " + config.engineId() + " is a prefill engine: it does not decode transferred KV",
                        "invalid_request_error", KvTransferParams.FIELD);
                return;
            }
            decode(job);
        }
    }

    /** One request's state, touched on the event loop only. */
    private final class Job {
        final String rid;
        final CompletionRequest request;
        final int[] tokens;
        final HttpServerResponse response;
        /** The trace the request came with (its {@code traceparent}), or null: facts about it carry a child of it. */
        final TraceContext trace;
        final long startNanos = System.nanoTime();
        /** Wall-clock marks (µs): HTTP request in, compute start/end, KvReady read, first token out; 0 = not yet. */
        final long inMicros;
        long computeStartMicros;
        long computeEndMicros;
        long kvReadyMicros;
        long firstTokenMicros;
        /** Completes with null once the received KV verified (or when nothing is verified), else with the mismatch. */
        Future<SimModel.Mismatch> verified = Future.succeededFuture(null);
        long decodeStartNanos = -1;
        boolean gone;
        boolean finished;
        boolean computing;
        long heartbeatTimer = -1;
        long timeoutTimer = -1;
        long leaseEpoch;
        String leaseId;
        int heartbeats;
        long kvWaitNanos = -1;
        long verifyNanos = -1;
        long prefillNanos = -1;
        long kvBytes;
        String mode;

        Job(String rid, CompletionRequest request, int[] tokens, HttpServerResponse response, TraceContext trace, long inMicros) {
            this.rid = rid;
            this.inMicros = inMicros;
            this.trace = trace;
            this.request = request;
            this.tokens = tokens;
            this.response = response;
        }

        void clientGone() {
            if (!finished) {
                gone = true;
                counters.clientGone.increment();
                stopTimers();
                if (client != null) {
                    client.forget(rid);
                }
                if ("colocated".equals(mode) && !computing) {
                    allocator.free("C:" + rid); // while computing, the computation frees them when it ends
                }
                jobs.remove(rid + "/" + mode);
            }
        }

        void stopTimers() {
            if (heartbeatTimer >= 0) {
                vertx.cancelTimer(heartbeatTimer);
                heartbeatTimer = -1;
            }
            if (timeoutTimer >= 0) {
                vertx.cancelTimer(timeoutTimer);
                timeoutTimer = -1;
            }
        }

        void finish() {
            finished = true;
            stopTimers();
            jobs.remove(rid + "/" + mode);
        }

        /** What this engine did for the request so far, as {@link Marks} (HTTP request in, compute, KvReady, first token). */
        Marks marks() {
            Marks m = Marks.receivedAt(inMicros);
            if (computeStartMicros > 0) {
                m.at(Marks.COMPUTE_START, computeStartMicros).at(Marks.COMPUTE_END, computeEndMicros);
            }
            if (kvReadyMicros > 0) {
                m.at(Marks.KV_READY, kvReadyMicros);
            }
            if (firstTokenMicros > 0) {
                m.at(Marks.FIRST_TOKEN, firstTokenMicros);
            }
            return m;
        }
    }

    // ------------------------------------------------------------------------------------------------ prefill

    private void prefill(Job job) {
        job.mode = "prefill";
        counters.prefills.increment();
        jobs.put(job.rid + "/prefill", job);
        int need = SimModel.blocksFor(config.geometry(), job.tokens.length);
        int[] blocks = allocate(job, "P:", need);
        if (job.finished) {
            return;
        }
        if (blocks == null) {
            counters.rejected.increment();
            client.prefillFailed(job.rid, "no free KV blocks on " + config.engineId() + " (" + need + " needed, " + free() + " free)", true, job.trace, job.marks());
            job.finish();
            error(job.response, 503, "engine " + config.engineId() + " has no free KV blocks for " + need + " blocks", "service_unavailable", null);
            return;
        }
        compute(job, blocks, () -> {
            int first = model.generate(job.tokens, 1)[0];
            client.prefillCompleted(job.rid, blocks, job.tokens.length, first, job.trace, job.marks()).whenComplete((v, err) -> ctx.runOnContext(x -> {
                job.finish();
                if (err != null) {
                    // The fact did not reach the log, so the decider will never release these pages: free them here.
                    allocator.free("P:" + job.rid);
                    error(job.response, 503, "cannot report the prefill of " + job.rid + ": " + err.getMessage(), "service_unavailable", null);
                    return;
                }
                ObjectNode out = completionJson(job, new int[] {first});
                ObjectNode params = out.putObject(KvTransferParams.FIELD);
                params.put("request_id", job.rid).put("do_remote_prefill", true).put("do_remote_decode", false)
                        .put("remote_engine_id", config.engineId()).put("remote_instance_epoch", client.instanceEpoch());
                ArrayNode ids = params.putArray("remote_block_ids");
                for (int b : blocks) {
                    ids.add(b);
                }
                orbitkv(out, job);
                if (!job.gone) {
                    job.response.putHeader(Marks.HTTP_HEADER, job.marks().mark(Marks.OUT).format());
                    send(job.response, 200, out);
                }
            }));
        });
    }

    /** Computes the prompt's KV into {@code blocks} (worker thread) while the compute time passes; then {@code then} on the loop. */
    private void compute(Job job, int[] blocks, Runnable then) {
        job.computing = true;
        acquire(() -> {
            long t0 = System.nanoTime();
            job.computeStartMicros = Marks.nowMicros();
            Promise<Void> timer = Promise.promise();
            long ms = Math.round(config.compute().prefillNanos(job.tokens.length) / 1e6);
            if (ms <= 0) {
                timer.complete();
            } else {
                vertx.setTimer(ms, id -> timer.complete());
            }
            Future<Void> fill = vertx.executeBlocking(() -> {
                BulkPriority.apply(config.kvNice());
                model.writeKv(pool, blocks, job.tokens);
                if (config.corruptKvPrefix() != null && job.rid.startsWith(config.corruptKvPrefix()) && "prefill".equals(job.mode)) {
                    // engine.fault.corrupt-kv-prefix: silent corruption of one bit, for tests of the decode side's check
                    java.lang.foreign.MemorySegment page = pool.hostRegion(0).orElseThrow().asSlice((long) blocks[0] * pool.geometry().pageBytes());
                    page.set(java.lang.foreign.ValueLayout.JAVA_BYTE, 3, (byte) (page.get(java.lang.foreign.ValueLayout.JAVA_BYTE, 3) ^ 0x08));
                    log.atWarn().addKeyValue("requestId", job.rid).log("engine.fault.corrupt-kv-prefix: flipped one bit of the computed KV");
                }
                return null;
            }, false);
            Future.all(timer.future(), fill).onComplete(ar -> {
                release();
                job.computing = false;
                job.computeEndMicros = Marks.nowMicros();
                job.prefillNanos = System.nanoTime() - t0;
                if (ar.succeeded()) {
                    meters.prefill(job.prefillNanos, job.tokens.length);
                }
                if (ar.failed()) {
                    log.atError().setCause(ar.cause()).addKeyValue("requestId", job.rid).log("prefill computation failed");
                    error(job.response, 500, "prefill failed: " + ar.cause(), "internal_error", null);
                    return;
                }
                then.run();
            });
        });
    }

    // ------------------------------------------------------------------------------------------------ decode

    private void decode(Job job) {
        job.mode = "decode";
        counters.decodes.increment();
        jobs.put(job.rid + "/decode", job);
        int need = SimModel.blocksFor(config.geometry(), job.tokens.length);
        int[] blocks = allocate(job, "D:", need);
        if (job.finished) {
            return;
        }
        if (blocks == null) {
            counters.rejected.increment();
            client.decodeRejected(job.rid, "no free KV blocks on " + config.engineId() + " (" + need + " needed, " + free() + " free)", job.trace, job.marks());
            job.finish();
            error(job.response, 503, "engine " + config.engineId() + " has no free KV blocks for " + need + " blocks", "service_unavailable", null);
            return;
        }
        job.leaseEpoch = leaseEpochs.incrementAndGet();
        job.leaseId = "lease/" + config.engineId() + "/" + job.rid;
        long waitStart = System.nanoTime();
        client.awaitKv(job.rid).whenComplete((signal, err) -> ctx.runOnContext(v -> {
            job.kvWaitNanos = System.nanoTime() - waitStart;
            meters.kvWait(job.kvWaitNanos);
            onKvSignal(job, blocks, signal);
        }));
        long leaseMs = config.leaseDuration().toMillis();
        announcedLeases.put(job.rid, job.leaseId + "#" + job.leaseEpoch);
        client.decodeReady(job.rid, job.leaseId, job.leaseEpoch, blocks, System.currentTimeMillis() + leaseMs, job.trace, job.marks());
        job.heartbeatTimer = vertx.setPeriodic(config.heartbeat().toMillis(), id -> client.heartbeat(job.rid, job.leaseId, job.leaseEpoch,
                System.currentTimeMillis() + leaseMs, ++job.heartbeats, job.trace, null));
        job.timeoutTimer = vertx.setTimer(config.kvTimeout().toMillis(), id -> {
            job.timeoutTimer = -1;
            if (!job.finished && !job.gone) {
                client.forget(job.rid);
                job.finish();
                error(job.response, 504, "the KV of request " + job.rid + " did not arrive within " + config.kvTimeout(), "timeout", null);
            }
        });
    }

    private void onKvSignal(Job job, int[] blocks, KvSignal signal) {
        if (job.finished || job.gone) {
            return;
        }
        if (job.timeoutTimer >= 0) {
            vertx.cancelTimer(job.timeoutTimer);
            job.timeoutTimer = -1;
        }
        switch (signal) {
            case KvSignal.Ready ready -> {
                job.kvBytes = ready.bytes();
                job.kvReadyMicros = ready.receivedMicros();
                hops.record(Hop.KV_READY_TO_ENGINE, ready.decidedMicros(), ready.receivedMicros());
                if (config.verify()) {
                    // A real engine never checks received KV before its first token: verify beside the decode, and let
                    // only the end of the answer wait for it, so a corrupt handoff is still refused (never answered in full).
                    long t0 = System.nanoTime();
                    job.verified = vertx.executeBlocking(() -> {
                        BulkPriority.apply(config.kvNice());
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
                generate(job, false, () -> client.decodeCompleted(job.rid, job.request.maxTokens(), false, job.trace, job.marks()));
            }
            case KvSignal.Recompute rc -> {
                // The worker fences the request's pushes on the same decision; a new lease epoch marks our own writes.
                job.leaseEpoch = leaseEpochs.incrementAndGet();
                counters.recomputed.increment();
                log.atInfo().addKeyValue("requestId", job.rid).log("recomputing the prefill here: " + rc.reason());
                compute(job, blocks, () -> {
                    if (!job.gone) {
                        generate(job, true, () -> client.decodeCompleted(job.rid, job.request.maxTokens(), true, job.trace, job.marks()));
                    }
                });
            }
            case KvSignal.Ended end -> {
                counters.ended.increment();
                job.finish();
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
        client.cancel(job.rid, "KV verification failed on " + config.engineId() + ": " + why, job.trace, null);
        job.finish();
        error(job.response, 502, "the KV received for request " + job.rid + " does not verify (" + why + "); not decoding",
                "kv_verification_failed", null);
    }

    /** Null when the pool is full; a request id that already holds pages here is refused (409): ids must be unique. */
    private int[] allocate(Job job, String side, int need) {
        try {
            return allocator.allocate(side + job.rid, need).orElse(null);
        } catch (IllegalStateException e) {
            job.finish();
            error(job.response, 409, "request id " + job.rid + " already holds pages on " + config.engineId() + ": request ids must be unique",
                    "invalid_request_error", "request_id");
            return null;
        }
    }

    // ------------------------------------------------------------------------------------------------ colocated

    private void colocated(Job job) {
        job.mode = "colocated";
        counters.colocated.increment();
        jobs.put(job.rid + "/colocated", job);
        int need = SimModel.blocksFor(config.geometry(), job.tokens.length);
        int[] blocks = allocate(job, "C:", need);
        if (job.finished) {
            return;
        }
        if (blocks == null) {
            counters.rejected.increment();
            job.finish();
            error(job.response, 503, "engine " + config.engineId() + " has no free KV blocks for " + need + " blocks", "service_unavailable", null);
            return;
        }
        compute(job, blocks, () -> {
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
        long stepMs = Math.max(0, Math.round(config.compute().decodeStepNanos() / 1e6));
        if (!r.stream()) {
            long total = stepMs * (out.length - 1);
            if (total <= 0) {
                answerWhole(job, out, done);
            } else {
                vertx.setTimer(total, id -> answerWhole(job, out, done));
            }
            return;
        }
        HttpServerResponse resp = job.response;
        firstToken(job);
        resp.setStatusCode(200).putHeader("content-type", "text/event-stream").putHeader("cache-control", "no-cache").setChunked(true);
        if (r.kind() == CompletionRequest.Kind.CHAT) {
            ObjectNode first = chunk(job);
            first.withArray("choices").addObject().put("index", 0).putNull("finish_reason").putObject("delta").put("role", "assistant")
                    .put("content", "");
            sse(resp, first);
        }
        emit(job, out, 0, stepMs, done);
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
        job.finish();
        counters.completed.increment();
        meters.decode(System.nanoTime() - job.decodeStartNanos, out.length);
        ObjectNode json = completionJson(job, out);
        orbitkv(json, job);
        send(job.response, 200, json);
        done.run();
    }

    private void emit(Job job, int[] out, int i, long stepMs, Runnable done) {
        if (job.gone || job.finished) {
            return;
        }
        CompletionRequest r = job.request;
        HttpServerResponse resp = job.response;
        boolean last = i == out.length - 1;
        if (last && !job.verified.isComplete()) {
            job.verified.onComplete(ar -> emit(job, out, i, stepMs, done)); // the answer ends only on verified KV
            return;
        }
        ObjectNode c = chunk(job);
        ObjectNode choice = c.withArray("choices").addObject().put("index", 0);
        String text = " " + SimModel.word(out[i]);
        if (r.kind() == CompletionRequest.Kind.CHAT) {
            choice.putObject("delta").put("content", text);
        } else {
            choice.put("text", text).putNull("logprobs");
        }
        if (last) {
            choice.put("finish_reason", "length");
            orbitkv(c, job);
        } else {
            choice.putNull("finish_reason");
        }
        sse(resp, c);
        if (!last) {
            if (stepMs <= 0) {
                emit(job, out, i + 1, stepMs, done);
            } else {
                vertx.setTimer(stepMs, id -> emit(job, out, i + 1, stepMs, done));
            }
            return;
        }
        if (r.includeUsage()) {
            ObjectNode u = chunk(job);
            u.putArray("choices");
            usage(u, job.tokens.length, out.length);
            sse(resp, u);
        }
        job.finish();
        counters.completed.increment();
        meters.decode(System.nanoTime() - job.decodeStartNanos, out.length);
        resp.end("data: [DONE]\n\n");
        done.run();
    }

    private ObjectNode chunk(Job job) {
        boolean chat = job.request.kind() == CompletionRequest.Kind.CHAT;
        return JSON.createObjectNode().put("id", (chat ? "chatcmpl-" : "cmpl-") + job.rid).put("object", chat ? "chat.completion.chunk" : "text_completion")
                .put("created", System.currentTimeMillis() / 1000).put("model", config.model());
    }

    private ObjectNode completionJson(Job job, int[] out) {
        boolean chat = job.request.kind() == CompletionRequest.Kind.CHAT;
        ObjectNode root = JSON.createObjectNode().put("id", (chat ? "chatcmpl-" : "cmpl-") + job.rid)
                .put("object", chat ? "chat.completion" : "text_completion").put("created", System.currentTimeMillis() / 1000).put("model", config.model());
        ObjectNode choice = root.putArray("choices").addObject().put("index", 0);
        if (chat) {
            choice.putObject("message").put("role", "assistant").put("content", SimModel.detokenize(out));
        } else {
            choice.put("text", SimModel.detokenize(out)).putNull("logprobs");
        }
        choice.put("finish_reason", "length");
        usage(root, job.tokens.length, out.length);
        return root;
    }

    private static void usage(ObjectNode root, int prompt, int completion) {
        root.putObject("usage").put("prompt_tokens", prompt).put("completion_tokens", completion).put("total_tokens", prompt + completion);
    }

    /** OrbitKV's extension of the answer: how the request was served and where its time went. */
    private void orbitkv(ObjectNode root, Job job) {
        ObjectNode o = root.putObject("orbitkv");
        o.put("request_id", job.rid).put("engine_id", config.engineId()).put("mode", job.mode).put("prompt_tokens", job.tokens.length);
        if (job.prefillNanos >= 0) {
            o.put("prefill_ms", job.prefillNanos / 1e6);
        }
        if (job.kvWaitNanos >= 0) {
            o.put("kv_wait_ms", job.kvWaitNanos / 1e6);
        }
        if (job.verifyNanos >= 0) {
            o.put("verify_ms", job.verifyNanos / 1e6);
        }
        if (job.kvBytes > 0) {
            o.put("kv_bytes", job.kvBytes);
        }
    }

    private static void sse(HttpServerResponse resp, ObjectNode chunk) {
        if (!resp.closed() && !resp.ended()) {
            resp.write("data: " + chunk + "\n\n");
        }
    }

    // ------------------------------------------------------------------------------------------------ batch slots

    private void acquire(Runnable r) {
        if (active < config.maxBatch()) {
            active++;
            r.run();
        } else {
            waiting.add(r);
        }
    }

    private void release() {
        Runnable next = waiting.poll();
        if (next != null) {
            next.run();
        } else {
            active--;
        }
    }

    // ------------------------------------------------------------------------------------------------ decisions

    private final class Decisions implements DecisionListener {
        @Override
        public void onRelease(Decision d, ReleaseDecided rel) {
            if (!config.engineId().equals(rel.getEngineId())) {
                return;
            }
            String rid = d.getRequestId();
            String owner = (rel.getSide() == ReleaseSide.PREFILL ? "P:" : "D:") + rid;
            if (rel.getSide() == ReleaseSide.DECODE) {
                String mine = announcedLeases.get(rid);
                String theirs = rel.getLeaseId() + "#" + rel.getLeaseEpoch();
                if (mine != null && !mine.equals(theirs)) {
                    // A stale or forged release would free the pages of a request still decoding (issue 22).
                    throw new io.orbitkv.pd.engine.client.RefusedDecision("STALE_LEASE", "ReleaseDecided for request " + rid + " names lease "
                            + theirs + " but " + config.engineId() + " announced " + mine + " for it: its pages stay held");
                }
            }
            if (allocator.blocksOf(owner).isEmpty()) {
                throw new io.orbitkv.pd.engine.client.RefusedDecision("UNKNOWN_REQUEST", "ReleaseDecided (" + rel.getSide() + ") for request " + rid
                        + ": " + config.engineId() + " holds no pages for it (already freed, an earlier instance's, or forged)");
            }
            allocator.free(owner);
            counters.released.increment();
            if (rel.getSide() == ReleaseSide.DECODE) {
                announcedLeases.remove(rid);
            }
        }
    }

    // ------------------------------------------------------------------------------------------------ responses

    private int free() {
        return allocator.numBlocks() - allocator.usedBlocks();
    }

    private ObjectNode stats() {
        ObjectNode s = JSON.createObjectNode().put("engine_id", config.engineId()).put("role", config.role().name().toLowerCase())
                .put("model", config.model()).put("instance_epoch", client == null ? 0 : client.instanceEpoch())
                .put("blocks_total", allocator.numBlocks()).put("blocks_used", allocator.usedBlocks()).put("holders", allocator.holders())
                .put("in_flight", jobs.size()).put("block_bytes", config.geometry().bytesPerBlock());
        s.putObject("requests").put("prefill", counters.prefills.sum()).put("decode", counters.decodes.sum()).put("colocated", counters.colocated.sum())
                .put("recomputed", counters.recomputed.sum());
        s.put("completed", counters.completed.sum()).put("verified_pages", counters.verifiedPages.sum()).put("kv_corrupt", counters.corrupt.sum())
                .put("ended_before_kv", counters.ended.sum()).put("client_gone", counters.clientGone.sum()).put("rejected_no_blocks", counters.rejected.sum())
                .put("releases", counters.released.sum());
        return s;
    }

    private static void send(HttpServerResponse resp, int status, ObjectNode body) {
        if (resp.ended() || resp.closed()) {
            return;
        }
        resp.setStatusCode(status).putHeader("content-type", "application/json").end(body.toString());
    }

    private static void error(HttpServerResponse resp, int status, String message, String type, String param) {
        if (resp.ended() || resp.closed() || resp.headWritten()) {
            if (!resp.ended() && !resp.closed()) {
                resp.reset();
            }
            return;
        }
        send(resp, status, CompletionRequest.errorBody(message, type, param, status));
    }

    // ------------------------------------------------------------------------------------------------ lifecycle

    public void awaitClose() throws InterruptedException {
        closedLatch.await();
    }

    /** Announces that the engine left, stops serving, frees the pool. Idempotent. */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            return;
        }
        try {
            ready = false;
            if (client != null) {
                client.close();
            }
            try {
                vertx.close().toCompletionStage().toCompletableFuture().get(10, TimeUnit.SECONDS);
            } catch (Exception e) {
                log.atWarn().log("vert.x did not stop cleanly: " + e);
            }
            pool.close();
            metrics.close();
            log.atInfo().addKeyValue("engineId", config.engineId()).log("engine stopped");
        } finally {
            closedLatch.countDown();
        }
    }

    /** Waits for a Vert.x async result from a plain thread. */
    private static final class CompletableFutureBridge<T> {
        private final java.util.concurrent.CompletableFuture<T> f = new java.util.concurrent.CompletableFuture<>();

        void complete(io.vertx.core.AsyncResult<T> ar) {
            if (ar.succeeded()) {
                f.complete(ar.result());
            } else {
                f.completeExceptionally(ar.cause());
            }
        }

        T get() throws Exception {
            try {
                return f.get(30, TimeUnit.SECONDS);
            } catch (java.util.concurrent.ExecutionException e) {
                throw e.getCause() instanceof Exception ex ? ex : e;
            }
        }
    }
}
