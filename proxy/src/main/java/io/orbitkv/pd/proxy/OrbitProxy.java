package io.orbitkv.pd.proxy;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.engine.client.http.CompletionRequest;
import io.orbitkv.pd.proxy.internal.Admissions;
import io.orbitkv.pd.proxy.internal.ClientDeadlines;
import io.orbitkv.pd.proxy.internal.EngineHealth;
import io.orbitkv.pd.proxy.internal.EngineList;
import io.orbitkv.pd.proxy.internal.ProxiedRequest;
import io.orbitkv.pd.proxy.internal.ProxyMetrics;
import io.orbitkv.pd.metrics.ComponentMetrics;
import io.orbitkv.pd.runtime.Health;
import io.orbitkv.pd.runtime.Lifecycle;
import io.orbitkv.pd.proxy.internal.RequestIds;
import io.orbitkv.pd.schemas.config.KafkaClients;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceContext;
import io.orbitkv.pd.tracing.TraceHeaders;
import io.orbitkv.pd.proxy.internal.UpstreamErrors;
import io.orbitkv.pd.proxy.routing.EngineInfo;
import io.orbitkv.pd.proxy.routing.PrefixRouter;
import io.orbitkv.pd.proxy.routing.PrefixScore;
import io.orbitkv.pd.proxy.routing.RoutingPolicy;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.TopicAdmin;
import io.orbitkv.pd.schemas.Topics;
import io.vertx.core.DeploymentOptions;
import io.vertx.core.Future;
import io.vertx.core.VerticleBase;
import io.vertx.core.Vertx;
import io.vertx.core.VertxOptions;
import io.vertx.core.buffer.Buffer;
import io.vertx.core.http.HttpClient;
import io.vertx.core.http.HttpClientOptions;
import io.vertx.core.http.HttpMethod;
import io.vertx.core.http.HttpServer;
import io.vertx.core.http.HttpServerOptions;
import io.vertx.core.http.HttpServerRequest;
import io.vertx.core.http.HttpServerResponse;
import io.vertx.core.http.PoolOptions;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.LongAdder;
import org.apache.kafka.clients.admin.Admin;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The OpenAI-compatible proxy: admits each request, picks a prefill and a decode engine ({@link RoutingPolicy}),
 * dispatches both at once under one request id, streams the decode answer back, maps failures to 502/503/504 with
 * OpenAI error bodies, and turns a client disconnect or a timeout into a {@code CancelRequested} fact.
 *
 * <p>Built on Vert.x 5 (Netty): an event-loop HTTP server and a pooled keep-alive client in one small library, with
 * backpressure between the upstream stream and the client ({@code pause}/{@code drainHandler}), connection close
 * notifications (what turns a disconnect into a cancel) and request reset — the pieces a streaming reverse proxy
 * needs, without a framework. {@code proxy.event-loops} servers share the port.
 *
 * <p>Endpoints: {@code POST /v1/completions}, {@code POST /v1/chat/completions} (header
 * {@code x-orbitkv-route: colocated} sends a request to one engine, no handoff: the baseline of the benchmark),
 * {@code GET /v1/models}, {@code GET /health}, {@code GET /stats}.
 */
