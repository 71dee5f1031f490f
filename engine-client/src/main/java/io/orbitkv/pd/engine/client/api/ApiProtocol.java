package io.orbitkv.pd.engine.client.api;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.engine.client.EngineFacts;
import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.events.KvLayout;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.events.MemoryRegion;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.PhaseTimings;
import io.orbitkv.pd.events.RecomputeDecided;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceContext;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Locale;
import java.util.Optional;

/**
 * The messages of the worker's local engine API, version {@value #VERSION} (docs/engine-api.md is the specification):
 * what each op carries, how each is checked (every refusal names the field), and how decisions travel as JSON. Used
 * by the worker's server and by the Java client, so both read and write exactly what the specification says.
 */
public final class ApiProtocol {

    public static final int VERSION = 1;

    // client → worker
    public static final String HELLO = "hello";
    public static final String PREFILL_COMPLETED = "prefill_completed";
    public static final String PREFILL_FAILED = "prefill_failed";
    public static final String DECODE_READY = "decode_ready";
    public static final String DECODE_REJECTED = "decode_rejected";
    public static final String HEARTBEAT = "heartbeat";
    public static final String DECODE_COMPLETED = "decode_completed";
    public static final String CANCEL = "cancel";
    public static final String KV_EVENTS = "kv_events";
    public static final String PREFILL_PROGRESS = "prefill_progress";
    public static final String PING = "ping";
    public static final String BYE = "bye";
    // worker → client
    public static final String WELCOME = "welcome";
    public static final String ACK = "ack";
    public static final String ERROR = "error";
    public static final String PONG = "pong";
    public static final String DECISION = "decision";

    /** Decision kinds as the API names them. */
    public static final String KV_READY = "kv_ready";
    public static final String RELEASE = "release";
    public static final String RECOMPUTE = "recompute";
    public static final String OUTCOME = "outcome";

    private static final int MAX_ID_CHARS = 256;
    private static final int MAX_TEXT_CHARS = 4096;
    private static final int MAX_BLOCKS = 1 << 20;

    private ApiProtocol() {
    }

    // ------------------------------------------------------------------------------------------------ hello

    /** Where the engine's KV pages are, as the hello says: a shared-memory file, device memory by CUDA IPC handle, or the worker's own. */
    public record PoolSpec(String kind, String path, int device, List<MemoryRegion> regions) {
        public static final String SHM = "shm";
        public static final String CUDA_IPC = "cuda_ipc";
    }

    /** Resume the decision stream of worker session {@code session} after {@code afterSeq}. */
    public record Resume(String session, long afterSeq) { }

    /** A checked hello. */
    /**
     * How an engine hashes its prefix-cache blocks ({@code block_hash} in the hello: {@code algorithm}, e.g. sha256_cbor, and
     * the {@code seed} of the first block's parent), announced in its registration so that a router hashes prompts the same
     * way (docs/routing.md).
     */
    public record BlockHashing(String algorithm, String seed) { }

    public record Hello(int version, String engineId, long instanceEpoch, EngineRole role, String model, String httpUrl, KvGeometry geometry,
                        int tpRank, int tpSize, PoolSpec pool, Resume resume, BlockHashing blockHash) {
        public KvLayout layout() {
            return geometry.toLayout(tpRank, tpSize);
        }
    }

