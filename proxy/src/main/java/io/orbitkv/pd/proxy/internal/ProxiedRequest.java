package io.orbitkv.pd.proxy.internal;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.engine.client.http.CompletionRequest;
import io.orbitkv.pd.engine.client.http.KvTransferParams;
import io.orbitkv.pd.proxy.routing.EngineInfo;
import io.vertx.core.Future;
import io.vertx.core.MultiMap;
import io.vertx.core.Vertx;
import io.vertx.core.buffer.Buffer;
import io.vertx.core.http.HttpClient;
import io.vertx.core.http.HttpClientRequest;
import io.vertx.core.http.HttpClientResponse;
import io.vertx.core.http.HttpMethod;
import io.vertx.core.http.HttpServerResponse;
import io.vertx.core.http.RequestOptions;
import io.orbitkv.pd.events.RequestAnswered;
import io.orbitkv.pd.tracing.Hop;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceContext;
import io.orbitkv.pd.tracing.TraceHeaders;
import java.time.Duration;
import java.util.Set;
import java.util.function.Consumer;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * One client request on its way through the proxy: dispatched to a prefill and a decode engine at once under one
 * request id (or to one engine, colocated), the decode answer streamed back, and every way it can end — answered,
 * upstream failure, timeout, client gone — ending it exactly once. A client that goes away, or a timeout, becomes a
 * {@code CancelRequested} fact (P/D requests only) and resets both upstream requests. Lives on one event loop.
 */
public final class ProxiedRequest {

    private static final Logger log = LoggerFactory.getLogger(ProxiedRequest.class);
    /** Hop-by-hop headers (RFC 9110 §7.6.1) are never forwarded; content-length is recomputed. */
    private static final Set<String> HOP_BY_HOP = Set.of("connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
            "transfer-encoding", "upgrade", "content-length");

    /** What happened, for the proxy's counters. */
    public enum End { ANSWERED, UPSTREAM_ERROR, TIMEOUT, CLIENT_GONE, REDISPATCHED }

    /**
     * Sends a failed request again to other engines: given the engines to avoid, returns what starts the new attempt, or
     * null when there is no other engine (or no attempt, or no time) left.
     */
    public interface Redispatch {
        Runnable prepare(Set<String> avoid, String reason);
    }

    private final Vertx vertx;
    private final HttpClient client;
    private final Admissions admissions;
    private final String requestId;
    private final CompletionRequest request;
    private final String path;
    private final HttpServerResponse response;
    private final Duration timeout;
    private final Duration streamIdle;
    /** The stream-idle timer, re-armed by every chunk of a started answer; -1 when none. */
    private long idleTimer = -1;
    /** The event loop this request runs on: anything from elsewhere (a health check) is handed to it. */
    private io.vertx.core.Context context;
    private final Consumer<End> onEnd;
    private final long startNanos = System.nanoTime();
    private boolean pd;
    private boolean ended;
    private boolean fallback;
    private EngineInfo prefill;
    private EngineInfo decode;
    private HttpClientRequest prefillReq;
    private HttpClientRequest decodeReq;
    private HttpClientResponse decodeResp;
    private long prefillDoneNanos = -1;
    private boolean prefillFailed;
    private int promptTokens;
    private io.orbitkv.pd.events.RoutingDecision routing;
    /** A routing decision still being worked out off the request's path (null: none). */
    private io.vertx.core.Future<io.orbitkv.pd.events.RoutingDecision> pendingRouting;
    private boolean localPrefill;
    private long timer = -1;
    private TraceContext trace;
    private String traceState;
    private ProxyMetrics metrics = ProxyMetrics.noop();
    private long prefillSentNanos = -1;
    private long decodeSentNanos = -1;
    private boolean firstByte;
    /** Wall-clock marks (µs): the client's request in, prefill answered, the decode's first byte; 0 = not (yet). */
    private long inMicros = Marks.nowMicros();
    private long prefillDoneMicros;
    private long firstByteMicros;
    private long firstByteNanos = -1;
    /** The last chunk of the answer so far, and how many came: inter-token latency and time per output token. */
    private long lastChunkNanos = -1;
    private int chunks;
    private int status;
    private Hop.Meters hops = Hop.Meters.none();
    private EngineHealth health;
    private Redispatch redispatch;

    public ProxiedRequest(Vertx vertx, HttpClient client, Admissions admissions, String requestId, CompletionRequest request, String path,
                          HttpServerResponse response, Duration timeout, Duration streamIdle, Consumer<End> onEnd) {
        this.vertx = vertx;
        this.client = client;
        this.admissions = admissions;
        this.requestId = requestId;
        this.request = request;
        this.path = path;
        this.response = response;
        this.timeout = timeout;
        this.streamIdle = streamIdle;
        this.onEnd = onEnd;
    }

