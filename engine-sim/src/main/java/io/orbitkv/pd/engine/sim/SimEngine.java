package io.orbitkv.pd.engine.sim;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.engine.client.BlockAllocator;
import io.orbitkv.pd.engine.client.EngineClient;
import io.orbitkv.pd.engine.client.EngineControl;
import io.orbitkv.pd.engine.client.api.ApiProtocol;
import io.orbitkv.pd.engine.client.api.EngineApiClient;
import io.orbitkv.pd.engine.client.http.CompletionRequest;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvPool;
import io.orbitkv.pd.metrics.ComponentMetrics;
import io.orbitkv.pd.runtime.Lifecycle;
import io.vertx.core.Context;
import io.vertx.core.Vertx;
import io.vertx.core.VertxOptions;
import io.vertx.core.http.HttpServer;
import io.vertx.core.http.HttpServerOptions;
import io.vertx.core.http.HttpServerResponse;
import java.util.concurrent.TimeUnit;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * A simulated inference engine: an OpenAI-compatible HTTP server ({@code /v1/completions},
 * {@code /v1/chat/completions} streaming or not, {@code /v1/models}, {@code /health}, and {@code /stats}) over a
 * paged KV pool, computing with the deterministic {@link SimModel} and taking part in P/D through the
 * {@link EngineClient} on Kafka, or through its transfer worker's engine API ({@link EngineApiClient}, {@code engine.api.path})
 * as an engine in another language does.
 *
 * <p>Per request, by its {@code kv_transfer_params}:
 * <ul>
 *   <li><b>prefill</b> ({@code do_remote_decode}): allocate pages, compute the prompt's KV into them (the compute time
 *       of the {@link ComputeModel}'s steps), report {@code PrefillCompleted}, answer with the first token; free the pages when
 *       a {@code ReleaseDecided} names them;</li>
 *   <li><b>decode</b> ({@code do_remote_prefill}): allocate destination pages under a lease, report
 *       {@code DecodeReady} (and heartbeats), wait for {@code KvReady}, then stream the tokens at once while every
 *       received page is verified against the model beside the decode (the answer ends only on verified KV; on
 *       corruption: report a cancel and answer 502, or break the stream) and report {@code DecodeCompleted}; on {@code RecomputeDecided}, compute the prefill here; free the pages on release;</li>
 *   <li><b>colocated</b> (no parameters): prefill and decode here, no events; pages freed at the end.</li>
 * </ul>
 * All request state lives on one Vert.x event loop; KV computation and verification run on worker threads.
 *
 * <p>This class owns the engine's resources (the event loop, the pool, the page allocator, the metrics, the control
 * plane client) and its lifecycle. The routes and request checks are the {@code HttpFront}'s, the requests' P/D flow
 * the {@code JobFlow}'s, the OpenAI-style answers the {@code OpenAiFormat}'s.
 */