    public static Hello parseHello(JsonNode m) throws ApiException {
        int version = (int) integer(m, "version", 1, Integer.MAX_VALUE);
        if (version != VERSION) {
            throw new ApiException(ApiException.UNSUPPORTED_VERSION, "version", "version: this worker speaks engine API version " + VERSION
                    + ", the client asked for " + version);
        }
        String engineId = id(m, "engine_id");
        if (!engineId.matches("[A-Za-z0-9._:-]+")) {
            throw bad("engine_id", "letters, digits, '.', '_', ':' and '-' only, got '" + engineId + "'");
        }
        long epoch = integer(m, "instance_epoch", 1, Long.MAX_VALUE);
        EngineRole role = enumValue(m, "role", EngineRole.class);
        if (role == EngineRole.UNKNOWN) {
            throw bad("role", "must be prefill, decode or both");
        }
        String model = text(m, "model", true);
        String httpUrl = optionalText(m, "http_url").orElse("");
        JsonNode l = m.get("layout");
        if (l == null || !l.isObject()) {
            throw bad("layout", "required: the engine's KV layout (num_layers, kv_split, block_size_tokens, num_kv_heads, head_dim, dtype,"
                    + " page_bytes, num_blocks)");
        }
        KvGeometry g;
        int tpRank = (int) optionalInteger(l, "layout.tp_rank", "tp_rank", 0, 65_535, 0);
        int tpSize = (int) optionalInteger(l, "layout.tp_size", "tp_size", 1, 65_536, 1);
        if (tpRank >= tpSize) {
            throw bad("layout.tp_rank", "must be below layout.tp_size (" + tpSize + "), got " + tpRank);
        }
        try {
            KvSplit split = enumValue(l, "layout.kv_split", "kv_split", KvSplit.class);
            Dtype dtype = enumValue(l, "layout.dtype", "dtype", Dtype.class);
            int block = (int) integer(l, "layout.block_size_tokens", "block_size_tokens", 1, Integer.MAX_VALUE);
            int heads = (int) integer(l, "layout.num_kv_heads", "num_kv_heads", 1, Integer.MAX_VALUE);
            int headDim = (int) integer(l, "layout.head_dim", "head_dim", 1, Integer.MAX_VALUE);
            long defaultPage = (long) block * heads * headDim * KvGeometry.dtypeBytes(dtype);
            int page = (int) optionalInteger(l, "layout.page_bytes", "page_bytes", 1, Integer.MAX_VALUE,
                    defaultPage > 0 && defaultPage <= Integer.MAX_VALUE ? defaultPage : 0);
            g = new KvGeometry((int) integer(l, "layout.num_layers", "num_layers", 1, Integer.MAX_VALUE), split, block, heads, headDim, dtype, page,
                    (int) integer(l, "layout.num_blocks", "num_blocks", 1, Integer.MAX_VALUE));
        } catch (IllegalArgumentException e) {
            String msg = e.getMessage();
            int colon = msg.indexOf(':');
            throw new ApiException(ApiException.BAD_REQUEST, colon > 0 ? msg.substring(0, colon) : "layout", msg);
        }
        PoolSpec pool = null;
        JsonNode p = m.get("pool");
        if (p != null && !p.isNull()) {
            if (!p.isObject()) {
                throw bad("pool", "must be an object: {\"kind\": \"shm\", \"path\": ...} or {\"kind\": \"cuda_ipc\", \"device\": ..., \"regions\": [...]}");
            }
            String kind = text(p, "pool.kind", "kind", false);
            pool = switch (kind) {
                case PoolSpec.SHM -> new PoolSpec(kind, text(p, "pool.path", "path", false), 0, List.of());
                case PoolSpec.CUDA_IPC -> new PoolSpec(kind, null, (int) optionalInteger(p, "pool.device", "device", 0, 1024, 0),
                        regions(p.get("regions")));
                default -> throw bad("pool.kind", "must be shm or cuda_ipc, got '" + kind + "'");
            };
        }
        Resume resume = null;
        JsonNode r = m.get("resume");
        if (r != null && !r.isNull()) {
            if (!r.isObject()) {
                throw bad("resume", "must be an object {\"session\": ..., \"after_seq\": ...}");
            }
            resume = new Resume(text(r, "resume.session", "session", false), integer(r, "resume.after_seq", "after_seq", 0, Long.MAX_VALUE));
        }
        BlockHashing blockHash = null;
        JsonNode bh = m.get("block_hash");
        if (bh != null && !bh.isNull()) {
            if (!bh.isObject()) {
                throw bad("block_hash", "must be an object {algorithm, seed}");
            }
            blockHash = new BlockHashing(text(bh, "block_hash.algorithm", "algorithm", false), text(bh, "block_hash.seed", "seed", true));
        }
        return new Hello(version, engineId, epoch, role, model, httpUrl, g, tpRank, tpSize, pool, resume, blockHash);
    }

    private static List<MemoryRegion> regions(JsonNode a) throws ApiException {
        if (a == null || !a.isArray() || a.isEmpty()) {
            throw bad("pool.regions", "required for cuda_ipc: one {layer, part, length_bytes, ipc_handle (base64)} per region, layer-major");
        }
        List<MemoryRegion> out = new ArrayList<>();
        for (int i = 0; i < a.size(); i++) {
            JsonNode e = a.get(i);
            String at = "pool.regions[" + i + "]";
            if (!e.isObject()) {
                throw bad(at, "must be an object");
            }
            byte[] handle;
            try {
                handle = Base64.getDecoder().decode(text(e, at + ".ipc_handle", "ipc_handle", false));
            } catch (IllegalArgumentException x) {
                throw bad(at + ".ipc_handle", "must be base64 (the 64 bytes of a CUDA IPC memory handle)");
            }
            out.add(MemoryRegion.newBuilder().setLayer((int) integer(e, at + ".layer", "layer", 0, Integer.MAX_VALUE))
                    .setPart(text(e, at + ".part", "part", false)).setBaseAddress(0)
                    .setLengthBytes(integer(e, at + ".length_bytes", "length_bytes", 1, Long.MAX_VALUE))
                    .setLocation("cuda:" + optionalInteger(e, at + ".device", "device", 0, 1024, 0)).setIpcHandle(ByteBuffer.wrap(handle))
                    .build());
        }
        return out;
    }