    /**
     * The proxy's span of this request (continued from the client's {@code traceparent} or a new root) and the
     * client's {@code tracestate}, passed through: written on the facts and sent on the calls to the engines.
     */
    public ProxiedRequest traced(TraceContext context, String state) {
        this.trace = context;
        this.traceState = state;
        return this;
    }

    /**
     * Engines that fail to connect are marked down in {@code h}; a failure before the answer started goes to {@code r},
     * which may send the request again to other engines instead of failing it.
     */
    public ProxiedRequest failingOver(EngineHealth h, Redispatch r) {
        this.health = h;
        this.redispatch = r;
        return this;
    }

    public ProxiedRequest metered(ProxyMetrics m) {
        this.metrics = m;
        this.hops = m.hops();
        return this;
    }

    /** When the proxy received the client's request (wall clock, µs): the first mark of everything it writes about it. */
    public ProxiedRequest receivedAt(long micros) {
        this.inMicros = micros;
        return this;
    }

    /** P/D: admission fact, then both engines at once. */
    public void dispatchPd(EngineInfo prefillEngine, EngineInfo decodeEngine, int promptTokens, boolean recomputeOnFailure) {
        pd = true;
        fallback = recomputeOnFailure;
        prefill = prefillEngine;
        decode = decodeEngine;
        arm();
        Marks admitted = Marks.receivedAt(inMicros);
        admissions.admitted(requestId, request.model(), promptTokens, request.maxTokens(), prefill.engineId(), decode.engineId(), recomputeOnFailure,
                        System.currentTimeMillis() + timeout.toMillis(), trace, admitted)
                .whenComplete((v, err) -> {
                    if (err != null) {
                        vertx.runOnContext(x -> fail(new UpstreamErrors.Mapped(503, "service_unavailable",
                                "cannot admit request " + requestId + ": Kafka did not take the admission (" + err.getMessage() + ")"), End.UPSTREAM_ERROR));
                    }
                });
        hops.record(Hop.ADMIT, inMicros, admitted.get(Marks.OUT).orElse(0));
        this.promptTokens = promptTokens;
        KvTransferParams both = KvTransferParams.forPrefill(requestId, prefill.engineId(), decode.engineId());
        send(prefill, request.forward(both, false, 1)).onComplete(ar -> {
            if (ended) {
                return;
            }
            if (ar.failed()) {
                unreachable(prefill, ar.cause());
                prefillFailed(UpstreamErrors.fromFailure("prefill", prefill.engineId(), ar.cause()));
                return;
            }
            HttpClientResponse r = ar.result();
            r.body().onComplete(body -> {
                if (ended) {
                    return;
                }
                if (r.statusCode() / 100 == 2 && body.succeeded()) {
                    prefillDoneNanos = System.nanoTime();
                    prefillDoneMicros = Marks.nowMicros();
                    metrics.upstream("prefill", prefillDoneNanos - prefillSentNanos);
                } else {
                    prefillFailed(body.failed() ? UpstreamErrors.fromFailure("prefill", prefill.engineId(), body.cause())
                            : UpstreamErrors.fromStatus("prefill", prefill.engineId(), r.statusCode(), body.result().toString()));
                }
            });
        });
        KvTransferParams d = KvTransferParams.forDecode(requestId, prefill.engineId(), decode.engineId());
        send(decode, request.forward(d, request.stream(), null)).onComplete(ar -> onDecodeResponse(ar.succeeded() ? ar.result() : null,
                ar.cause()));
    }

    /**
     * Why this request goes where it does ({@code RequestAnswered.routing}), and whether it is a P/D request prefilled on its
     * decode engine (route {@code local_prefill}); before a dispatch.
     */
    public ProxiedRequest routed(io.orbitkv.pd.events.RoutingDecision decision, boolean localPrefill) {
        this.routing = decision;
        this.localPrefill = localPrefill;
        if (decision != null) {
            promptTokens = decision.getPromptTokens();
        }
        return this;
    }

    /**
     * The routing decision worked out after the dispatch (nothing chose the engines by it, so it stays off the request's
     * path): the answer's record waits for it. Call on the request's context.
     */
    public void routedLater(io.vertx.core.Future<io.orbitkv.pd.events.RoutingDecision> decision) {
        pendingRouting = decision.onSuccess(d -> {
            if (d != null) {
                routing = d;
                promptTokens = d.getPromptTokens();
            }
        });
    }

