package io.orbitkv.pd.engine.client.http;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * The {@code kv_transfer_params} object of an OpenAI request to an engine in P/D mode — the same field vLLM's KV
 * connectors use. The proxy sends it to both engines under one request id:
 * <ul>
 *   <li>to the prefill engine: {@code do_remote_decode: true} — compute the prompt's KV, report
 *       {@code PrefillCompleted} with the pages, hold them until released, answer with the first token;</li>
 *   <li>to the decode engine: {@code do_remote_prefill: true} — hold destination pages under a lease, report
 *       {@code DecodeReady}, wait for {@code KvReady}, verify, decode.</li>
 * </ul>
 * Without the object (or with both flags false) an engine serves the request colocated: prefill and decode itself,
 * no handoff, no events.
 */
public record KvTransferParams(String requestId, boolean doRemoteDecode, boolean doRemotePrefill, String prefillEngineId, String decodeEngineId) {

    public static final String FIELD = "kv_transfer_params";

    public static KvTransferParams forPrefill(String requestId, String prefillEngineId, String decodeEngineId) {
        return new KvTransferParams(requestId, true, false, prefillEngineId, decodeEngineId);
    }

    public static KvTransferParams forDecode(String requestId, String prefillEngineId, String decodeEngineId) {
        return new KvTransferParams(requestId, false, true, prefillEngineId, decodeEngineId);
    }

    /** Null when the node is absent or null; an error names the field. */
    public static KvTransferParams from(JsonNode node) {
        if (node == null || node.isNull() || node.isMissingNode()) {
            return null;
        }
        if (!node.isObject()) {
            throw new IllegalArgumentException(FIELD + ": must be an object");
        }
        JsonNode rid = node.get("request_id");
        if (rid != null && !rid.isNull() && !rid.isTextual()) {
            throw new IllegalArgumentException(FIELD + ".request_id: must be a string");
        }
        return new KvTransferParams(rid == null || rid.isNull() ? null : rid.asText(), node.path("do_remote_decode").asBoolean(false),
                node.path("do_remote_prefill").asBoolean(false), text(node, "prefill_engine_id"), text(node, "decode_engine_id"));
    }

    private static String text(JsonNode n, String f) {
        JsonNode v = n.get(f);
        return v == null || v.isNull() ? null : v.asText();
    }

    public ObjectNode toJson() {
        ObjectNode o = JsonNodeFactory.instance.objectNode();
        o.put("request_id", requestId).put("do_remote_decode", doRemoteDecode).put("do_remote_prefill", doRemotePrefill);
        if (prefillEngineId != null) {
            o.put("prefill_engine_id", prefillEngineId);
        }
        if (decodeEngineId != null) {
            o.put("decode_engine_id", decodeEngineId);
        }
        return o;
    }

    public boolean colocated() {
        return !doRemoteDecode && !doRemotePrefill;
    }
}