    /** The hello a client sends (the Java client; other languages write the same JSON). */
    public static ObjectNode hello(String engineId, long instanceEpoch, EngineRole role, String model, String httpUrl, KvLayout layout, PoolSpec pool,
                                   Resume resume) {
        return hello(engineId, instanceEpoch, role, model, httpUrl, layout, pool, resume, null);
    }

    public static ObjectNode hello(String engineId, long instanceEpoch, EngineRole role, String model, String httpUrl, KvLayout layout, PoolSpec pool,
                                   Resume resume, BlockHashing blockHash) {
        ObjectNode m = ApiFrames.object().put("op", HELLO).put("version", VERSION).put("engine_id", engineId).put("instance_epoch", instanceEpoch)
                .put("role", lower(role)).put("model", model).put("http_url", httpUrl);
        m.putObject("layout").put("num_layers", layout.getNumLayers()).put("kv_split", lower(layout.getKvSplit()))
                .put("block_size_tokens", layout.getBlockSizeTokens()).put("num_kv_heads", layout.getNumKvHeads()).put("head_dim", layout.getHeadDim())
                .put("dtype", lower(layout.getDtype())).put("page_bytes", layout.getPageBytes()).put("num_blocks", layout.getNumBlocks())
                .put("tp_rank", layout.getTpRank()).put("tp_size", layout.getTpSize());
        if (pool != null) {
            ObjectNode p = m.putObject("pool").put("kind", pool.kind());
            if (PoolSpec.SHM.equals(pool.kind())) {
                p.put("path", pool.path());
            } else {
                p.put("device", pool.device());
                ArrayNode regions = p.putArray("regions");
                for (MemoryRegion r : pool.regions()) {
                    ByteBuffer h = r.getIpcHandle().duplicate();
                    byte[] b = new byte[h.remaining()];
                    h.get(b);
                    regions.addObject().put("layer", r.getLayer()).put("part", r.getPart()).put("length_bytes", r.getLengthBytes())
                            .put("ipc_handle", Base64.getEncoder().encodeToString(b));
                }
            }
        }
        if (resume != null) {
            m.putObject("resume").put("session", resume.session()).put("after_seq", resume.afterSeq());
        }
        if (blockHash != null) {
            m.putObject("block_hash").put("algorithm", blockHash.algorithm()).put("seed", blockHash.seed());
        }
        return m;
    }

    // ------------------------------------------------------------------------------------------------ facts

    /** A checked fact: the client's correlation id, the fact, and the trace and timing it carried. */
    public record FactRequest(long id, EngineFacts.Fact fact, TraceContext trace, Marks marks) { }

    /**
     * Reads fact op {@code op} for an engine registered with {@code facts}, {@code instanceEpoch} and {@code layout}
     * (block ids are checked against its pool).
     */
    public static FactRequest parseFact(String op, JsonNode m, EngineFacts facts, long instanceEpoch, KvLayout layout) throws ApiException {
        long id = integer(m, "id", 0, Long.MAX_VALUE);
        String rid = id(m, "request_id");
        EngineFacts.Fact f = switch (op) {
            case PREFILL_COMPLETED -> facts.prefillCompleted(rid, instanceEpoch, blocks(m, "source_blocks", layout.getNumBlocks()),
                    (int) integer(m, "num_tokens", 1, Integer.MAX_VALUE), m.hasNonNull("first_token") ? (Integer) (int) integer(m, "first_token", 0, Integer.MAX_VALUE) : null, layout);
            case PREFILL_FAILED -> facts.prefillFailed(rid, instanceEpoch, text(m, "reason", true), bool(m, "retriable"));
            case DECODE_READY -> {
                int[] dest = blocks(m, "dest_blocks", layout.getNumBlocks());
                // the prompt's first blocks in the engine's prefix cache: at least one block must still move
                int cached = m.hasNonNull("cached_blocks") ? (int) integer(m, "cached_blocks", 0, Math.max(0, dest.length - 1)) : 0;
                yield facts.decodeReady(rid, instanceEpoch, id(m, "lease_id"), integer(m, "lease_epoch", 0, Long.MAX_VALUE), dest,
                        integer(m, "lease_deadline_ms", 1, Long.MAX_VALUE), layout, cached);
            }
            case DECODE_REJECTED -> facts.decodeRejected(rid, instanceEpoch, text(m, "reason", true));
            case HEARTBEAT -> facts.heartbeat(rid, id(m, "lease_id"), integer(m, "lease_epoch", 0, Long.MAX_VALUE),
                    integer(m, "extend_to_ms", 1, Long.MAX_VALUE), (int) integer(m, "seq", 0, Integer.MAX_VALUE));
            case DECODE_COMPLETED -> facts.decodeCompleted(rid, (int) integer(m, "output_tokens", 0, Integer.MAX_VALUE), bool(m, "recomputed"));
            case CANCEL -> facts.cancel(rid, text(m, "reason", true));
            default -> throw new ApiException(ApiException.UNKNOWN_OP, "op", "op: unknown op '" + op + "'");
        };
        TraceContext trace = null;
        Optional<String> tp = optionalText(m, "traceparent");
        if (tp.isPresent()) {
            trace = TraceContext.parse(tp.get()).orElseThrow(() -> bad("traceparent", "not a W3C traceparent (00-<32 hex>-<16 hex>-<2 hex>)"));
        }
        Marks marks = Marks.empty();
        Optional<String> timing = optionalText(m, "timing");
        if (timing.isPresent() && !timing.get().isEmpty()) {
            marks = Marks.parse(timing.get());
            if (marks.isEmpty()) {
                throw bad("timing", "must be name=micros pairs separated by commas (names a-z 0-9 _ .), got '" + timing.get() + "'");
            }
        }
        return new FactRequest(id, f, trace, marks);
    }