    /** Colocated: one engine prefills and decodes, no handoff, no facts. */
    public void dispatchColocated(EngineInfo engine) {
        decode = engine;
        arm();
        send(engine, request.forward(null, request.stream(), null)).onComplete(ar -> onDecodeResponse(ar.succeeded() ? ar.result() : null,
                ar.cause()));
    }

    private void arm() {
        context = vertx.getOrCreateContext();
        response.closeHandler(v -> clientGone());
        timer = vertx.setTimer(timeout.toMillis(), id -> {
            timer = -1;
            if (!ended) {
                cancelFact("timed out at the proxy after " + timeout);
                fail(UpstreamErrors.timeout(requestId, timeout), End.TIMEOUT);
            }
        });
    }

    private Future<HttpClientResponse> send(EngineInfo engine, ObjectNode body) {
        RequestOptions o = new RequestOptions().setMethod(HttpMethod.POST).setAbsoluteURI(engine.httpUrl() + path)
                .putHeader("content-type", "application/json").putHeader("x-request-id", requestId);
        if (trace != null) {
            o.putHeader(TraceHeaders.TRACEPARENT, trace.format());
            if (traceState != null) {
                o.putHeader(TraceHeaders.TRACESTATE, traceState);
            }
        }
        boolean isPrefill = engine == prefill && pd && prefillReq == null;
        if (isPrefill) {
            prefillSentNanos = System.nanoTime();
        } else {
            decodeSentNanos = System.nanoTime();
        }
        return client.request(o).compose(req -> {
            if (isPrefill) {
                prefillReq = req;
            } else {
                decodeReq = req;
            }
            if (ended) {
                req.reset();
                return Future.failedFuture("request already ended");
            }
            return req.send(Buffer.buffer(body.toString()));
        });
    }

    private void prefillFailed(UpstreamErrors.Mapped m) {
        prefillFailed = true;
        if (fallback) {
            // The decider decides: a prefill engine that reported its failure gets the request recomputed on the decode
            // engine (RecomputeDecided), which answers on the decode connection.
            log.atInfo().addKeyValue("requestId", requestId).log("prefill failed, waiting for the decode engine to recompute: " + m.message());
            return;
        }
        redispatchOrFail(m, "prefill failed: " + m.message(), Set.of(prefill.engineId()));
    }

    /**
     * {@code engineId} was marked down (its health check failed, or a call to it did): a prefill still waiting on it, or
     * an answer it has not started, will not come — fail over now instead of waiting for the decider's prefill timeout or
     * the request timeout (a prefill node cut off mid-request used to hold its clients past 30 s).
     */
    public void engineDown(String engineId, String reason) {
        io.vertx.core.Context c = context;
        if (c == null) {
            return;
        }
        c.runOnContext(v -> {
            if (ended) {
                return;
            }
            if (pd && prefill != null && prefill.engineId().equals(engineId) && prefillDoneNanos < 0 && !prefillFailed) {
                prefillFailed(new UpstreamErrors.Mapped(503, "service_unavailable", "prefill engine " + engineId
                        + " was marked down while the prefill was in flight: " + reason));
            } else if (decode != null && decode.engineId().equals(engineId) && !firstByte) {
                redispatchOrFail(new UpstreamErrors.Mapped(503, "service_unavailable", "decode engine " + engineId
                        + " was marked down before it answered: " + reason), "decode engine marked down: " + reason, Set.of(engineId));
            }
        });
    }

    /** A connection that could not be made, or broke: the engine is routed around until its health check answers again. */
    private void unreachable(EngineInfo engine, Throwable cause) {
        if (health != null && !ended) {
            health.markDown(engine.engineId(), "call failed: " + cause);
        }
    }

    /** An upstream failure: re-dispatched to other engines where it can be, else this request is cancelled and fails. */
    private void redispatchOrFail(UpstreamErrors.Mapped m, String reason, Set<String> avoid) {
        if (!redispatched(m, reason, avoid)) {
            cancelFact(reason);
            fail(m, End.UPSTREAM_ERROR);
        }
    }

    /**
     * A 5xx (not a timeout: the time is spent) before anything was sent to the client: ends this attempt (its id gets
     * a cancel, so exactly one outcome) and starts another on engines other than {@code avoid}. False when that cannot be.
     */
    private boolean redispatched(UpstreamErrors.Mapped m, String reason, Set<String> avoid) {
        if (redispatch == null || ended || response.headWritten() || response.closed() || m.status() < 500 || m.status() == 504) {
            return false;
        }
        Runnable next = redispatch.prepare(avoid, reason);
        if (next == null) {
            return false;
        }
        log.atInfo().addKeyValue("requestId", requestId).addKeyValue("avoid", avoid).log("re-dispatching to other engines: " + reason);
        cancelFact("re-dispatched to other engines: " + reason);
        status = m.status();
        finish(End.REDISPATCHED);
        resetUpstreams();
        next.run();
        return true;
    }