public final class SimEngine implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(SimEngine.class);
    static final ObjectMapper JSON = CompletionRequest.json();

    private final SimEngineConfig config;
    private final Vertx vertx;
    private final Context ctx;
    private final KvPool pool;
    private final BlockAllocator allocator;
    private final ComponentMetrics metrics;
    private final JobFlow flow;
    private final HttpFront front;
    private final Lifecycle lifecycle;
    private HttpServer server;
    private volatile EngineControl client;
    private String url;

    private SimEngine(SimEngineConfig config) {
        this.config = config;
        this.lifecycle = new Lifecycle("engine " + config.engineId());
        this.vertx = Vertx.vertx(new VertxOptions().setEventLoopPoolSize(1).setWorkerPoolSize(2).setInternalBlockingPoolSize(2));
        this.pool = config.poolPath() == null ? HostKvPool.allocate(config.geometry()) : HostKvPool.mapFile(config.geometry(), config.poolPath());
        this.allocator = new BlockAllocator(config.geometry().numBlocks());
        this.metrics = ComponentMetrics.create("engine", config.engineId());
        this.ctx = vertx.getOrCreateContext();
        OpenAiFormat format = new OpenAiFormat(config);
        this.flow = new JobFlow(config, vertx, ctx, pool, allocator, metrics, format, this::client);
        this.front = new HttpFront(config, metrics, allocator, flow, format, lifecycle, this::client);
    }

    /** Maps the pool, serves HTTP, then joins the control plane (after the transfer worker announced itself). */
    public static SimEngine start(SimEngineConfig config) throws Exception {
        SimEngine e = new SimEngine(config);
        e.lifecycle.starting();
        try {
            e.open();
        } catch (Exception | Error ex) {
            e.lifecycle.failed(ex);
            e.close();
            throw ex;
        }
        e.lifecycle.running();
        log.atInfo().addKeyValue("engineId", config.engineId()).addKeyValue("role", config.role()).addKeyValue("url", e.url)
                .addKeyValue("pool", e.pool).addKeyValue("instanceEpoch", e.client == null ? 0 : e.client.instanceEpoch())
                .log(e.client == null ? "engine ready (standalone: colocated requests only)" : "engine ready");
        return e;
    }

    private void open() throws Exception {
        CompletableFutureBridge<HttpServer> started = new CompletableFutureBridge<>();
        ctx.runOnContext(v -> vertx.createHttpServer(new HttpServerOptions().setHost(config.httpHost()).setPort(config.httpPort())
                        .setMaxInitialLineLength(8192).setIdleTimeout(0))
                .requestHandler(front::handle).listen().onComplete(started::complete));
        server = started.get();
        url = config.advertisedUrl() != null ? config.advertisedUrl() : "http://" + config.httpHost() + ":" + server.actualPort();
        if (config.control() != null) {
            EngineClient.Identity id = new EngineClient.Identity(config.role(), config.model(), url, config.geometry(), 0, config.tpSize(),
                    pool.memoryRegions());
            client = EngineClient.start(config.control(), id, flow.decisions(), metrics.registry());
        } else if (config.api() != null) {
            SimEngineConfig.ApiJoin api = config.api();
            client = EngineApiClient.connect(api.socket(), new EngineApiClient.Registration(config.engineId(), api.instanceEpoch(), config.role(),
                    config.model(), url, config.geometry().toLayout(0, config.tpSize()),
                    new ApiProtocol.PoolSpec(ApiProtocol.PoolSpec.SHM, config.poolPath().toString(), 0, java.util.List.of()),
                    config.compute().prefixCache() ? new ApiProtocol.BlockHashing("sha256_cbor", config.compute().prefixCacheSeed()) : null),
                    flow.decisions(), api.connectWait());
        }
    }

    public String url() {
        return url;
    }

    /** Tests: where the engine's decisions arrive (releases, outcomes). */
    io.orbitkv.pd.engine.client.DecisionListener decisionsForTests() {
        return flow.decisions();
    }

    /** Tests: the page allocator (what is held). */
    BlockAllocator allocatorForTests() {
        return allocator;
    }

    /** Tests: this engine's control plane from now on (a fake one: partitions, lost acknowledgements). */
    void useControl(EngineControl control) {
        this.client = control;
    }

    public int port() {
        return server.actualPort();
    }

    public SimEngineConfig config() {
        return config;
    }

    /** How the engine takes part in P/D (Kafka or its worker's engine API), or null when it runs standalone. */
    public EngineControl client() {
        return client;
    }

    public BlockAllocator allocator() {
        return allocator;
    }

    // ------------------------------------------------------------------------------------------------ responses

    static void send(HttpServerResponse resp, int status, ObjectNode body) {
        if (resp.ended() || resp.closed()) {
            return;
        }
        resp.setStatusCode(status).putHeader("content-type", "application/json").end(body.toString());
    }

    static void error(HttpServerResponse resp, int status, String message, String type, String param) {
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
        lifecycle.awaitStopped();
    }

    /** Where this engine is in its life ({@code /health} reports it; completions are taken only while running). */
    public Lifecycle.State state() {
        return lifecycle.state();
    }

    /** Announces that the engine left, stops serving, frees the pool. Idempotent. */
    @Override
    public void close() {
        if (!lifecycle.stopping()) {
            return;
        }
        try {
            if (client != null) {
                client.close();
            }
            flow.close();
            try {
                vertx.close().toCompletionStage().toCompletableFuture().get(10, TimeUnit.SECONDS);
            } catch (Exception e) {
                log.atWarn().log("vert.x did not stop cleanly: " + e);
            }
            pool.close();
            metrics.close();
            log.atInfo().addKeyValue("engineId", config.engineId()).log("engine stopped");
        } finally {
            lifecycle.stopped();
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