    // ------------------------------------------------------------------------------------------------ prefill progress

    /**
     * How far a prefill has come, layer by layer (docs/engine-api.md, "Prefill progress"): the prompt's tokens
     * {@code [0, doneTokens)} are computed in every layer, and {@code [doneTokens, chunkEnd)} — the chunk being computed —
     * in layers {@code [0, layers)}. {@code sourceBlocks}: the pages the prompt's KV is written into, in token order
     * (required in a request's first progress, optional after: null when absent).
     */
    public record PrefillProgress(String requestId, int[] sourceBlocks, int numTokens, int doneTokens, int chunkEnd, int layers) {
        /** Whether prompt block {@code block} (of {@code blockTokens} tokens) is complete in layer {@code layer}. */
        public boolean complete(int block, int blockTokens, int layer) {
            long end = Math.min((long) (block + 1) * blockTokens, numTokens);
            return end <= doneTokens || (end <= chunkEnd && layer < layers);
        }

        /**
         * Whether this report says more than {@code earlier}: everything it says is computed and something besides — the
         * order a prefill's reports come in (an older one, late or reordered, does not).
         */
        public boolean advances(PrefillProgress earlier) {
            boolean covers = doneTokens >= earlier.chunkEnd
                    || (doneTokens >= earlier.doneTokens && chunkEnd >= earlier.chunkEnd && layers >= earlier.layers);
            return covers && (doneTokens != earlier.doneTokens || chunkEnd != earlier.chunkEnd || layers != earlier.layers);
        }
    }

    /** Reads a {@code prefill_progress} message of an engine registered with {@code layout}. */
    public static PrefillProgress parseProgress(JsonNode m, KvLayout layout) throws ApiException {
        String rid = id(m, "request_id");
        int numTokens = (int) integer(m, "num_tokens", 1, Integer.MAX_VALUE);
        int done = (int) integer(m, "done_tokens", 0, numTokens);
        int chunkEnd = (int) integer(m, "chunk_end", done, numTokens);
        int layers = (int) integer(m, "layers", 0, layout.getNumLayers());
        int[] blocks = null;
        if (m.hasNonNull("source_blocks")) {
            blocks = blocks(m, "source_blocks", layout.getNumBlocks());
            long needed = ((long) numTokens + layout.getBlockSizeTokens() - 1) / layout.getBlockSizeTokens();
            if (blocks.length < needed) {
                throw bad("source_blocks", numTokens + " tokens need " + needed + " blocks of " + layout.getBlockSizeTokens() + ", got "
                        + blocks.length);
            }
        }
        return new PrefillProgress(rid, blocks, numTokens, done, chunkEnd, layers);
    }

    /** Most events in one {@code kv_events} message, and most block hashes in one event. */
    static final int MAX_KV_EVENTS = 4096;
    static final int MAX_EVENT_BLOCKS = 65_536;

    /**
     * A checked {@code kv_events} message: the client's correlation id and the events in order, each a {@code BlockStored},
     * {@code BlockRemoved} or {@code AllBlocksCleared} with the engine's own sequence number (from 1 per instance, no gaps:
     * a message sent again after a reconnect carries the same numbers, so readers drop the repeats).
     */
    public record KvEventsRequest(long id, List<KvEvent> events) { }

    /** One event of an engine's KV cache: its sequence number and the payload. */
    public record KvEvent(long seq, Object payload) { }