    private void onDecodeResponse(HttpClientResponse r, Throwable err) {
        if (ended) {
            if (r != null) {
                r.request().reset();
            }
            return;
        }
        String side = pd ? "decode" : "colocated";
        if (r == null) {
            unreachable(decode, err);
            UpstreamErrors.Mapped m = UpstreamErrors.fromFailure(side, decode.engineId(), err);
            redispatchOrFail(m, side + " engine failed: " + err.getMessage(), Set.of(decode.engineId()));
            return;
        }
        if (r.statusCode() / 100 != 2) {
            r.body().onComplete(body -> {
                if (!ended) {
                    UpstreamErrors.Mapped m = body.failed() ? UpstreamErrors.fromFailure(side, decode.engineId(), body.cause())
                            : UpstreamErrors.fromStatus(side, decode.engineId(), r.statusCode(), body.result().toString());
                    // A handoff that failed (502) may have failed on either side's worker: avoid both engines.
                    Set<String> avoid = pd && r.statusCode() == 502 ? Set.of(decode.engineId(), prefill.engineId()) : Set.of(decode.engineId());
                    redispatchOrFail(m, side + " engine answered " + r.statusCode() + ": " + m.message(), avoid);
                }
            });
            return;
        }
        decodeResp = r;
        response.setStatusCode(r.statusCode());
        MultiMap h = r.headers();
        for (String name : h.names()) {
            if (!HOP_BY_HOP.contains(name.toLowerCase())) {
                response.headers().set(name, h.getAll(name));
            }
        }
        response.putHeader("x-orbitkv-request-id", requestId).putHeader("x-orbitkv-decode-engine", decode.engineId());
        if (pd) {
            response.putHeader("x-orbitkv-prefill-engine", prefill.engineId());
            long now = System.nanoTime();
            if (prefillDoneNanos > 0) {
                response.putHeader("x-orbitkv-prefill-ms", ms(prefillDoneNanos - startNanos)).putHeader("x-orbitkv-handoff-ms", ms(now - prefillDoneNanos));
            }
            if (prefillFailed) {
                response.putHeader("x-orbitkv-recomputed", "true");
            }
        }
        response.setChunked(true);
        r.handler(buf -> {
            if (ended) {
                return;
            }
            if (!firstByte) {
                firstByte = true;
                long now = System.nanoTime();
                firstByteNanos = now;
                firstByteMicros = Marks.nowMicros();
                metrics.ttft(now - startNanos);
                if (pd && prefillDoneNanos > 0) {
                    metrics.handoff(now - prefillDoneNanos);
                }
                if (pd) {
                    hops.record(Hop.FIRST_TOKEN_TO_PROXY, Marks.parse(r.getHeader(Marks.HTTP_HEADER)).get(Marks.FIRST_TOKEN).orElse(0), firstByteMicros);
                }
            } else if (request.stream()) {
                metrics.itl(System.nanoTime() - lastChunkNanos);
            }
            lastChunkNanos = System.nanoTime();
            chunks++;
            response.write(buf);
            armIdle();
            if (response.writeQueueFull()) {
                r.pause();
                response.drainHandler(v -> r.resume());
            }
        });
        r.exceptionHandler(e -> {
            if (!ended) {
                cancelFact(side + " stream broke: " + e.getMessage());
                fail(UpstreamErrors.fromFailure(side, decode.engineId(), e), End.UPSTREAM_ERROR);
            }
        });
        r.endHandler(v -> {
            if (!ended) {
                metrics.upstream(side, System.nanoTime() - decodeSentNanos);
                status = r.statusCode();
                finish(End.ANSWERED);
                response.end();
            }
        });
    }

    /**
     * A started answer that goes silent for {@code proxy.timeout.stream-idle} is broken off and the request cancelled: a
     * decode engine emits a token per step, so the silence is an engine that died or was cut off mid-stream (a silent
     * partition used to hold the client until the 120 s request timeout).
     */
    private void armIdle() {
        if (idleTimer >= 0) {
            vertx.cancelTimer(idleTimer);
        }
        idleTimer = vertx.setTimer(streamIdle.toMillis(), id -> {
            idleTimer = -1;
            if (!ended) {
                cancelFact("decode stream silent for " + streamIdle.toMillis() + " ms (proxy.timeout.stream-idle)");
                fail(new UpstreamErrors.Mapped(504, "timeout", "decode engine " + decode.engineId() + " went silent mid-answer for "
                        + streamIdle.toMillis() + " ms"), End.TIMEOUT);
            }
        });
    }