public final class OrbitProxy implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(OrbitProxy.class);

    private final ProxyConfig config;
    private final Tokenizer tokenizer;
    private final Vertx vertx;
    private final EventSerdes serdes;
    private final Topics topics;
    private final RoutingPolicy policy;
    /** {@code proxy.routing} as the policy read it (what the routing decisions name). */
    private final String routingName;
    private final EngineList engines;
    private final EngineHealth health = new EngineHealth();
    /** Requests in flight: told when an engine they wait on is marked down. */
    private final java.util.Set<ProxiedRequest> live = java.util.concurrent.ConcurrentHashMap.newKeySet();
    private final ClientDeadlines deadlines;
    /** Client-named request ids admitted recently (a reuse is refused with 409). */
    private final RequestIds requestIds = new RequestIds(200_000);
    private final CompletionRequest.Limits limits;
    private final Map<String, AtomicInteger> localLoad = new ConcurrentHashMap<>();
    private final Map<String, LongAdder> counts = new ConcurrentHashMap<>();
    private final AtomicInteger inFlight = new AtomicInteger();
    private final ComponentMetrics metrics;
    private final ProxyMetrics meters;
    private final Lifecycle lifecycle;
    private Admissions admissions;
    /** The engines' KV index, kept from orbitkv.kv-events (null when proxy.kv-index.enabled=false). */
    private volatile io.orbitkv.pd.proxy.routing.KvIndexFeed kvIndex;
    private volatile int port;
    /** How the proxy hashes a prompt's blocks ({@code proxy.kv-index.seed}, {@code .block-tokens}): engines that register none hash so. */
    private final EngineInfo.Hashing ownHashing;

    private OrbitProxy(ProxyConfig config, Tokenizer tokenizer) {
        this.config = config;
        this.lifecycle = new Lifecycle("proxy " + config.proxyId());
        this.tokenizer = tokenizer;
        this.vertx = Vertx.vertx(new VertxOptions().setEventLoopPoolSize(config.eventLoops() + 1).setWorkerPoolSize(1));
        this.serdes = EventSerdes.create(config.serde());
        this.topics = new Topics(config.topics(), serdes);
        this.policy = RoutingPolicy.named(config.routing());
        this.routingName = RoutingPolicy.canonical(config.routing());
        this.deadlines = new ClientDeadlines(vertx, config.clientIdleTimeout(), config.clientBodyTimeout());
        this.engines = new EngineList(config.staticEngines(), config.deciderUrls());
        this.limits = new CompletionRequest.Limits(config.maxPromptChars(), config.maxTokens(), 4096);
        this.metrics = ComponentMetrics.create("proxy", config.proxyId());
        this.meters = new ProxyMetrics(metrics.registry(), inFlight);
        this.ownHashing = new EngineInfo.Hashing(PrefixRouter.ALGORITHM, config.prefix().seed(), config.prefix().blockTokens());
    }

    /** Starts a proxy whose P/D admissions count prompts with {@code tokenizer} (the engines' own; see {@link Tokenizer}). */
    public static OrbitProxy start(ProxyConfig config, Tokenizer tokenizer) throws Exception {
        OrbitProxy p = new OrbitProxy(config, java.util.Objects.requireNonNull(tokenizer, "tokenizer"));
        p.lifecycle.starting();
        try {
            p.open();
        } catch (Exception | Error e) {
            p.lifecycle.failed(e);
            p.close();
            throw e;
        }
        p.lifecycle.running();
        return p;
    }

    private void open() throws Exception {
        TopicAdmin.ensure(KafkaClients.admin(config.bootstrapServers(), config.kafkaOverrides()), topics);
        admissions = new Admissions(config.bootstrapServers(), config.kafkaOverrides(), topics, config.proxyId(), metrics.registry());
        HttpClient pollClient = vertx.createHttpClient(new HttpClientOptions().setConnectTimeout(2000));
        engines.start(vertx, pollClient, config.refresh());
        if (config.kvIndex()) {
            // events of engines that never registered are refused (dead letters) once the deciders' engine list is known
            kvIndex = new io.orbitkv.pd.proxy.routing.KvIndexFeed(config.bootstrapServers(), config.kafkaOverrides(), topics,
                    config.proxyId() + "-kv-index", engines::registered, admissions::deadLetter, "proxy:" + config.proxyId()).start();
        }
        health.onDown((engineId, reason) -> live.forEach(pr -> pr.engineDown(engineId, reason)));
        health.start(vertx, pollClient, engines::current, config.probe(), config.probeTimeout());
        // Listen only once the engine list is known (10 s at most): a proxy restarted behind a load balancer otherwise
        // takes requests in the moment before its first refresh and answers them 503 "no engine" (seen in chaos).
        try {
            engines.firstRefresh().get(10, TimeUnit.SECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            log.atWarn().log("no engine list from the decider within 10 s; listening anyway (engines come as the list refreshes)");
        }
        vertx.deployVerticle(Server::new, new DeploymentOptions().setInstances(config.eventLoops())).toCompletionStage().toCompletableFuture()
                .get(30, TimeUnit.SECONDS);
        log.atInfo().addKeyValue("url", url()).addKeyValue("routing", config.routing()).addKeyValue("decider", config.deciderUrls())
                .addKeyValue("staticEngines", config.staticEngines().size()).log("proxy ready");
    }

    public String url() {
        return "http://" + config.httpHost() + ":" + port;
    }

    public int port() {
        return port;
    }

    /** The engines routed to now. */
    public List<EngineInfo> engines() {
        return engines.current();
    }

    /** One HTTP server and one upstream client per event loop. */
    private final class Server extends VerticleBase {
        private HttpClient client;

        @Override
        public Future<?> start() {
            client = vertx.createHttpClient(new HttpClientOptions().setConnectTimeout((int) config.connectTimeout().toMillis()).setKeepAlive(true)
                    .setMaxInitialLineLength(8192), new PoolOptions().setHttp1MaxSize(512).setMaxWaitQueueSize(10_000));
            int bind = port != 0 ? port : config.httpPort();
            // HTTP/1.1 only: with h2c detection on, Vert.x hands a connection to the server only once its first bytes show the
            // protocol, so a connection that never sends a byte would escape the client deadlines (ClientDeadlinesTest).
            return vertx.createHttpServer(new HttpServerOptions().setHost(config.httpHost()).setPort(bind).setIdleTimeout(0)
                            .setHttp2ClearTextEnabled(false))
                    .connectionHandler(deadlines::opened).requestHandler(req -> handle(req, client)).listen().onSuccess(s -> port = s.actualPort());
        }
    }

    private void handle(HttpServerRequest req, HttpClient client) {
        long in = Marks.nowMicros();
        String path = req.path();
        HttpServerResponse resp = req.response();
        boolean completion = path.equals("/v1/completions") || path.equals("/v1/chat/completions");
        Runnable done = deadlines.started(req, () -> {
            count("rejected_408");
            error(resp, 408, "the request body did not arrive within " + config.clientBodyTimeout().toMillis() + " ms"
                    + " (proxy.timeout.client-body)", "invalid_request_error", null);
            req.connection().close();
        });
        resp.endHandler(v -> {
            if (completion) {
                meters.status(resp.getStatusCode());
            }
            done.run();
        });
        if (req.method() == HttpMethod.GET && path.equals("/health")) {
            List<EngineInfo> e = engines.current();
            boolean ok = e.stream().anyMatch(EngineInfo::canPrefill) && e.stream().anyMatch(EngineInfo::canDecode);
            json(resp, ok ? 200 : 503, CompletionRequest.json().createObjectNode().put("status", ok ? "ok" : "no engines")
                    .put("lifecycle", lifecycle.state().label())
                    .put("prefill_engines", e.stream().filter(EngineInfo::canPrefill).count())
                    .put("decode_engines", e.stream().filter(EngineInfo::canDecode).count()));
        } else if (req.method() == HttpMethod.GET && Health.probe(path, lifecycle, this::notReady) instanceof Health.Answer a) {
            resp.setStatusCode(a.status()).putHeader("content-type", "application/json").end(a.json());
        } else if (req.method() == HttpMethod.GET && path.equals("/stats")) {
            json(resp, 200, stats());
        } else if (req.method() == HttpMethod.GET && path.equals("/kv-index")) {
            if (kvIndex == null) {
                json(resp, 404, CompletionRequest.errorBody("the KV index is off (proxy.kv-index.enabled=false)", "not_found", null, 404));
            } else {
                json(resp, 200, CompletionRequest.json().valueToTree(kvIndex.snapshot()));
            }
        } else if (req.method() == HttpMethod.GET && path.equals("/engines")) {
            json(resp, 200, enginesJson());
        } else if (req.method() == HttpMethod.GET && path.equals("/metrics")) {
            resp.setStatusCode(200).putHeader("content-type", ComponentMetrics.CONTENT_TYPE).end(metrics.scrape());
        } else if (path.startsWith("/v1/") && !admitted(req, resp)) {
            return; // answered 401 or 429
        } else if (req.method() == HttpMethod.GET && path.equals("/v1/models")) {
            models(resp, client);
        } else if (path.equals("/v1/completions") || path.equals("/v1/chat/completions")) {
            if (req.method() != HttpMethod.POST) {
                error(resp, 405, "use POST for " + path, "invalid_request_error", null);
                return;
            }
            readBody(req, body -> completion(req, path, body, client, in));
        } else {
            error(resp, 404, "no such endpoint: " + req.method() + " " + path + " (try POST /v1/completions, /v1/chat/completions)",
                    "invalid_request_error", null);
        }
    }

    private void readBody(HttpServerRequest req, java.util.function.Consumer<byte[]> then) {
        String len = req.getHeader("content-length");
        if (len != null && len.matches("\\d{1,18}") && Long.parseLong(len) > config.maxBodyBytes()) {
            count("rejected_413");
            error(req.response(), 413, "request body of " + len + " bytes is over the limit of " + config.maxBodyBytes() + " (proxy.max-body-bytes)",
                    "invalid_request_error", null);
            return;
        }
        Buffer acc = Buffer.buffer();
        boolean[] over = new boolean[1];
        req.handler(b -> {
            if (!over[0] && acc.length() + b.length() > config.maxBodyBytes()) {
                over[0] = true;
                count("rejected_413");
                error(req.response(), 413, "request body is over the limit of " + config.maxBodyBytes() + " bytes (proxy.max-body-bytes)",
                        "invalid_request_error", null);
            } else if (!over[0]) {
                acc.appendBuffer(b);
            }
        });
        req.endHandler(v -> {
            if (!over[0]) {
                then.accept(acc.getBytes());
            }
        });
    }

    private void completion(HttpServerRequest req, String path, byte[] body, HttpClient client, long inMicros) {
        HttpServerResponse resp = req.response();
        CompletionRequest r;
        try {
            r = CompletionRequest.parse(path.endsWith("/chat/completions") ? CompletionRequest.Kind.CHAT : CompletionRequest.Kind.COMPLETION, body,
                    limits);
            if (r.kv() != null) {
                throw new CompletionRequest.Invalid("kv_transfer_params", "kv_transfer_params is set by the proxy, not by clients");
            }
            if (config.model() != null && !config.model().equals(r.model())) {
                count("rejected_404");
                error(resp, 404, "the model '" + r.model() + "' does not exist; this proxy serves '" + config.model() + "'", "invalid_request_error",
                        "model");
                return;
            }
        } catch (CompletionRequest.Invalid e) {
            count("rejected_400");
            error(resp, 400, e.getMessage(), "invalid_request_error", e.param());
            return;
        }
        boolean colocated = "colocated".equalsIgnoreCase(req.getHeader("x-orbitkv-route"));
        List<EngineInfo> known = engines.current();
        List<EngineInfo> all = known.stream().filter(e -> e.serves(r.model())).toList();
        if (all.isEmpty() && !known.isEmpty()) {
            // OpenAI's answer for a model nobody serves, rather than another model's answer
            count("rejected_404");
            json(resp, 404, CompletionRequest.errorBody("The model '" + r.model() + "' does not exist: the engines here serve "
                    + known.stream().map(EngineInfo::model).filter(java.util.Objects::nonNull).distinct().sorted().toList(),
                    "invalid_request_error", "model", "model_not_found"));
            return;
        }
        // A client may name its request (x-request-id, unique per request): its facts and decisions are then easy to find.
        String given = req.getHeader("x-request-id");
        String rid = given != null && given.matches("[A-Za-z0-9._:-]{1,128}") ? given : "req-" + UUID.randomUUID();
        long takenAt = rid.equals(given) ? requestIds.claim(rid, System.currentTimeMillis()) : -1;
        if (takenAt >= 0) {
            count("rejected_409");
            error(resp, 409, "x-request-id '" + rid + "' was already used by a request at " + java.time.Instant.ofEpochMilli(takenAt)
                    + ": request ids must be unique (the id keys the request's facts, decisions and pages); send a new one, or none and"
                    + " the proxy makes one", "invalid_request_error", "x-request-id");
            return;
        }
        TraceContext trace = TraceHeaders.continueOrStart(TraceHeaders.fromHttp(req::getHeader));
        Attempt first = new Attempt(req, r, path, client, colocated, all, java.util.Set.of(), rid, rid, 1,
                System.nanoTime() + config.requestTimeout().toNanos(), trace, inMicros);
        if (!first.start()) {
            if (takenAt < 0 && rid.equals(given)) {
                requestIds.release(rid); // nothing started under it: the client may send it again
            }
            count("rejected_503");
            UpstreamErrors.Mapped m = UpstreamErrors.noEngine(first.missingSide());
            error(resp, m.status(), m.message(), m.type(), null);
        }
    }

    /**
     * One try of a client's request on a pair of engines (or one, colocated), under its own request id in the log: the
     * client's for the first, {@code <id>.r<n>} for the n-th re-dispatch (an id keys one request's facts, pages and
     * outcome, so a new try on other engines is a new request; the answer's {@code x-orbitkv-request-id} names it).
     */
    private final class Attempt {
        final HttpServerRequest req;
        final CompletionRequest r;
        final String path;
        final HttpClient client;
        final boolean colocated;
        final List<EngineInfo> candidates;
        final java.util.Set<String> avoid;
        final String clientId;
        final String rid;
        final int number;
        final long deadlineNanos;
        final TraceContext trace;
        final long inMicros;
        private String missing;
        /** The prompt's tokens when the routing tokenized it (-1: not yet). */
        private int promptTokens = -1;

        Attempt(HttpServerRequest req, CompletionRequest r, String path, HttpClient client, boolean colocated, List<EngineInfo> candidates,
                java.util.Set<String> avoid, String clientId, String rid, int number, long deadlineNanos, TraceContext trace, long inMicros) {
            this.req = req;
            this.r = r;
            this.path = path;
            this.client = client;
            this.colocated = colocated;
            this.candidates = candidates;
            this.avoid = avoid;
            this.clientId = clientId;
            this.rid = rid;
            this.number = number;
            this.deadlineNanos = deadlineNanos;
            this.trace = trace;
            this.inMicros = inMicros;
        }

        String missingSide() {
            return missing;
        }

        /** The engines to use: healthy ones not avoided, else (none healthy) any not avoided; null when a side has none. */
        private EngineInfo pick(RoutingPolicy.Side side) {
            List<EngineInfo> ok = candidates.stream().filter(e -> !avoid.contains(e.engineId())).toList();
            List<EngineInfo> healthy = ok.stream().filter(e -> health.usable(e.engineId())).toList();
            EngineInfo e = policy.pick(side, healthy, OrbitProxy.this::load).orElse(null);
            // Every candidate marked down: try one anyway rather than refuse (a mark can be a moment stale). Not on a re-dispatch.
            return e != null || number > 1 ? e : policy.pick(side, ok, OrbitProxy.this::load).orElse(null);
        }

        /** Healthy candidates of one side, not avoided, in id order. */
        private List<EngineInfo> healthy(java.util.function.Predicate<EngineInfo> side) {
            return candidates.stream().filter(e -> side.test(e) && !avoid.contains(e.engineId()) && health.usable(e.engineId()))
                    .sorted(java.util.Comparator.comparing(EngineInfo::engineId)).toList();
        }

        /**
         * Picks the engines and dispatches; false (nothing started) when a side has no engine.
         *
         * <p>With the KV index on and the prompt's token ids known, every engine's cached prefix of the prompt is looked up
         * ({@link PrefixRouter}) whatever the policy, and the decision goes to the log with the answer. Under
         * {@code proxy.routing=prefix_aware} the prefill and the decode engine are the best {@link PrefixScore} (cached prefix
         * against load: the decode engine's cached prefix is not moved); with conditional disaggregation on
         * ({@code proxy.routing.local-prefill}) the decode engine is chosen the same way under any policy and the request is
         * prefilled there when a rule fires.
         */
        boolean start() {
            PrefixRouter.Match match = null;
            List<EngineInfo> prefillSide = List.of();
            List<EngineInfo> decodeSide = List.of();
            io.orbitkv.pd.proxy.routing.KvIndexFeed idx = kvIndex;
            // Only prefix-aware routing and conditional disaggregation choose by the lookup; otherwise it goes to the log with
            // the answer alone and runs off the request's path, after the dispatch (tokenizing and hashing a 32K-token prompt
            // took milliseconds on the admission's path: docs/bench/real-model.md)
            boolean routeByCache = routingName.equals("prefix_aware") || config.prefix().localPrefill();
            if (!colocated && idx != null && routeByCache) {
                int[] ids = tokenizer.tokenIds(r.prompt());
                if (ids != null) {
                    promptTokens = ids.length;
                    prefillSide = healthy(EngineInfo::canPrefill);
                    decodeSide = healthy(EngineInfo::canDecode);
                    java.util.Set<EngineInfo> both = new java.util.LinkedHashSet<>(prefillSide);
                    both.addAll(decodeSide);
                    match = PrefixRouter.match(ids, List.copyOf(both), ownHashing, idx::matches);
                }
            }
            boolean prefixAware = match != null && routingName.equals("prefix_aware");
            ProxyConfig.PrefixRouting routing = config.prefix();
            Map<String, Double> scores = new java.util.HashMap<>();
            EngineInfo chosenDecode;
            // the decode engine by its cached prefix too (Dynamo's router counts decode blocks): what it holds is not moved,
            // and with conditional disaggregation it decides whether a handoff is needed at all
            if (match != null && (prefixAware || routing.localPrefill()) && !decodeSide.isEmpty()) {
                PrefixScore.Choice c = PrefixScore.choose(decodeSide, match, OrbitProxy.this::load, routing.weights(), idx::blocks);
                c.scores().forEach((id, v) -> scores.put("decode/" + id, v));
                chosenDecode = c.engine();
            } else {
                chosenDecode = pick(colocated ? RoutingPolicy.Side.COLOCATED : RoutingPolicy.Side.DECODE);
            }
            EngineInfo decode = chosenDecode;
            // conditional disaggregation: the decode engine already holds (nearly) all of the prompt — prefill there, no handoff
            String localRule = match == null || decode == null ? null
                    : routing.localRule(promptTokens, match.blocks(decode.engineId()), match.matched(decode.engineId()),
                    decode.hashing() != null && decode.hashing().blockSize() > 0 ? decode.hashing().blockSize() : routing.blockTokens());
            boolean local = localRule != null;
            EngineInfo chosenPrefill = null;
            if (!colocated && !local) {
                if (prefixAware && !prefillSide.isEmpty()) {
                    PrefixScore.Choice c = PrefixScore.choose(prefillSide, match, OrbitProxy.this::load, routing.weights(), idx::blocks);
                    c.scores().forEach((id, v) -> scores.put("prefill/" + id, v));
                    chosenPrefill = c.engine();
                    // what the routing saw, for the client and the benchmarks: matched blocks of the prompt's full blocks
                    req.response().putHeader("x-orbitkv-prefix-match", c.matchedBlocks() + "/" + match.blocks(chosenPrefill.engineId()));
                } else {
                    chosenPrefill = pick(RoutingPolicy.Side.PREFILL);
                }
            }
            EngineInfo prefill = chosenPrefill;
            if (local) {
                req.response().putHeader("x-orbitkv-route", "local-prefill");
            }
            if (decode == null || (!colocated && !local && prefill == null)) {
                missing = decode == null ? "decode" : "prefill";
                return false;
            }
            io.orbitkv.pd.events.RoutingDecision decision = match == null ? null
                    : PrefixRouter.decision(routingName, local ? localRule : prefixAware ? "prefix_score" : "load", match, ownHashing,
                    prefillSide, decodeSide, decode, OrbitProxy.this::load, scores);
            inFlight.incrementAndGet();
            localLoad.computeIfAbsent(decode.engineId(), k -> new AtomicInteger()).incrementAndGet();
            if (prefill != null) {
                localLoad.computeIfAbsent(prefill.engineId(), k -> new AtomicInteger()).incrementAndGet();
            }
            java.time.Duration left = java.time.Duration.ofNanos(Math.max(1_000_000, deadlineNanos - System.nanoTime()));
            ProxiedRequest[] self = new ProxiedRequest[1];
            ProxiedRequest pr = new ProxiedRequest(vertx, client, admissions, rid, r, path, req.response(), left, config.streamIdle(), how -> {
                live.remove(self[0]);
                inFlight.decrementAndGet();
                localLoad.get(decode.engineId()).decrementAndGet();
                if (prefill != null) {
                    localLoad.get(prefill.engineId()).decrementAndGet();
                }
                count(how.name().toLowerCase());
            }).traced(trace, req.getHeader(TraceHeaders.TRACESTATE)).metered(meters).receivedAt(inMicros)
                    .failingOver(health, config.redispatch() >= number ? this::next : null).routed(decision, local);
            self[0] = pr;
            live.add(pr);
            count(colocated ? "colocated" : local ? "local_prefill" : "pd");
            if (colocated || local) {
                pr.dispatchColocated(decode);
            } else {
                // tokenized once: by the prefix-aware choice when it ran
                pr.dispatchPd(prefill, decode, promptTokens >= 0 ? promptTokens : tokenizer.countTokens(r.prompt()), config.fallbackRecompute());
            }
            if (!colocated && idx != null && !routeByCache) {
                List<EngineInfo> p = healthy(EngineInfo::canPrefill);
                List<EngineInfo> d = healthy(EngineInfo::canDecode);
                pr.routedLater(vertx.executeBlocking(() -> lookUp(idx, p, d, decode), false));
            }
            return true;
        }

        /** The KV index's view of the prompt for the log ({@code RequestAnswered.routing}), when nothing chose by it; null when the tokenizer only counts. */
        private io.orbitkv.pd.events.RoutingDecision lookUp(io.orbitkv.pd.proxy.routing.KvIndexFeed idx, List<EngineInfo> prefillSide,
                                                          List<EngineInfo> decodeSide, EngineInfo decode) {
            int[] ids = tokenizer.tokenIds(r.prompt());
            if (ids == null) {
                return null;
            }
            java.util.Set<EngineInfo> both = new java.util.LinkedHashSet<>(prefillSide);
            both.addAll(decodeSide);
            PrefixRouter.Match m = PrefixRouter.match(ids, List.copyOf(both), ownHashing, idx::matches);
            return PrefixRouter.decision(routingName, "load", m, ownHashing, prefillSide, decodeSide, decode, OrbitProxy.this::load, Map.of());
        }

        /** The next try, avoiding the engines that failed so far; null when none is left or the time is nearly spent. */
        private Runnable next(java.util.Set<String> failed, String reason) {
            if (deadlineNanos - System.nanoTime() < 1_000_000_000L) {
                return null;
            }
            java.util.Set<String> more = new java.util.HashSet<>(avoid);
            more.addAll(failed);
            boolean canDecode = candidates.stream().anyMatch(e -> (colocated || e.canDecode()) && !more.contains(e.engineId()));
            boolean canPrefill = colocated || candidates.stream().anyMatch(e -> e.canPrefill() && !more.contains(e.engineId()));
            if (!canDecode || !canPrefill) {
                return null;
            }
            // the id is claimed only for a try that happens
            String id = clientId + ".r" + number;
            if (requestIds.claim(id, System.currentTimeMillis()) >= 0) {
                id = "req-" + UUID.randomUUID();
            }
            Attempt a = new Attempt(req, r, path, client, colocated, candidates, java.util.Set.copyOf(more), clientId, id, number + 1,
                    deadlineNanos, trace, inMicros);
            return () -> {
                count("redispatched");
                if (!a.start()) {
                    UpstreamErrors.Mapped m = UpstreamErrors.noEngine(a.missingSide());
                    error(req.response(), m.status(), m.message() + " (after: " + reason + ")", m.type(), null);
                }
            };
        }
    }

    private long load(String engineId) {
        AtomicInteger n = localLoad.get(engineId);
        return n == null ? 0 : n.get();
    }

    private void models(HttpServerResponse resp, HttpClient client) {
        if (config.model() != null) {
            ObjectNode root = CompletionRequest.json().createObjectNode().put("object", "list");
            root.putArray("data").addObject().put("id", config.model()).put("object", "model").put("created", 0).put("owned_by", "orbitkv");
            json(resp, 200, root);
            return;
        }
        EngineInfo any = engines.current().stream().filter(EngineInfo::canDecode).findFirst().orElse(null);
        if (any == null) {
            UpstreamErrors.Mapped m = UpstreamErrors.noEngine("decode");
            error(resp, m.status(), m.message(), m.type(), null);
            return;
        }
        client.request(new io.vertx.core.http.RequestOptions().setMethod(HttpMethod.GET).setAbsoluteURI(any.httpUrl() + "/v1/models"))
                .compose(r -> r.send()).compose(r -> r.body().map(b -> Map.entry(r.statusCode(), b)))
                .onSuccess(e -> resp.setStatusCode(e.getKey()).putHeader("content-type", "application/json").end(e.getValue()))
                .onFailure(e -> {
                    UpstreamErrors.Mapped m = UpstreamErrors.fromFailure("decode", any.engineId(), e);
                    error(resp, m.status(), m.message(), m.type(), null);
                });
    }

    private void count(String what) {
        counts.computeIfAbsent(what, k -> new LongAdder()).increment();
    }

    private ObjectNode stats() {
        ObjectNode s = CompletionRequest.json().createObjectNode().put("proxy_id", config.proxyId()).put("in_flight", inFlight.get())
                .put("routing", config.routing()).put("engines_refreshed_at_ms", engines.refreshedAtMs());
        ObjectNode c = s.putObject("counts");
        new java.util.TreeMap<>(counts).forEach((k, v) -> c.put(k, v.sum()));
        ObjectNode down = s.putObject("engines_down");
        health.down().forEach((id, d) -> down.putObject(id).put("since_ms", d.sinceMs()).put("reason", d.reason()));
        s.set("engines", enginesJson());
        return s;
    }

    /**
     * The engines routed to, each with its block hashing as registered and how it compares with the proxy's ({@code same},
     * or what differs: an engine of another seed is matched with its own hashes, one of an algorithm the proxy cannot
     * compute is not matched by cache, and says so here instead of silently scoring 0).
     */
    private ObjectNode enginesJson() {
        ObjectNode e = CompletionRequest.json().createObjectNode();
        for (EngineInfo i : engines.current()) {
            ObjectNode o = e.putObject(i.engineId()).put("role", i.role().name().toLowerCase()).put("url", i.httpUrl())
                    .put("decider_in_flight", i.inFlight()).put("proxy_in_flight", load(i.engineId()))
                    .put("block_hashing", i.hashing() == null ? "not registered (taken as the proxy's: " + ownHashing + ")" : i.hashing().toString())
                    .put("hashing", PrefixRouter.hashingOf(i.hashing(), ownHashing));
            if (kvIndex != null) {
                o.put("indexed_blocks", kvIndex.blocks(i.engineId()));
            }
        }
        return e;
    }

    /**
     * With API keys configured: lets a request with a valid key within its rate through, else answers it 401 (with
     * {@code WWW-Authenticate: Bearer}) or 429 (with {@code Retry-After}) and counts it.
     */
    private boolean admitted(HttpServerRequest req, HttpServerResponse resp) {
        if (config.apiKeys() == null) {
            return true;
        }
        return switch (config.apiKeys().check(req.getHeader("authorization"))) {
            case ApiKeys.Verdict.Allowed a -> true;
            case ApiKeys.Verdict.Unauthorized u -> {
                count("rejected_401");
                resp.putHeader("WWW-Authenticate", "Bearer");
                error(resp, 401, u.reason(), "authentication_error", null);
                yield false;
            }
            case ApiKeys.Verdict.Limited l -> {
                count("rejected_429");
                resp.putHeader("Retry-After", Long.toString(l.retryAfterSeconds()));
                error(resp, 429, "rate limit of API key " + l.name() + " exceeded; retry after " + l.retryAfterSeconds() + " s",
                        "rate_limit_error", null);
                yield false;
            }
        };
    }

    /** Ready while it can route a request: a prefill and a decode engine (both roles may be one engine) in its list. */
    private String notReady() {
        List<EngineInfo> e = engines.current();
        if (e.stream().noneMatch(EngineInfo::canPrefill)) {
            return "no prefill engine to route to";
        }
        return e.stream().anyMatch(EngineInfo::canDecode) ? null : "no decode engine to route to";
    }

    private static void json(HttpServerResponse resp, int status, ObjectNode body) {
        resp.setStatusCode(status).putHeader("content-type", "application/json").end(body.toString());
    }

    private static void error(HttpServerResponse resp, int status, String message, String type, String param) {
        if (resp.ended() || resp.closed()) {
            return;
        }
        json(resp, status, CompletionRequest.errorBody(message, type, param, status));
    }

    public void awaitClose() throws InterruptedException {
        lifecycle.awaitStopped();
    }

    /** Where this proxy is in its life ({@code /health} reports it). */
    public Lifecycle.State state() {
        return lifecycle.state();
    }

    @Override
    public void close() {
        if (!lifecycle.stopping()) {
            return;
        }
        try {
            try {
                vertx.close().toCompletionStage().toCompletableFuture().get(10, TimeUnit.SECONDS);
            } catch (Exception e) {
                log.atWarn().log("vert.x did not stop cleanly: " + e);
            }
            if (admissions != null) {
                admissions.close();
            }
            if (kvIndex != null) {
                kvIndex.close();
            }
            serdes.close();
            metrics.close();
        } finally {
            lifecycle.stopped();
        }
    }
}