    /**
     * Reads a {@code kv_events} message ({@code events}: an array of {@code {seq, type: stored|removed|cleared, ...}}, vLLM's
     * fields; hashes as hex strings). A stored event's {@code block_size} must be the engine's ({@code blockSizeTokens}) and
     * its token ids exactly {@code block_size} per hash.
     */
    public static KvEventsRequest parseKvEvents(JsonNode m, int blockSizeTokens) throws ApiException {
        long id = integer(m, "id", 0, Long.MAX_VALUE);
        JsonNode arr = m.get("events");
        if (arr == null || !arr.isArray() || arr.isEmpty()) {
            throw bad("events", "required: a non-empty array of KV cache events");
        }
        if (arr.size() > MAX_KV_EVENTS) {
            throw bad("events", "at most " + MAX_KV_EVENTS + " events in one message, got " + arr.size());
        }
        List<KvEvent> out = new java.util.ArrayList<>(arr.size());
        for (int i = 0; i < arr.size(); i++) {
            JsonNode e = arr.get(i);
            String at = "events[" + i + "]";
            if (!e.isObject()) {
                throw bad(at, "must be an object");
            }
            long seq = integer(e, at + ".seq", "seq", 1, Long.MAX_VALUE);
            String type = text(e, at + ".type", "type", false);
            Object payload = switch (type) {
                case "stored" -> {
                    List<java.nio.ByteBuffer> hashes = hashes(e, at);
                    int size = (int) integer(e, at + ".block_size", "block_size", 1, Integer.MAX_VALUE);
                    if (size != blockSizeTokens) {
                        throw bad(at + ".block_size", "must be the engine's block size (" + blockSizeTokens + " tokens), got " + size);
                    }
                    JsonNode tok = e.get("token_ids");
                    if (tok == null || !tok.isArray() || tok.size() != (long) hashes.size() * size) {
                        throw bad(at + ".token_ids", "must hold block_size token ids per block hash (" + (long) hashes.size() * size + "), got "
                                + (tok == null || !tok.isArray() ? "none" : tok.size()));
                    }
                    List<Integer> ids = new java.util.ArrayList<>(tok.size());
                    for (int k = 0; k < tok.size(); k++) {
                        ids.add((int) checkInteger(tok.get(k), at + ".token_ids[" + k + "]", 0, Integer.MAX_VALUE));
                    }
                    io.orbitkv.pd.events.BlockStored.Builder b = io.orbitkv.pd.events.BlockStored.newBuilder().setBlockHashes(hashes)
                            .setTokenIds(ids).setBlockSize(size).setParentBlockHash(e.hasNonNull("parent_block_hash")
                                    ? hash(e.get("parent_block_hash"), at + ".parent_block_hash") : null)
                            .setMedium(optionalText(e, "medium").orElse(null)).setLoraName(optionalText(e, "lora_name").orElse(null));
                    if (e.hasNonNull("lora_id")) {
                        b.setLoraId((int) integer(e, at + ".lora_id", "lora_id", 0, Integer.MAX_VALUE));
                    }
                    yield b.build();
                }
                case "removed" -> io.orbitkv.pd.events.BlockRemoved.newBuilder().setBlockHashes(hashes(e, at))
                        .setMedium(optionalText(e, "medium").orElse(null)).build();
                case "cleared" -> io.orbitkv.pd.events.AllBlocksCleared.newBuilder().setReason("reset").build();
                default -> throw bad(at + ".type", "must be stored, removed or cleared, got '" + abbreviate(type) + "'");
            };
            if (!out.isEmpty() && seq != out.get(out.size() - 1).seq() + 1) {
                throw bad(at + ".seq", "must follow the previous event's (" + out.get(out.size() - 1).seq() + ") without a gap, got " + seq);
            }
            out.add(new KvEvent(seq, payload));
        }
        return new KvEventsRequest(id, out);
    }

    /** Writes KV cache event {@code payload} into {@code e} as {@link #parseKvEvents} reads it (hex hashes). */
    public static void kvEvent(ObjectNode e, Object payload) {
        java.util.HexFormat hex = java.util.HexFormat.of();
        switch (payload) {
            case io.orbitkv.pd.events.BlockStored b -> {
                e.put("type", "stored").put("block_size", b.getBlockSize());
                ArrayNode h = e.putArray("block_hashes");
                b.getBlockHashes().forEach(x -> h.add(hex.formatHex(bytes(x))));
                ArrayNode t = e.putArray("token_ids");
                b.getTokenIds().forEach(t::add);
                if (b.getParentBlockHash() != null) {
                    e.put("parent_block_hash", hex.formatHex(bytes(b.getParentBlockHash())));
                }
                if (b.getLoraName() != null) {
                    e.put("lora_name", b.getLoraName());
                }
                if (b.getMedium() != null) {
                    e.put("medium", b.getMedium());
                }
            }
            case io.orbitkv.pd.events.BlockRemoved r -> {
                e.put("type", "removed");
                ArrayNode h = e.putArray("block_hashes");
                r.getBlockHashes().forEach(x -> h.add(hex.formatHex(bytes(x))));
            }
            case io.orbitkv.pd.events.AllBlocksCleared c -> e.put("type", "cleared");
            default -> throw new IllegalArgumentException("not a KV cache event: " + payload);
        }
    }