    private void clientGone() {
        if (ended) {
            return;
        }
        status = 499;
        cancelFact("client disconnected");
        finish(End.CLIENT_GONE);
        resetUpstreams();
    }

    private void cancelFact(String reason) {
        if (pd) {
            metrics.cancel();
            admissions.cancelled(requestId, reason, trace).whenComplete((v, err) -> {
                if (err != null) {
                    log.atWarn().addKeyValue("requestId", requestId).log("could not report the cancel: " + err.getMessage());
                }
            });
        }
    }

    private void fail(UpstreamErrors.Mapped m, End how) {
        if (ended) {
            return;
        }
        status = response.headWritten() ? 502 : m.status();
        finish(how);
        resetUpstreams();
        if (response.ended() || response.closed()) {
            return;
        }
        if (response.headWritten()) {
            metrics.status(502); // counted here: a reset response never ends
            response.reset(); // mid-stream: the only honest signal left is to break the stream
            return;
        }
        response.setStatusCode(m.status()).putHeader("content-type", "application/json").putHeader("x-orbitkv-request-id", requestId)
                .end(CompletionRequest.errorBody(m.message(), m.type(), null, m.status()).toString());
    }

    private void finish(End how) {
        ended = true;
        metrics.total(System.nanoTime() - startNanos);
        if (how == End.ANSWERED && request.stream() && chunks > 1) {
            metrics.tpot((lastChunkNanos - firstByteNanos) / (chunks - 1));
        }
        if (how == End.CLIENT_GONE) {
            metrics.status(499);
        }
        if (timer >= 0) {
            vertx.cancelTimer(timer);
            timer = -1;
        }
        if (idleTimer >= 0) {
            vertx.cancelTimer(idleTimer);
            idleTimer = -1;
        }
        answered(how);
        onEnd.accept(how);
    }

    /** What the client got, with the proxy's marks, for the log ({@code orbitkv.answers}). */
    private void answered(End how) {
        long now = System.nanoTime();
        Marks m = Marks.receivedAt(inMicros);
        if (prefillDoneMicros > 0) {
            m.at(Marks.PREFILL_ANSWERED, prefillDoneMicros);
        }
        if (firstByteMicros > 0) {
            m.at(Marks.FIRST_TOKEN, firstByteMicros);
        }
        m.mark(Marks.END);
        io.vertx.core.Future<io.orbitkv.pd.events.RoutingDecision> later = pendingRouting;
        if (later != null && !later.isComplete()) {
            later.onComplete(x -> writeAnswer(how, now, m)); // its routing decision with it (a lookup failure: none)
        } else {
            writeAnswer(how, now, m);
        }
    }

    private void writeAnswer(End how, long now, Marks m) {
        io.vertx.core.Future<io.orbitkv.pd.events.RoutingDecision> later = pendingRouting;
        if (later != null && later.succeeded() && later.result() != null) {
            // read here, not from the field its success handler sets: that handler may still be queued on this context
            routing = later.result();
            promptTokens = routing.getPromptTokens();
        }
        String route = localPrefill ? "local_prefill" : !pd ? "colocated" : prefillFailed ? "recomputed" : "pd";
        admissions.answered(RequestAnswered.newBuilder().setRequestId(requestId).setProxyId(admissions.source()).setRoute(route)
                .setStatus(status).setEnd(how.name()).setPrefillEngineId(prefill == null ? null : prefill.engineId())
                .setDecodeEngineId(decode == null ? null : decode.engineId()).setPromptTokens(promptTokens).setStream(request.stream())
                .setTtftUs(firstByteNanos < 0 ? null : (firstByteNanos - startNanos) / 1000)
                .setHandoffUs(pd && prefillDoneNanos > 0 && firstByteNanos > 0 ? (firstByteNanos - prefillDoneNanos) / 1000 : null)
                .setTotalUs((now - startNanos) / 1000).setAnsweredAtMs(System.currentTimeMillis()).setRouting(routing).build(), m);
    }

    private void resetUpstreams() {
        if (prefillReq != null) {
            prefillReq.reset();
        }
        if (decodeReq != null) {
            decodeReq.reset();
        }
        if (decodeResp != null) {
            decodeResp.request().reset();
        }
    }

    private static String ms(long nanos) {
        return String.format(java.util.Locale.ROOT, "%.3f", nanos / 1e6);
    }

    public String requestId() {
        return requestId;
    }
}
