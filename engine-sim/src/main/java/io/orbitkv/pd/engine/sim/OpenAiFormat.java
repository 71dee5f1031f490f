package io.orbitkv.pd.engine.sim;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.engine.client.http.KvTransferParams;
import io.vertx.core.http.HttpServerResponse;

/**
 * The engine's answers as an OpenAI-compatible server writes them: {@code /v1/models}, a whole completion or chat
 * completion, and the chunks of a streamed one as server-sent events ({@code data: <json>}, ended by
 * {@code data: [DONE]}), each with OrbitKV's {@code orbitkv} extension (how the request was served, where its time
 * went) and, for a prefill, the {@code kv_transfer_params} the decode engine needs. Renders only: what to answer and
 * when is the {@link JobFlow}'s.
 */
final class OpenAiFormat {

    private static final ObjectMapper JSON = SimEngine.JSON;

    private final SimEngineConfig config;

    OpenAiFormat(SimEngineConfig config) {
        this.config = config;
    }

    /** {@code /v1/models}: the one model this engine serves. */
    ObjectNode models() {
        ObjectNode root = JSON.createObjectNode().put("object", "list");
        root.putArray("data").addObject().put("id", config.model()).put("object", "model").put("created", 0).put("owned_by", "orbitkv-sim")
                .put("max_model_len", config.maxPromptTokens());
        return root;
    }

    /** A whole answer: every token of {@code out}, usage and the {@code orbitkv} extension. */
    ObjectNode answer(Job job, int[] out) {
        ObjectNode json = completion(job, out);
        orbitkv(json, job);
        return json;
    }

    /** A prefill's answer: its first token, and where the decode engine finds the KV ({@code kv_transfer_params}). */
    ObjectNode prefillAnswer(Job job, int first, int[] blocks, long instanceEpoch) {
        ObjectNode out = completion(job, new int[] {first});
        ObjectNode params = out.putObject(KvTransferParams.FIELD);
        params.put("request_id", job.rid).put("do_remote_prefill", true).put("do_remote_decode", false)
                .put("remote_engine_id", config.engineId()).put("remote_instance_epoch", instanceEpoch);
        ArrayNode ids = params.putArray("remote_block_ids");
        for (int b : blocks) {
            ids.add(b);
        }
        orbitkv(out, job);
        return out;
    }

    /** A chat stream's first chunk: the assistant's role, no content yet. */
    ObjectNode roleChunk(Job job) {
        ObjectNode first = chunk(job);
        first.withArray("choices").addObject().put("index", 0).putNull("finish_reason").putObject("delta").put("role", "assistant")
                .put("content", "");
        return first;
    }

    /** One streamed token; the last one carries the finish reason and the {@code orbitkv} extension. */
    ObjectNode tokenChunk(Job job, int token, boolean last) {
        ObjectNode c = chunk(job);
        ObjectNode choice = c.withArray("choices").addObject().put("index", 0);
        String text = " " + SimModel.word(token);
        if (job.chat()) {
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
        return c;
    }

    /** The usage chunk after the last token ({@code stream_options.include_usage}). */
    ObjectNode usageChunk(Job job, int completionTokens) {
        ObjectNode u = chunk(job);
        u.putArray("choices");
        usage(u, job.tokens.length, completionTokens);
        return u;
    }

    /** Starts an event stream: status and headers go out with the first event. */
    static void startStream(HttpServerResponse resp) {
        resp.setStatusCode(200).putHeader("content-type", "text/event-stream").putHeader("cache-control", "no-cache").setChunked(true);
    }

    /** One server-sent event, unless the client is gone or the stream ended. */
    static void event(HttpServerResponse resp, ObjectNode chunk) {
        if (!resp.closed() && !resp.ended()) {
            resp.write("data: " + chunk + "\n\n");
        }
    }

    static void endStream(HttpServerResponse resp) {
        resp.end("data: [DONE]\n\n");
    }

    private ObjectNode chunk(Job job) {
        boolean chat = job.chat();
        return JSON.createObjectNode().put("id", (chat ? "chatcmpl-" : "cmpl-") + job.rid).put("object", chat ? "chat.completion.chunk" : "text_completion")
                .put("created", System.currentTimeMillis() / 1000).put("model", config.model());
    }

    private ObjectNode completion(Job job, int[] out) {
        boolean chat = job.chat();
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
}