    private static byte[] bytes(java.nio.ByteBuffer b) {
        byte[] out = new byte[b.remaining()];
        b.duplicate().get(out);
        return out;
    }

    private static List<java.nio.ByteBuffer> hashes(JsonNode e, String at) throws ApiException {
        JsonNode h = e.get("block_hashes");
        if (h == null || !h.isArray() || h.isEmpty()) {
            throw bad(at + ".block_hashes", "required: a non-empty array of block hashes (hex)");
        }
        if (h.size() > MAX_EVENT_BLOCKS) {
            throw bad(at + ".block_hashes", "at most " + MAX_EVENT_BLOCKS + " hashes in one event, got " + h.size());
        }
        List<java.nio.ByteBuffer> out = new java.util.ArrayList<>(h.size());
        for (int k = 0; k < h.size(); k++) {
            out.add(hash(h.get(k), at + ".block_hashes[" + k + "]"));
        }
        return out;
    }

    /** A block hash: 1 to 64 bytes as an even number of hex digits (vLLM's are 32-byte SHA-256 digests). */
    private static java.nio.ByteBuffer hash(JsonNode n, String path) throws ApiException {
        if (!n.isTextual()) {
            throw bad(path, "must be a hex string");
        }
        String s = n.asText();
        if (s.isEmpty() || s.length() > 128 || s.length() % 2 != 0) {
            throw bad(path, "must be 1 to 64 bytes as hex, got " + s.length() + " hex digits");
        }
        try {
            return java.nio.ByteBuffer.wrap(java.util.HexFormat.of().parseHex(s));
        } catch (IllegalArgumentException ex) {
            throw bad(path, "not hex: '" + abbreviate(s) + "'");
        }
    }

    /** Whether {@code op} is one of the facts. */
    public static boolean isFact(String op) {
        return switch (op) {
            case PREFILL_COMPLETED, PREFILL_FAILED, DECODE_READY, DECODE_REJECTED, HEARTBEAT, DECODE_COMPLETED, CANCEL -> true;
            default -> false;
        };
    }

    public static ObjectNode ack(long id, String eventId) {
        return ApiFrames.object().put("op", ACK).put("id", id).put("event_id", eventId);
    }

    public static ObjectNode error(Long id, ApiException e) {
        ObjectNode m = ApiFrames.object().put("op", ERROR);
        if (id != null) {
            m.put("id", id);
        }
        m.put("code", e.code());
        if (e.field() != null) {
            m.put("field", e.field());
        }
        if (e.minInstanceEpoch() > 0) {
            m.put("min_instance_epoch", e.minInstanceEpoch());
        }
        return m.put("message", e.getMessage());
    }

    /** The id of a message, when it carries a usable one (for the error answering it). */
    public static Long idOf(JsonNode m) {
        JsonNode id = m.get("id");
        return id != null && id.canConvertToLong() && id.isIntegralNumber() ? id.asLong() : null;
    }

    // ------------------------------------------------------------------------------------------------ decisions

    /**
     * One decision for the engine as a frame: its kind and fields, the worker's sequence number {@code seq}, the
     * decider's {@code traceparent} and timing marks, and when the worker read it ({@code worker_us}).
     */
    public static ObjectNode decision(Decision d, long seq, TraceContext trace, Marks marks, long workerMicros) {
        ObjectNode m = ApiFrames.object().put("op", DECISION).put("seq", seq).put("decision_id", d.getDecisionId()).put("request_id", d.getRequestId())
                .put("decider_seq", d.getSeq()).put("stream_time_ms", d.getStreamTimeMs());
        switch (d.getPayload()) {
            case KvReady k -> {
                m.put("kind", KV_READY).put("order_id", k.getOrderId()).put("bytes", k.getBytes()).put("decode_engine_id", k.getDecodeEngineId());
                if (k.getFirstToken() != null) {
                    m.put("first_token", k.getFirstToken().intValue());
                }
            }
            case ReleaseDecided r -> {
                m.put("kind", RELEASE).put("engine_id", r.getEngineId()).put("side", lower(r.getSide())).put("reason", r.getReason());
                ArrayNode runs = m.putArray("blocks");
                for (BlockRun b : r.getBlocks()) {
                    runs.addArray().add(b.getStart()).add(b.getCount());
                }
                if (r.getLeaseId() != null) {
                    m.put("lease_id", r.getLeaseId());
                }
                if (r.getLeaseEpoch() != null) {
                    m.put("lease_epoch", r.getLeaseEpoch());
                }
            }
            case RecomputeDecided r -> m.put("kind", RECOMPUTE).put("decode_engine_id", r.getDecodeEngineId()).put("reason", r.getReason());
            case RequestOutcome o -> {
                m.put("kind", OUTCOME).put("outcome", lower(o.getKind())).put("reason", o.getReason()).put("attempts", o.getAttempts())
                        .put("kv_bytes", o.getKvBytes());
                if (o.getPrefillEngineId() != null) {
                    m.put("prefill_engine_id", o.getPrefillEngineId());
                }
                if (o.getDecodeEngineId() != null) {
                    m.put("decode_engine_id", o.getDecodeEngineId());
                }
            }
            default -> throw new IllegalArgumentException("not a decision for an engine: " + d.getPayload().getClass().getSimpleName());
        }
        if (trace != null) {
            m.put("traceparent", trace.format());
        }
        if (marks != null && !marks.isEmpty()) {
            m.put("timing", marks.format());
        }
        return m.put("worker_us", workerMicros);
    }

