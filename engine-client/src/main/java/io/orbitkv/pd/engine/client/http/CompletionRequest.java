package io.orbitkv.pd.engine.client.http;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.StreamReadConstraints;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;

/**
 * An OpenAI {@code /v1/completions} or {@code /v1/chat/completions} request, parsed and validated. Both the proxy
 * (which refuses bad input with 400 and the reason) and the engines use it, so they agree on what a request means.
 * The prompt of a chat request is its messages rendered through the chat template.
 *
 * @param kind         completion or chat
 * @param model        the requested model
 * @param prompt       the prompt text (chat: rendered messages)
 * @param messages     chat messages as (role, content), empty for completions
 * @param maxTokens    tokens to generate
 * @param stream       server-sent events instead of one JSON answer
 * @param includeUsage {@code stream_options.include_usage}
 * @param kv           the P/D parameters, or null (colocated)
 * @param body         the request as sent, for forwarding
 */
public record CompletionRequest(Kind kind, String model, String prompt, List<String[]> messages, int maxTokens, boolean stream, boolean includeUsage,
                                KvTransferParams kv, ObjectNode body) {

    public enum Kind { COMPLETION, CHAT }

    /** Bounds on what is accepted. */
    public record Limits(int maxPromptChars, int maxTokens, int maxMessages) {
        public static Limits defaults() {
            return new Limits(1_000_000, 4096, 1024);
        }
    }

    /** A request that cannot be served, with a message a client can act on and the offending parameter. */
    public static final class Invalid extends Exception {
        private final String param;

        public Invalid(String param, String message) {
            super(message);
            this.param = param;
        }

        public String param() {
            return param;
        }
    }

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Set<String> ROLES = Set.of("system", "developer", "user", "assistant", "tool");

    static {
        JSON.getFactory().setStreamReadConstraints(StreamReadConstraints.builder().maxNestingDepth(64).maxStringLength(16_000_000).build());
    }

    public static ObjectMapper json() {
        return JSON;
    }

    public static CompletionRequest parse(Kind kind, byte[] bytes, Limits limits) throws Invalid {
        if (bytes == null || bytes.length == 0) {
            throw new Invalid(null, "request body is empty: send a JSON object");
        }
        JsonNode root;
        try {
            root = JSON.readTree(bytes);
        } catch (JsonProcessingException e) {
            throw new Invalid(null, "malformed JSON: " + e.getOriginalMessage() + " (line " + e.getLocation().getLineNr() + ", column "
                    + e.getLocation().getColumnNr() + ")");
        } catch (java.io.IOException e) {
            throw new Invalid(null, "cannot read the request body: " + e.getMessage());
        }
        if (root == null || !root.isObject()) {
            throw new Invalid(null, "request body must be a JSON object, got " + (root == null ? "nothing" : root.getNodeType().name().toLowerCase()));
        }
        ObjectNode o = (ObjectNode) root;
        JsonNode model = o.get("model");
        if (model == null || !model.isTextual() || model.asText().isBlank()) {
            throw new Invalid("model", "'model' is required and must be a non-empty string");
        }
        String prompt;
        List<String[]> messages = new ArrayList<>();
        if (kind == Kind.COMPLETION) {
            prompt = completionPrompt(o.get("prompt"));
        } else {
            JsonNode ms = o.get("messages");
            if (ms == null || !ms.isArray() || ms.isEmpty()) {
                throw new Invalid("messages", "'messages' is required and must be a non-empty array");
            }
            if (ms.size() > limits.maxMessages()) {
                throw new Invalid("messages", "too many messages: " + ms.size() + " (limit " + limits.maxMessages() + ")");
            }
            for (int i = 0; i < ms.size(); i++) {
                messages.add(message(ms.get(i), i));
            }
            prompt = chatTemplate(messages);
        }
        if (prompt.isEmpty()) {
            throw new Invalid(kind == Kind.COMPLETION ? "prompt" : "messages", "the prompt is empty");
        }
        if (prompt.length() > limits.maxPromptChars()) {
            throw new Invalid(kind == Kind.COMPLETION ? "prompt" : "messages", "prompt too long: " + prompt.length() + " characters (limit "
                    + limits.maxPromptChars() + ")");
        }
        String tokensField = kind == Kind.CHAT && o.has("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
        int maxTokens = 16;
        JsonNode mt = o.get(tokensField);
        if (mt != null && !mt.isNull()) {
            if (!mt.isIntegralNumber() || !mt.canConvertToInt()) {
                throw new Invalid(tokensField, "'" + tokensField + "' must be an integer");
            }
            maxTokens = mt.asInt();
            if (maxTokens < 1 || maxTokens > limits.maxTokens()) {
                throw new Invalid(tokensField, "'" + tokensField + "' must be 1.." + limits.maxTokens() + ", got " + maxTokens);
            }
        }
        boolean stream = bool(o, "stream");
        JsonNode so = o.get("stream_options");
        boolean usage = false;
        if (so != null && !so.isNull()) {
            if (!so.isObject()) {
                throw new Invalid("stream_options", "'stream_options' must be an object");
            }
            usage = bool((ObjectNode) so, "include_usage");
        }
        JsonNode n = o.get("n");
        if (n != null && !n.isNull() && !(n.isIntegralNumber() && n.asInt() == 1)) {
            throw new Invalid("n", "only n=1 is supported");
        }
        JsonNode temp = o.get("temperature");
        if (temp != null && !temp.isNull() && (!temp.isNumber() || temp.asDouble() < 0 || temp.asDouble() > 2)) {
            throw new Invalid("temperature", "'temperature' must be a number in 0..2");
        }
        KvTransferParams kv;
        try {
            kv = KvTransferParams.from(o.get(KvTransferParams.FIELD));
        } catch (IllegalArgumentException e) {
            throw new Invalid(KvTransferParams.FIELD, e.getMessage());
        }
        return new CompletionRequest(kind, model.asText(), prompt, List.copyOf(messages), maxTokens, stream, usage, kv, o);
    }

    /** The chat template: one {@code <|role|>content} line per message, then {@code <|assistant|>}. */
    public static String chatTemplate(List<String[]> roleAndContent) {
        StringBuilder b = new StringBuilder();
        for (String[] m : roleAndContent) {
            b.append("<|").append(m[0]).append("|>").append(m[1]).append('\n');
        }
        return b.append("<|assistant|>").toString();
    }

    private static String completionPrompt(JsonNode p) throws Invalid {
        if (p == null || p.isNull()) {
            throw new Invalid("prompt", "'prompt' is required");
        }
        if (p.isTextual()) {
            return p.asText();
        }
        if (p.isArray() && p.size() == 1 && p.get(0).isTextual()) {
            return p.get(0).asText();
        }
        if (p.isArray()) {
            throw new Invalid("prompt", "'prompt' must be a string or an array of one string (batches and token arrays are not supported)");
        }
        throw new Invalid("prompt", "'prompt' must be a string");
    }

    private static String[] message(JsonNode m, int i) throws Invalid {
        String at = "messages[" + i + "]";
        if (m == null || !m.isObject()) {
            throw new Invalid(at, at + " must be an object with 'role' and 'content'");
        }
        JsonNode role = m.get("role");
        if (role == null || !role.isTextual() || !ROLES.contains(role.asText())) {
            throw new Invalid(at + ".role", at + ".role must be one of " + ROLES.stream().sorted().toList());
        }
        JsonNode c = m.get("content");
        String content;
        if (c == null || c.isNull()) {
            content = "";
        } else if (c.isTextual()) {
            content = c.asText();
        } else if (c.isArray()) {
            StringBuilder b = new StringBuilder();
            for (JsonNode part : c) {
                if (!part.isObject() || !"text".equals(part.path("type").asText()) || !part.path("text").isTextual()) {
                    throw new Invalid(at + ".content", at + ".content parts must be {\"type\": \"text\", \"text\": ...} (other modalities are not supported)");
                }
                b.append(part.get("text").asText());
            }
            content = b.toString();
        } else {
            throw new Invalid(at + ".content", at + ".content must be a string or an array of text parts");
        }
        return new String[] {role.asText(), content};
    }

    private static boolean bool(ObjectNode o, String f) throws Invalid {
        JsonNode v = o.get(f);
        if (v == null || v.isNull()) {
            return false;
        }
        if (!v.isBoolean()) {
            throw new Invalid(f, "'" + f + "' must be true or false");
        }
        return v.asBoolean();
    }

    /** The body to send upstream: the original with {@code kv_transfer_params}, {@code stream} and {@code max_tokens} replaced. */
    public ObjectNode forward(KvTransferParams params, boolean streamIt, Integer maxTokensOverride) {
        ObjectNode copy = body.deepCopy();
        if (params == null) {
            copy.remove(KvTransferParams.FIELD);
        } else {
            copy.set(KvTransferParams.FIELD, params.toJson());
        }
        copy.put("stream", streamIt);
        if (!streamIt) {
            copy.remove("stream_options");
        }
        if (maxTokensOverride != null) {
            copy.remove("max_completion_tokens");
            copy.put("max_tokens", maxTokensOverride);
        }
        return copy;
    }

    /** The OpenAI error body: {@code {"error": {"message", "type", "param", "code"}}}. */
    public static ObjectNode errorBody(String message, String type, String param, Object code) {
        ObjectNode root = JSON.createObjectNode();
        ObjectNode e = root.putObject("error");
        e.put("message", message).put("type", type);
        if (param == null) {
            e.putNull("param");
        } else {
            e.put("param", param);
        }
        if (code == null) {
            e.putNull("code");
        } else {
            e.put("code", code.toString());
        }
        return root;
    }
}
