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
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericRecord;

/**
 * Decodes {@code orbitkv.kv-events} records for the index: only what it keys by. A {@code BlockStored} carries its
 * blocks' token ids (16 per block, as vLLM's do), and decoding them one boxed {@code Integer} at a time was most of the
 * feed's cost (docs/bench/kv-index.md); a reader schema without {@code token_ids} and {@code extra_keys} lets Avro skip
 * them. The events it returns have no token ids (the worker checked them at the engine API). Thread-safe: the serde's
 * readers are cached per writer and shared.
 *
 * <p>A record written in this build's layout is read by {@link Wire} in one pass over its bytes, with every length checked
 * as it is met: the serde's general read walks the bytes twice (the length checks, then Avro's reader) and was ~3/4 of
 * the feed's time per event (docs/bench/kv-index.md). Anything {@code Wire} finds irregular — a length past the end, a
 * union branch out of range, an int out of range, trailing bytes, an array written in sized blocks — goes to the general
 * read, which either decodes it or names what was wrong, so both paths accept and refuse the same records.
 */
public final class KvEventDecoder {

    /** {@code KvCacheEvent} without {@code BlockStored.token_ids} and {@code .extra_keys}. */
    static final Schema PROJECTION = projection();

    private final AvroEventSerde<KvCacheEvent> serde;
    /** The layout (parsing form) of this build's {@code KvCacheEvent}: the one {@link Wire} reads. */
    private static final long CURRENT = SchemaNormalization.parsingFingerprint64(KvCacheEvent.getClassSchema());
    /** Per writer schema (the wire format's cached instances), whether it is laid out as {@link #CURRENT}. */
    private final java.util.Map<Schema, Boolean> layouts = new java.util.concurrent.ConcurrentHashMap<>();

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
        AvroEventSerde.Payload at = serde.payload(topic, value);
        if (layouts.computeIfAbsent(at.writer(), w -> SchemaNormalization.parsingFingerprint64(w) == CURRENT)) {
            KvCacheEvent fast = Wire.read(value, at.start());
            if (fast != null) {
                return fast;
            }
        }
        return general(topic, value);
    }

    /** The serde's general read through {@link #PROJECTION}: what every record not read by {@link Wire} takes. */
    KvCacheEvent general(String topic, byte[] value) {
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

    /** One pass over a {@code KvCacheEvent} in {@link #CURRENT}'s layout; null where anything is irregular. */
    static final class Wire {
        /** Thrown where the bytes are irregular; no stack (the general read reports). */
        private static final RuntimeException IRREGULAR = new RuntimeException("irregular", null, false, false) { };

        private final byte[] b;
        private int pos;

        private Wire(byte[] b, int start) {
            this.b = b;
            this.pos = start;
        }

        static KvCacheEvent read(byte[] value, int start) {
            Wire w = new Wire(value, start);
            try {
                KvCacheEvent e = w.event();
                return w.pos == value.length ? e : null;
            } catch (RuntimeException irregular) {
                return null; // IRREGULAR, or anything a forged record makes a builder throw: the general read says what
            }
        }

        private KvCacheEvent event() {
            String engineId = string();
            long epoch = varLong();
            long seq = varLong();
            long time = varLong();
            Object payload = switch (branch(3)) {
                case 0 -> {
                    List<ByteBuffer> hashes = byteArrays();
                    ByteBuffer parent = branch(2) == 0 ? null : bytes();
                    skipInts(); // token_ids: not kept (the class comment)
                    int blockSize = int32();
                    Integer lora = branch(2) == 0 ? null : int32();
                    String medium = branch(2) == 0 ? null : string();
                    String loraName = branch(2) == 0 ? null : string();
                    if (branch(2) == 1) { // extra_keys: array of [null, array of string]
                        for (long seen = 0, n = count(0); n > 0; seen += n, n = count(seen)) {
                            for (long i = 0; i < n; i++) {
                                if (branch(2) == 1) {
                                    for (long seenKeys = 0, m = count(0); m > 0; seenKeys += m, m = count(seenKeys)) {
                                        for (long j = 0; j < m; j++) {
                                            skipSized();
                                        }
                                    }
                                }
                            }
                        }
                    }
                    yield BlockStored.newBuilder().setBlockHashes(hashes).setParentBlockHash(parent).setTokenIds(List.of())
                            .setBlockSize(blockSize).setLoraId(lora).setMedium(medium).setLoraName(loraName).build();
                }
                case 1 -> {
                    List<ByteBuffer> hashes = byteArrays();
                    String medium = branch(2) == 0 ? null : string();
                    yield BlockRemoved.newBuilder().setBlockHashes(hashes).setMedium(medium).build();
                }
                default -> AllBlocksCleared.newBuilder().setReason(string()).build();
            };
            return KvCacheEvent.newBuilder().setEngineId(engineId).setInstanceEpoch(epoch).setSeq(seq).setEventTimeMs(time)
                    .setPayload(payload).build();
        }

        private long varLong() {
            long raw = 0;
            for (int shift = 0; shift < 64; shift += 7) {
                if (pos >= b.length) {
                    throw IRREGULAR;
                }
                int x = b[pos++];
                raw |= (long) (x & 0x7f) << shift;
                if (x >= 0) {
                    return (raw >>> 1) ^ -(raw & 1);
                }
            }
            throw IRREGULAR;
        }

        private int int32() {
            long v = varLong();
            if (v != (int) v) {
                throw IRREGULAR;
            }
            return (int) v;
        }

        private int branch(int branches) {
            long i = varLong();
            if (i < 0 || i >= branches) {
                throw IRREGULAR;
            }
            return (int) i;
        }

        /**
         * An array block's item count, {@code seen} items before it: 0 ends the array; a sized block (negative count), a
         * count past the end or a collection over the general read's limit is irregular.
         */
        private long count(long seen) {
            long n = varLong();
            if (n < 0 || n > b.length - pos || seen + n > AvroEventSerde.MAX_COLLECTION_ITEMS) {
                throw IRREGULAR;
            }
            return n;
        }

        private int sized() {
            long len = varLong();
            if (len < 0 || len > b.length - pos) {
                throw IRREGULAR;
            }
            return (int) len;
        }

        private void skipSized() {
            int len = sized(); // before pos is read: `pos += sized()` would add to pos as it was before the length
            pos += len;
        }

        private ByteBuffer bytes() {
            int len = sized();
            ByteBuffer h = ByteBuffer.wrap(b, pos, len).slice(); // the record's own bytes: the index reads 8 of them
            pos += len;
            return h;
        }

        private String string() {
            int len = sized();
            String s = new String(b, pos, len, java.nio.charset.StandardCharsets.UTF_8);
            pos += len;
            return s;
        }

        private List<ByteBuffer> byteArrays() {
            List<ByteBuffer> out = new java.util.ArrayList<>();
            for (long seen = 0, n = count(0); n > 0; seen += n, n = count(seen)) {
                for (long i = 0; i < n; i++) {
                    out.add(bytes());
                }
            }
            return out;
        }

        private void skipInts() {
            for (long seen = 0, n = count(0); n > 0; seen += n, n = count(seen)) {
                for (long i = 0; i < n; i++) {
                    int32();
                }
            }
        }
    }
}