    /** Whether the engine (not its worker) acts on this decision. */
    public static boolean forEngine(Decision d) {
        return d.getPayload() instanceof KvReady || d.getPayload() instanceof ReleaseDecided || d.getPayload() instanceof RecomputeDecided
                || d.getPayload() instanceof RequestOutcome;
    }

    /** A decision frame back as the event (the Java client hands engines the same types either way). */
    public static Decision parseDecision(JsonNode m) throws ApiException {
        String kind = text(m, "kind", false);
        Object payload = switch (kind) {
            case KV_READY -> KvReady.newBuilder().setDecodeEngineId(text(m, "decode_engine_id", false)).setOrderId(text(m, "order_id", false))
                    .setBytes(integer(m, "bytes", 0, Long.MAX_VALUE))
                    .setFirstToken(m.hasNonNull("first_token") ? (Integer) (int) integer(m, "first_token", 0, Integer.MAX_VALUE) : null).build();
            case RELEASE -> {
                List<BlockRun> runs = new ArrayList<>();
                JsonNode a = m.get("blocks");
                if (a != null && a.isArray()) {
                    for (JsonNode run : a) {
                        runs.add(BlockRun.newBuilder().setStart(run.get(0).asInt()).setCount(run.get(1).asInt()).build());
                    }
                }
                yield ReleaseDecided.newBuilder().setEngineId(text(m, "engine_id", false)).setSide(enumValue(m, "side", ReleaseSide.class))
                        .setBlocks(runs).setLeaseId(optionalText(m, "lease_id").orElse(null))
                        .setLeaseEpoch(m.hasNonNull("lease_epoch") ? m.get("lease_epoch").asLong() : null).setReason(text(m, "reason", true)).build();
            }
            case RECOMPUTE -> RecomputeDecided.newBuilder().setDecodeEngineId(text(m, "decode_engine_id", false)).setReason(text(m, "reason", true))
                    .build();
            case OUTCOME -> RequestOutcome.newBuilder().setKind(enumValue(m, "outcome", OutcomeKind.class)).setReason(text(m, "reason", true))
                    .setAttempts((int) integer(m, "attempts", 0, Integer.MAX_VALUE)).setKvBytes(integer(m, "kv_bytes", 0, Long.MAX_VALUE))
                    .setPrefillEngineId(optionalText(m, "prefill_engine_id").orElse(null))
                    .setDecodeEngineId(optionalText(m, "decode_engine_id").orElse(null)).setTimings(PhaseTimings.newBuilder().build()).build();
            default -> throw bad("kind", "unknown decision kind '" + kind + "'");
        };
        return Decision.newBuilder().setRequestId(id(m, "request_id")).setDecisionId(id(m, "decision_id"))
                .setSeq((int) optionalInteger(m, "decider_seq", "decider_seq", Integer.MIN_VALUE, Integer.MAX_VALUE, 0))
                .setStreamTimeMs(optionalInteger(m, "stream_time_ms", "stream_time_ms", 0, Long.MAX_VALUE, 0)).setCauseEventId(null)
                .setPayload(payload).build();
    }

    // ------------------------------------------------------------------------------------------------ field checks

    public static String op(JsonNode m) throws ApiException {
        JsonNode op = m.get("op");
        if (op == null || !op.isTextual() || op.asText().isEmpty()) {
            throw bad("op", "required: a string naming the message (hello, prefill_completed, ...)");
        }
        return op.asText();
    }

    private static ApiException bad(String field, String what) {
        return new ApiException(ApiException.BAD_REQUEST, field, field + ": " + what);
    }

    private static String id(JsonNode m, String field) throws ApiException {
        String s = text(m, field, field, false);
        if (s.length() > MAX_ID_CHARS) {
            throw bad(field, "at most " + MAX_ID_CHARS + " characters, got " + s.length());
        }
        for (int i = 0; i < s.length(); i++) {
            if (Character.isISOControl(s.charAt(i))) {
                throw bad(field, "must not contain control characters");
            }
        }
        return s;
    }

