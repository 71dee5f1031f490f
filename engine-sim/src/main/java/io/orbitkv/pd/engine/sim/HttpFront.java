package io.orbitkv.pd.engine.sim;

import static io.orbitkv.pd.engine.sim.SimEngine.error;
import static io.orbitkv.pd.engine.sim.SimEngine.send;

import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.engine.client.BlockAllocator;
import io.orbitkv.pd.engine.client.EngineControl;
import io.orbitkv.pd.engine.client.http.CompletionRequest;
import io.orbitkv.pd.engine.client.http.KvTransferParams;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.metrics.ComponentMetrics;
import io.orbitkv.pd.runtime.Health;
import io.orbitkv.pd.runtime.Lifecycle;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceHeaders;
import io.vertx.core.buffer.Buffer;
import io.vertx.core.http.HttpMethod;
import io.vertx.core.http.HttpServerRequest;
import java.util.UUID;
import java.util.function.Consumer;
import java.util.function.Supplier;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The engine's HTTP front: the routes ({@code /health}, {@code /v1/models}, {@code /stats}, {@code /metrics},
 * {@code /v1/completions}, {@code /v1/chat/completions}), the body limit, and the checks a completion passes before it
 * becomes a {@link Job}: valid JSON, a prompt within the limit, an engine that is ready, a role that fits its
 * {@code kv_transfer_params}. Accepted completions go to the {@link JobFlow}; bad ones are answered here, with a reason.
 */
final class HttpFront {

    private static final Logger log = LoggerFactory.getLogger(SimEngine.class);

    private final SimEngineConfig config;
    private final ComponentMetrics metrics;
    private final BlockAllocator allocator;
    private final JobFlow flow;
    private final OpenAiFormat format;
    private final Lifecycle lifecycle;
    private final Supplier<EngineControl> client;
    private final CompletionRequest.Limits limits;

    HttpFront(SimEngineConfig config, ComponentMetrics metrics, BlockAllocator allocator, JobFlow flow, OpenAiFormat format, Lifecycle lifecycle,
              Supplier<EngineControl> client) {
        this.config = config;
        this.metrics = metrics;
        this.allocator = allocator;
        this.flow = flow;
        this.format = format;
        this.lifecycle = lifecycle;
        this.client = client;
        this.limits = new CompletionRequest.Limits(config.maxPromptTokens() * 64, 1_000_000, 4096);
    }

    void handle(HttpServerRequest req) {
        long in = Marks.nowMicros();
        String path = req.path();
        try {
            if (req.method() == HttpMethod.GET && path.equals("/health")) {
                boolean up = lifecycle.isRunning();
                send(req.response(), up ? 200 : 503, SimEngine.JSON.createObjectNode().put("status", up ? "ok" : "starting")
                        .put("lifecycle", lifecycle.state().label())
                        .put("engine_id", config.engineId()).put("role", config.role().name().toLowerCase()));
            } else if (req.method() == HttpMethod.GET && Health.probe(path, lifecycle, () -> null) instanceof Health.Answer a) {
                // Running means registered: the engine announces itself (after its worker) before it runs.
                req.response().setStatusCode(a.status()).putHeader("content-type", "application/json").end(a.json());
            } else if (req.method() == HttpMethod.GET && path.equals("/v1/models")) {
                send(req.response(), 200, format.models());
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

    private void readBody(HttpServerRequest req, Consumer<byte[]> then) {
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
        if (!lifecycle.isRunning()) {
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
        req.response().closeHandler(v -> flow.clientGone(job));
        if (kv == null || kv.colocated()) {
            flow.colocated(job);
            return;
        }
        if (client.get() == null) {
            error(job.response, 503, "engine " + config.engineId() + " runs standalone (neither bootstrap.servers nor engine.api.path): it serves colocated requests only",
                    "service_unavailable", KvTransferParams.FIELD);
            return;
        }
        if (kv.doRemoteDecode()) {
            if (config.role() == EngineRole.DECODE) {
                error(job.response, 400, "engine " + config.engineId() + " is a decode engine: it does not prefill for others", "invalid_request_error",
                        KvTransferParams.FIELD);
                return;
            }
            flow.prefill(job);
        } else {
            if (config.role() == EngineRole.PREFILL) {
                error(job.response, 400, "engine " + config.engineId() + " is a prefill engine: it does not decode transferred KV",
                        "invalid_request_error", KvTransferParams.FIELD);
                return;
            }
            flow.decode(job);
        }
    }

    private ObjectNode stats() {
        EngineControl c = client.get();
        JobFlow.Counters counters = flow.counters();
        ObjectNode s = SimEngine.JSON.createObjectNode().put("engine_id", config.engineId()).put("role", config.role().name().toLowerCase())
                .put("served_model", config.model()).put("instance_epoch", c == null ? 0 : c.instanceEpoch())
                .put("blocks_total", allocator.numBlocks()).put("blocks_used", allocator.usedBlocks()).put("holders", allocator.holders())
                .put("in_flight", flow.inFlight()).put("block_bytes", config.geometry().bytesPerBlock());
        s.putObject("requests").put("prefill", counters.prefills.sum()).put("decode", counters.decodes.sum()).put("colocated", counters.colocated.sum())
                .put("recomputed", counters.recomputed.sum());
        s.put("completed", counters.completed.sum()).put("verified_pages", counters.verifiedPages.sum()).put("kv_corrupt", counters.corrupt.sum())
                .put("ended_before_kv", counters.ended.sum()).put("client_gone", counters.clientGone.sum()).put("rejected_no_blocks", counters.rejected.sum())
                .put("releases", counters.released.sum()).put("lease_lost", counters.leaseLost.sum()).put("lease_unconfirmed", counters.leaseUnconfirmed.sum());
        s.set("model", SimEngine.JSON.valueToTree(flow.modelStats()));
        return s;
    }
}
