package io.orbitkv.pd.proxy.routing;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.events.AllBlocksCleared;
import io.orbitkv.pd.events.BlockRemoved;
import io.orbitkv.pd.events.BlockStored;
import io.orbitkv.pd.events.KvCacheEvent;
import io.orbitkv.pd.schemas.AvroEventSerde;
import java.nio.ByteBuffer;
import java.util.List;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericRecord;

/**
 * Decodes {@code orbitkv.kv-events} records for the index: only what it keys by. A {@code BlockStored} carries its
 * blocks' token ids (16 per block, as vLLM's do), and decoding them one boxed {@code Integer} at a time was most of the
 * feed's cost (docs/bench/kv-index.md); a reader schema without {@code token_ids} and {@code extra_keys} lets Avro skip
 * them. The events it returns have no token ids (the worker checked them at the engine API). Thread-safe: the serde's
 * readers are cached per writer and shared.
 */
public final class KvEventDecoder {

    /** {@code KvCacheEvent} without {@code BlockStored.token_ids} and {@code .extra_keys}. */
    static final Schema PROJECTION = projection();

    private final AvroEventSerde<KvCacheEvent> serde;

    public KvEventDecoder(AvroEventSerde<KvCacheEvent> serde) {
        this.serde = serde;
    }

    private static Schema projection() {
        try {
            ObjectMapper json = new ObjectMapper();
            JsonNode root = json.readTree(KvCacheEvent.getClassSchema().toString());
            for (JsonNode f : root.path("fields")) {
                if (f.path("name").asText().equals("payload")) {
                    for (JsonNode branch : f.path("type")) {
                        if (branch.path("name").asText().equals("BlockStored")) {
                            ArrayNode keep = json.createArrayNode();
                            for (JsonNode bf : branch.path("fields")) {
                                String n = bf.path("name").asText();
                                if (!n.equals("token_ids") && !n.equals("extra_keys")) {
                                    keep.add(bf);
                                }
                            }
                            ((ObjectNode) branch).set("fields", keep);
                        }
                    }
                }
            }
            return new Schema.Parser().parse(json.writeValueAsString(root));
        } catch (java.io.IOException e) {
            throw new IllegalStateException("KvCacheEvent's schema cannot be projected: " + e.getMessage(), e);
        }
    }

    /** The event of {@code value} without its token ids; throws {@code EventDecodingException} as the serde does. */
    public KvCacheEvent decode(String topic, byte[] value) {
        GenericRecord r = serde.project(topic, value, PROJECTION);
        GenericRecord p = (GenericRecord) r.get("payload");
        Object payload = switch (p.getSchema().getName()) {
            case "BlockStored" -> BlockStored.newBuilder().setBlockHashes(hashes(p.get("block_hashes")))
                    .setParentBlockHash((ByteBuffer) p.get("parent_block_hash")).setTokenIds(List.of()).setBlockSize((Integer) p.get("block_size"))
                    .setLoraId((Integer) p.get("lora_id")).setMedium(text(p.get("medium"))).setLoraName(text(p.get("lora_name"))).build();
            case "BlockRemoved" -> BlockRemoved.newBuilder().setBlockHashes(hashes(p.get("block_hashes"))).setMedium(text(p.get("medium"))).build();
            default -> AllBlocksCleared.newBuilder().setReason(String.valueOf(p.get("reason"))).build();
        };
        return KvCacheEvent.newBuilder().setEngineId(r.get("engine_id").toString()).setInstanceEpoch((Long) r.get("instance_epoch"))
                .setSeq((Long) r.get("seq")).setEventTimeMs((Long) r.get("event_time_ms")).setPayload(payload).build();
    }

    @SuppressWarnings("unchecked")
    private static List<ByteBuffer> hashes(Object v) {
        return (List<ByteBuffer>) v; // Avro's own array: read once by the index, never changed
    }

    private static String text(Object v) {
        return v == null ? null : v.toString();
    }
}