    private static String text(JsonNode m, String field, boolean mayBeEmpty) throws ApiException {
        return text(m, field, field, mayBeEmpty);
    }

    private static String text(JsonNode m, String path, String field, boolean mayBeEmpty) throws ApiException {
        JsonNode n = m.get(field);
        if (n == null || n.isNull()) {
            throw bad(path, "required");
        }
        if (!n.isTextual()) {
            throw bad(path, "must be a string, got " + n.getNodeType().name().toLowerCase(Locale.ROOT));
        }
        String s = n.asText();
        if (!mayBeEmpty && s.isEmpty()) {
            throw bad(path, "must not be empty");
        }
        if (s.length() > MAX_TEXT_CHARS) {
            throw bad(path, "at most " + MAX_TEXT_CHARS + " characters, got " + s.length());
        }
        return s;
    }

    private static Optional<String> optionalText(JsonNode m, String field) throws ApiException {
        JsonNode n = m.get(field);
        if (n == null || n.isNull()) {
            return Optional.empty();
        }
        return Optional.of(text(m, field, true));
    }

    private static long integer(JsonNode m, String field, long min, long max) throws ApiException {
        return integer(m, field, field, min, max);
    }

    private static long integer(JsonNode m, String path, String field, long min, long max) throws ApiException {
        JsonNode n = m.get(field);
        if (n == null || n.isNull()) {
            throw bad(path, "required");
        }
        return checkInteger(n, path, min, max);
    }

    private static long optionalInteger(JsonNode m, String path, String field, long min, long max, long absent) throws ApiException {
        JsonNode n = m.get(field);
        if (n == null || n.isNull()) {
            return absent;
        }
        return checkInteger(n, path, min, max);
    }

    private static long checkInteger(JsonNode n, String path, long min, long max) throws ApiException {
        if (!n.isIntegralNumber() || !n.canConvertToLong()) {
            throw bad(path, "must be an integer, got " + (n.isTextual() ? "\"" + abbreviate(n.asText()) + "\"" : n.toString()));
        }
        long v = n.asLong();
        if (v < min || v > max) {
            throw bad(path, "must be in " + min + ".." + max + ", got " + v);
        }
        return v;
    }

    private static boolean bool(JsonNode m, String field) throws ApiException {
        JsonNode n = m.get(field);
        if (n == null || n.isNull()) {
            throw bad(field, "required");
        }
        if (!n.isBoolean()) {
            throw bad(field, "must be true or false, got " + n);
        }
        return n.asBoolean();
    }

    private static int[] blocks(JsonNode m, String field, int numBlocks) throws ApiException {
        JsonNode a = m.get(field);
        if (a == null || a.isNull()) {
            throw bad(field, "required: the block ids in token order");
        }
        if (!a.isArray() || a.isEmpty()) {
            throw bad(field, "must be a non-empty array of block ids in token order");
        }
        if (a.size() > MAX_BLOCKS) {
            throw bad(field, "at most " + MAX_BLOCKS + " blocks, got " + a.size());
        }
        int[] out = new int[a.size()];
        for (int i = 0; i < out.length; i++) {
            JsonNode b = a.get(i);
            if (!b.isIntegralNumber() || !b.canConvertToInt() || b.asInt() < 0 || b.asInt() >= numBlocks) {
                throw bad(field, "block ids must be integers in 0.." + (numBlocks - 1) + " (the pool's num_blocks is " + numBlocks + "); ["
                        + i + "] is " + b);
            }
            out[i] = b.asInt();
        }
        return out;
    }

    private static <E extends Enum<E>> E enumValue(JsonNode m, String field, Class<E> type) throws ApiException {
        return enumValue(m, field, field, type);
    }

    private static <E extends Enum<E>> E enumValue(JsonNode m, String path, String field, Class<E> type) throws ApiException {
        String s = text(m, path, field, false);
        try {
            E e = Enum.valueOf(type, s.toUpperCase(Locale.ROOT));
            if (!"UNKNOWN".equals(e.name())) {
                return e;
            }
        } catch (IllegalArgumentException ignored) {
            // below
        }
        List<String> names = new ArrayList<>();
        for (E e : type.getEnumConstants()) {
            if (!"UNKNOWN".equals(e.name())) {
                names.add(e.name().toLowerCase(Locale.ROOT));
            }
        }
        throw bad(path, "must be one of " + names + ", got '" + abbreviate(s) + "'");
    }

    private static String lower(Enum<?> e) {
        return e.name().toLowerCase(Locale.ROOT);
    }

    private static String abbreviate(String s) {
        return s.length() <= 64 ? s : s.substring(0, 61) + "...";
    }
}
