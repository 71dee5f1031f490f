package io.orbitkv.pd.logtools;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;
import java.util.zip.CRC32C;

/**
 * The export file format ({@code .okvlog}): a self-describing, versioned, checksummed slice of the log that a
 * user can attach to a bug report and that {@code audit}, {@code trace} and {@code replay} read like a cluster.
 *
 * <pre>
 * file    := header block* trailer                       (all integers big-endian)
 * header  := magic "\x89OKVLOG\n" (8) | version u16 | length u32 | JSON (length bytes) | crc32c u32
 * block   := 'B' | index u32 | count u32 | length u32 | records (length bytes) | crc32c u32
 * record  := flags u8 | topic u16 | partition i32 | offset i64 | timestamp i64 | key_len i32 | key | value_len i32 | value
 *            [timing_len i32 | timing]                   (version 2, when flag bit 1 is set)
 * trailer := 'T' | records u64 | blocks u32 | sha256 (32) | "OKVLEND\n" (8)
 * </pre>
 *
 * The header's JSON names the format, the topics (name, role, offset range of each partition), the origin, the
 * wire format of the values and the filter. A header CRC covers version to JSON; a block CRC covers index to
 * records; blocks are numbered from 0 so a dropped or repeated block is caught at once; the trailer's SHA-256
 * covers every byte before it. {@code key_len}/{@code value_len} -1 mean null; flag bit 0 marks a stream-time
 * mark; flag bit 1 (version 2) says the record's {@code orbitkv-timing} header (ASCII, at most 2,048 bytes) follows
 * its value. Version 1 files (no timing) are read as before. Records are in merged order (see {@link LogSource}).
 *
 * <p>{@link #open} checks the whole file before any record is handed out, so a corrupted, truncated or
 * wrong-version file is refused with a {@link LogFileException} naming what is wrong and the file offset;
 * nothing is allocated from a length that was not first checked against the bytes that remain.
 */
public final class LogFile implements LogSource {

    static final byte[] MAGIC = {(byte) 0x89, 'O', 'K', 'V', 'L', 'O', 'G', '\n'};
    static final byte[] END_MAGIC = {'O', 'K', 'V', 'L', 'E', 'N', 'D', '\n'};
    public static final int VERSION = 2;
    /** The oldest version this reads: version 1 files are version 2 without timing marks. */
    static final int MIN_VERSION = 1;
    static final int MAX_TIMING_BYTES = 2048;
    public static final String FORMAT = "orbitkv-log";
    static final int MAX_HEADER_BYTES = 1 << 20;
    static final int MAX_BLOCK_BYTES = 64 << 20;
    static final int TARGET_BLOCK_BYTES = 1 << 20;
    static final int RECORD_FIXED_BYTES = 1 + 2 + 4 + 8 + 8 + 4 + 4;
    static final int TRAILER_BYTES = 1 + 8 + 4 + 32 + 8;
    private static final byte BLOCK = 'B';
    private static final byte TRAILER = 'T';
    private static final ObjectMapper JSON = new ObjectMapper();

    private final Path path;
    private final LogSlice slice;
    private final long records;
    private final long blocks;

    private LogFile(Path path, LogSlice slice, long records, long blocks) {
        this.path = path;
        this.slice = slice;
        this.records = records;
        this.blocks = blocks;
    }

    /**
     * Opens an export file after checking all of it (header, every block's checksum and numbering, every record's
     * structure, the trailer's counts and SHA-256).
     *
     * @throws LogFileException if anything is wrong, naming the problem and the file offset
     */
    public static LogFile open(Path path) {
        if (!Files.isRegularFile(path)) {
            throw new LogFileException(path, -1, Files.exists(path) ? "not a regular file" : "no such file");
        }
        try (Reader r = new Reader(path)) {
            LogSlice slice = r.header();
            long[] counts = r.records(null);
            return new LogFile(path, slice, counts[0], counts[1]);
        }
    }

    /** Starts a new export file; records must be written in merged order. Nothing appears at {@code path} until {@link Writer#close()}. */
    public static Writer create(Path path, LogSlice slice) {
        return new Writer(path, slice);
    }

    public Path path() {
        return path;
    }

    @Override
    public LogSlice slice() {
        return slice;
    }

    /** Records in the file (stream-time marks included). */
    public long recordCount() {
        return records;
    }

    public long blockCount() {
        return blocks;
    }

    @Override
    public void read(RecordFilter filter, Consumer<LogRecord> sink, Progress progress) {
        progress.start("reading " + path.getFileName(), records);
        try (Reader r = new Reader(path)) {
            r.header();
            r.records(rec -> {
                progress.advance(1);
                if (filter.wantsPartition(rec.role(), rec.partition()) && filter.wants(rec)) {
                    sink.accept(rec);
                }
            });
        } finally {
            progress.done();
        }
    }

    @Override
    public void close() {
        // nothing held between reads
    }

    /** Reads the file record by record (for merging several files); a change to the file since {@link #open} is still caught. */
    public Cursor cursor() {
        Reader r = new Reader(path);
        try {
            r.header();
        } catch (RuntimeException e) {
            r.close();
            throw e;
        }
        return new Cursor(r);
    }

    /** A pull reader over one file; {@link #next()} returns null at the end. */
    public static final class Cursor implements AutoCloseable {
        private final Reader reader;

        private Cursor(Reader reader) {
            this.reader = reader;
        }

        public LogRecord next() {
            return reader.next();
        }

        @Override
        public void close() {
            reader.close();
        }
    }

    // ------------------------------------------------------------------------------------------------ header JSON

    static byte[] headerJson(LogSlice s) {
        ObjectNode root = JSON.createObjectNode();
        root.put("format", FORMAT);
        root.put("version", VERSION);
        root.put("origin", s.origin());
        root.put("serde", s.serdeMode());
        root.put("created_ms", s.createdMs());
        if (s.filter() != null) {
            root.put("filter", s.filter());
        }
        ArrayNode topics = root.putArray("topics");
        for (LogSlice.TopicSlice t : s.topics()) {
            ObjectNode tn = topics.addObject();
            tn.put("name", t.name());
            tn.put("role", t.role().id());
            ArrayNode parts = tn.putArray("partitions");
            for (LogSlice.PartitionRange p : t.partitions()) {
                ObjectNode pn = parts.addObject();
                pn.put("partition", p.partition());
                pn.put("start", p.start());
                pn.put("end", p.end());
                pn.put("from_log_start", p.fromLogStart());
            }
        }
        try {
            return JSON.writerWithDefaultPrettyPrinter().writeValueAsBytes(root);
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        }
    }

    static LogSlice parseHeader(Path file, long at, byte[] json) {
        JsonNode root;
        try {
            root = JSON.readTree(json);
        } catch (IOException e) {
            throw new LogFileException(file, at, "header is not valid JSON: " + e.getMessage());
        }
        if (root == null || !root.isObject()) {
            throw new LogFileException(file, at, "header is not a JSON object");
        }
        if (!FORMAT.equals(root.path("format").asText())) {
            throw new LogFileException(file, at, "header.format: expected '" + FORMAT + "', got '" + root.path("format").asText() + "'");
        }
        List<LogSlice.TopicSlice> topics = new ArrayList<>();
        JsonNode tn = root.path("topics");
        if (!tn.isArray() || tn.isEmpty()) {
            throw new LogFileException(file, at, "header.topics: must be a non-empty list");
        }
        if (tn.size() > 0xFFFF) {
            throw new LogFileException(file, at, "header.topics: " + tn.size() + " topics, at most 65535");
        }
        for (int i = 0; i < tn.size(); i++) {
            JsonNode t = tn.get(i);
            String path = "header.topics[" + i + "]";
            String name = text(file, at, t, "name", path);
            TopicRole role;
            try {
                role = TopicRole.fromId(text(file, at, t, "role", path));
            } catch (IllegalArgumentException e) {
                throw new LogFileException(file, at, path + ".role: " + e.getMessage());
            }
            List<LogSlice.PartitionRange> parts = new ArrayList<>();
            for (JsonNode p : t.path("partitions")) {
                if (!p.path("partition").canConvertToInt() || !p.path("start").canConvertToLong() || !p.path("end").canConvertToLong()) {
                    throw new LogFileException(file, at, path + ".partitions: entries need integer partition, start and end");
                }
                parts.add(new LogSlice.PartitionRange(p.path("partition").asInt(), p.path("start").asLong(), p.path("end").asLong(),
                        p.path("from_log_start").asBoolean(false)));
            }
            topics.add(new LogSlice.TopicSlice(name, role, parts));
        }
        return new LogSlice(root.path("origin").asText("?"), root.path("serde").asText("embedded"), root.path("created_ms").asLong(0),
                root.hasNonNull("filter") ? root.get("filter").asText() : null, topics);
    }

    private static String text(Path file, long at, JsonNode node, String field, String path) {
        JsonNode v = node.get(field);
        if (v == null || !v.isTextual() || v.asText().isEmpty()) {
            throw new LogFileException(file, at, path + "." + field + ": required text");
        }
        return v.asText();
    }

    // ------------------------------------------------------------------------------------------------ reading

    /** Reads and checks the file front to back; every check throws a {@link LogFileException} with the offset. */
    private static final class Reader implements AutoCloseable {
        private final Path file;
        private final long size;
        private final InputStream in;
        private final MessageDigest sha = sha256();
        private final CRC32C crc = new CRC32C();
        private long pos;
        private LogSlice slice;
        private List<LogSlice.TopicSlice> topicList;
        private int fileVersion = VERSION;

        Reader(Path file) {
            this.file = file;
            try {
                this.size = Files.size(file);
                this.in = new BufferedInputStream(Files.newInputStream(file), 1 << 20);
            } catch (IOException e) {
                throw new LogFileException(file, -1, "cannot read: " + e.getMessage(), e);
            }
        }

        LogSlice header() {
            if (size < MAGIC.length) {
                throw new LogFileException(file, 0, "not an OrbitKV log export: the file has only " + size + " bytes");
            }
            byte[] magic = readN(MAGIC.length, "the magic number");
            if (!Arrays.equals(magic, MAGIC)) {
                throw new LogFileException(file, 0, "not an OrbitKV log export: bad magic number " + HexFormat.ofDelimiter(" ").formatHex(magic)
                        + " (expected " + HexFormat.ofDelimiter(" ").formatHex(MAGIC) + ")");
            }
            long versionAt = pos;
            byte[] fixed = readN(6, "the header");
            crc.reset();
            crc.update(fixed, 0, 6);
            int version = ((fixed[0] & 0xFF) << 8) | (fixed[1] & 0xFF);
            if (version < MIN_VERSION || version > VERSION) {
                throw new LogFileException(file, versionAt, "unsupported format version " + version + ": this orbitkv-pd reads versions "
                        + MIN_VERSION + " to " + VERSION + (version > VERSION ? " (the file was written by a newer orbitkv-pd)" : ""));
            }
            fileVersion = version;
            long len = ByteBuffer.wrap(fixed, 2, 4).getInt() & 0xFFFFFFFFL;
            if (len > MAX_HEADER_BYTES || len > size - pos - 4) {
                throw new LogFileException(file, versionAt + 2, "header length " + len + " is impossible (at most " + Math.min(MAX_HEADER_BYTES,
                        Math.max(0, size - pos - 4)) + " bytes remain for it): the file is corrupted or truncated");
            }
            long jsonAt = pos;
            byte[] json = readN((int) len, "the header");
            crc.update(json);
            long crcAt = pos;
            int stored = readInt("the header checksum");
            if (stored != (int) crc.getValue()) {
                throw new LogFileException(file, crcAt, "header checksum mismatch (stored " + hex(stored) + ", computed " + hex((int) crc.getValue())
                        + "): the header was changed after the file was written");
            }
            slice = parseHeader(file, jsonAt, json);
            topicList = slice.topics();
            return slice;
        }

        /** Reads every block and the trailer; hands records to {@code sink} (null: check only). Returns {records, blocks}. */
        long[] records(Consumer<LogRecord> sink) {
            LogRecord r;
            while ((r = next()) != null) {
                if (sink != null) {
                    sink.accept(r);
                }
            }
            return new long[] {total, blockIndex};
        }

        private long total;
        private long blockIndex;
        private ByteBuffer block;
        private long blockPayloadAt;
        private long blockTagAt;
        private long blockExpected;
        private long blockParsed;
        private boolean finished;
        private final Map<Long, Long> lastOffset = new HashMap<>();

        /** The next record, or null after the trailer was read and checked. */
        LogRecord next() {
            while (block == null || !block.hasRemaining()) {
                if (block != null) {
                    if (blockParsed != blockExpected) {
                        throw new LogFileException(file, blockTagAt + 5, "block " + blockIndex + " says " + blockExpected + " records but holds "
                                + blockParsed);
                    }
                    total += blockParsed;
                    blockIndex++;
                    block = null;
                }
                if (finished) {
                    return null;
                }
                readBlock();
            }
            blockParsed++;
            return parseRecord();
        }

        private void readBlock() {
            long tagAt = pos;
            if (pos >= size) {
                throw new LogFileException(file, pos, "truncated: the file ends after " + blockIndex + " complete blocks (" + total
                        + " records) without its trailer");
            }
            byte tag = readN(1, "a block")[0];
            if (tag == TRAILER) {
                trailer(tagAt, total, blockIndex);
                finished = true;
                return;
            }
            if (tag != BLOCK) {
                throw new LogFileException(file, tagAt, "expected a block ('B') or the trailer ('T'), found byte " + hex(tag & 0xFF));
            }
            byte[] head = readN(12, "a block header");
            ByteBuffer hb = ByteBuffer.wrap(head);
            long index = hb.getInt() & 0xFFFFFFFFL;
            long count = hb.getInt() & 0xFFFFFFFFL;
            long len = hb.getInt() & 0xFFFFFFFFL;
            if (index != blockIndex) {
                throw new LogFileException(file, tagAt + 1, "block number " + index + " where block " + blockIndex
                        + " was expected: blocks were dropped, repeated or reordered");
            }
            long remaining = size - pos;
            if (len > MAX_BLOCK_BYTES || len + 4 > remaining) {
                throw new LogFileException(file, tagAt + 9, "block " + index + " claims " + len + " bytes but " + (len > MAX_BLOCK_BYTES
                        ? "a block holds at most " + MAX_BLOCK_BYTES : "only " + Math.max(0, remaining - 4) + " remain before its checksum")
                        + ": the file is corrupted or truncated");
            }
            if (count > len / RECORD_FIXED_BYTES) {
                throw new LogFileException(file, tagAt + 5, "block " + index + " claims " + count + " records in " + len
                        + " bytes: the file is corrupted");
            }
            long payloadAt = pos;
            byte[] payload = readN((int) len, "block " + index);
            crc.reset();
            crc.update(head);
            crc.update(payload);
            long crcAt = pos;
            int stored = readInt("the checksum of block " + index);
            if (stored != (int) crc.getValue()) {
                throw new LogFileException(file, crcAt, "block " + index + " (starting at file offset " + tagAt + ") checksum mismatch (stored "
                        + hex(stored) + ", computed " + hex((int) crc.getValue()) + "): the block was changed after the file was written");
            }
            block = ByteBuffer.wrap(payload);
            blockPayloadAt = payloadAt;
            blockTagAt = tagAt;
            blockExpected = count;
            blockParsed = 0;
        }

        private LogRecord parseRecord() {
            ByteBuffer b = block;
            long payloadAt = blockPayloadAt;
            long index = blockIndex;
            long at = payloadAt + b.position();
            if (b.remaining() < RECORD_FIXED_BYTES) {
                throw new LogFileException(file, at, "block " + index + ": a record is cut short (" + b.remaining() + " bytes left)");
            }
            int flags = b.get() & 0xFF;
            int topicIdx = b.getShort() & 0xFFFF;
            int partition = b.getInt();
            long offset = b.getLong();
            long timestamp = b.getLong();
            if (topicIdx >= topicList.size()) {
                throw new LogFileException(file, at + 1, "block " + index + ": record names topic #" + topicIdx + " but the header lists "
                        + topicList.size());
            }
            if ((flags & ~(fileVersion >= 2 ? 3 : 1)) != 0) {
                throw new LogFileException(file, at, "block " + index + ": unknown record flags " + hex(flags));
            }
            byte[] key = bytes(b, payloadAt, index, "key");
            byte[] value = bytes(b, payloadAt, index, "value");
            String timing = null;
            if ((flags & 2) != 0) {
                long timingAt = payloadAt + b.position();
                byte[] t = bytes(b, payloadAt, index, "timing");
                if (t == null || t.length > MAX_TIMING_BYTES) {
                    throw new LogFileException(file, timingAt, "block " + index + ": record timing of " + (t == null ? "null" : t.length + " bytes")
                            + " (flag bit 1 promises at most " + MAX_TIMING_BYTES + " bytes)");
                }
                timing = new String(t, java.nio.charset.StandardCharsets.US_ASCII);
            }
            LogSlice.TopicSlice topic = topicList.get(topicIdx);
            boolean mark = (flags & 1) != 0;
            if (mark && (key != null || value != null || topic.role() != TopicRole.REQUEST_EVENTS)) {
                throw new LogFileException(file, at, "block " + index + ": a stream-time mark must be a request-events record without key and value");
            }
            LogSlice.PartitionRange range = topic.partition(partition).orElseThrow(() -> new LogFileException(file, at + 3, "block "
                    + index + ": partition " + partition + " of " + topic.name() + " is not in the header"));
            if (offset < range.start() || offset >= range.end()) {
                throw new LogFileException(file, at + 7, "block " + index + ": offset " + offset + " of " + topic.name() + "-" + partition
                        + " is outside the header's range [" + range.start() + ", " + range.end() + ")");
            }
            long tp = ((long) topicIdx << 32) | (partition & 0xFFFFFFFFL);
            Long prev = lastOffset.put(tp, offset);
            if (prev != null && prev >= offset) {
                throw new LogFileException(file, at + 7, "block " + index + ": " + topic.name() + "-" + partition + " offset " + offset
                        + " after offset " + prev + ": records out of order");
            }
            return new LogRecord(topic.role(), topic.name(), partition, offset, timestamp, key, value, mark, timing);
        }

        private byte[] bytes(ByteBuffer b, long payloadAt, long index, String what) {
            long at = payloadAt + b.position();
            if (b.remaining() < 4) {
                throw new LogFileException(file, at, "block " + index + ": record " + what + " length is cut short");
            }
            int len = b.getInt();
            if (len == -1) {
                return null;
            }
            if (len < 0 || len > b.remaining()) {
                throw new LogFileException(file, at, "block " + index + ": record " + what + " length " + len + " but " + b.remaining()
                        + " bytes remain in the block");
            }
            byte[] out = new byte[len];
            b.get(out);
            return out;
        }

        private void trailer(long at, long total, long blockCount) {
            if (size - at != TRAILER_BYTES) {
                throw new LogFileException(file, at, size - at < TRAILER_BYTES ? "truncated: the trailer is cut short ("
                        + (size - at) + " of " + TRAILER_BYTES + " bytes)" : (size - at - TRAILER_BYTES) + " unexpected bytes after the trailer");
            }
            byte[] counts = readN(12, "the trailer");
            ByteBuffer cb = ByteBuffer.wrap(counts);
            long records = cb.getLong();
            long blocks = cb.getInt() & 0xFFFFFFFFL;
            byte[] digest = sha.digest();
            byte[] stored = readN(32, "the trailer");
            byte[] end = readN(8, "the trailer");
            if (records != total || blocks != blockCount) {
                throw new LogFileException(file, at + 1, "trailer says " + records + " records in " + blocks + " blocks, the file holds "
                        + total + " in " + blockCount);
            }
            if (!MessageDigest.isEqual(digest, stored)) {
                throw new LogFileException(file, at + 13, "SHA-256 mismatch (stored " + HexFormat.of().formatHex(stored, 0, 8) + "..., computed "
                        + HexFormat.of().formatHex(digest, 0, 8) + "...): the file was changed after it was written");
            }
            if (!Arrays.equals(end, END_MAGIC)) {
                throw new LogFileException(file, at + 45, "bad end marker " + HexFormat.ofDelimiter(" ").formatHex(end));
            }
        }

        private int readInt(String what) {
            byte[] b = readN(4, what);
            return ByteBuffer.wrap(b).getInt();
        }

        /** Reads exactly n bytes (n already checked against the file size by the caller where it came from the file). */
        private byte[] readN(int n, String what) {
            if (n > size - pos) {
                throw new LogFileException(file, pos, "truncated: the file ends inside " + what + " (" + (size - pos) + " of " + n
                        + " bytes)");
            }
            byte[] buf = new byte[n];
            try {
                int off = 0;
                while (off < n) {
                    int r = in.read(buf, off, n - off);
                    if (r < 0) {
                        throw new EOFException();
                    }
                    off += r;
                }
            } catch (EOFException e) {
                throw new LogFileException(file, pos, "truncated: the file ends inside " + what + " (it shrank while being read)");
            } catch (IOException e) {
                throw new LogFileException(file, pos, "cannot read: " + e.getMessage(), e);
            }
            pos += n;
            sha.update(buf, 0, n);
            return buf;
        }

        @Override
        public void close() {
            try {
                in.close();
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
        }
    }

    private static String hex(int v) {
        return String.format("0x%08x", v);
    }

    static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is part of every JDK", e);
        }
    }

    // ------------------------------------------------------------------------------------------------ writing

    /**
     * Writes an export file: a temporary file next to the target, renamed into place by {@link #close()}, so a
     * failed export never leaves a half-written file under the target name. Not thread-safe.
     */
    public static final class Writer implements AutoCloseable {
        private final Path target;
        private final Path temp;
        private final OutputStream out;
        private final MessageDigest sha = sha256();
        private final CRC32C crc = new CRC32C();
        private final Map<String, Integer> topicIndex = new HashMap<>();
        private final ByteBuffer block = ByteBuffer.allocate(TARGET_BLOCK_BYTES + RECORD_FIXED_BYTES);
        private ByteBuffer big;
        private int blockCount;
        private int inBlock;
        private long records;
        private boolean closed;
        private boolean committed;

        Writer(Path target, LogSlice slice) {
            this.target = target.toAbsolutePath();
            this.temp = this.target.resolveSibling(this.target.getFileName() + ".partial");
            for (int i = 0; i < slice.topics().size(); i++) {
                topicIndex.put(slice.topics().get(i).name(), i);
            }
            try {
                Files.createDirectories(this.target.getParent());
                this.out = new BufferedOutputStream(Files.newOutputStream(temp), 1 << 20);
                byte[] json = headerJson(slice);
                ByteBuffer h = ByteBuffer.allocate(MAGIC.length + 6 + json.length + 4);
                h.put(MAGIC).putShort((short) VERSION).putInt(json.length).put(json);
                crc.reset();
                crc.update(h.array(), MAGIC.length, 6 + json.length);
                h.putInt((int) crc.getValue());
                write(h.array());
            } catch (IOException e) {
                throw new UncheckedIOException("cannot write " + temp + ": " + e.getMessage(), e);
            }
        }

        /** Appends one record (records must come in merged order; the reader checks per-partition offset order). */
        public void write(LogRecord r) {
            Integer topic = topicIndex.get(r.topic());
            if (topic == null) {
                throw new IllegalArgumentException("record of topic " + r.topic() + " which the file's header does not list");
            }
            byte[] timing = r.timing() == null ? null : r.timing().getBytes(java.nio.charset.StandardCharsets.US_ASCII);
            if (timing != null && timing.length > MAX_TIMING_BYTES) {
                timing = null; // marks are observations: an oversized header is dropped, never the record
            }
            int need = RECORD_FIXED_BYTES + (r.key() == null ? 0 : r.key().length) + (r.value() == null ? 0 : r.value().length)
                    + (timing == null ? 0 : 4 + timing.length);
            ByteBuffer b = block;
            if (need > block.remaining()) {
                flushBlock();
                if (need > block.remaining()) {
                    if (need > MAX_BLOCK_BYTES) {
                        throw new IllegalArgumentException(r.where() + ": a record of " + need + " bytes is larger than a block ("
                                + MAX_BLOCK_BYTES + ")");
                    }
                    big = ByteBuffer.allocate(need);
                    b = big;
                }
            }
            b.put((byte) ((r.streamTimeMark() ? 1 : 0) | (timing != null ? 2 : 0))).putShort((short) (int) topic).putInt(r.partition())
                    .putLong(r.offset()).putLong(r.timestamp());
            putBytes(b, r.key());
            putBytes(b, r.value());
            if (timing != null) {
                putBytes(b, timing);
            }
            inBlock++;
            records++;
            if (b == big) {
                flushBlock();
            }
        }

        private static void putBytes(ByteBuffer b, byte[] v) {
            if (v == null) {
                b.putInt(-1);
            } else {
                b.putInt(v.length).put(v);
            }
        }

        private void flushBlock() {
            ByteBuffer b = big != null ? big : block;
            if (inBlock == 0) {
                return;
            }
            b.flip();
            byte[] head = ByteBuffer.allocate(13).put(BLOCK).putInt(blockCount).putInt(inBlock).putInt(b.remaining()).array();
            crc.reset();
            crc.update(head, 1, 12);
            crc.update(b.array(), b.arrayOffset() + b.position(), b.remaining());
            try {
                write(head);
                write(b.array(), b.arrayOffset() + b.position(), b.remaining());
                write(ByteBuffer.allocate(4).putInt((int) crc.getValue()).array());
            } catch (IOException e) {
                throw new UncheckedIOException("cannot write " + temp + ": " + e.getMessage(), e);
            }
            blockCount++;
            inBlock = 0;
            big = null;
            block.clear();
        }

        private void write(byte[] b) throws IOException {
            write(b, 0, b.length);
        }

        private void write(byte[] b, int off, int len) throws IOException {
            out.write(b, off, len);
            sha.update(b, off, len);
        }

        public long records() {
            return records;
        }

        /** Writes the trailer and moves the file into place. */
        @Override
        public void close() {
            if (closed) {
                return;
            }
            closed = true;
            try {
                flushBlock();
                byte[] t = ByteBuffer.allocate(13).put(TRAILER).putLong(records).putInt(blockCount).array();
                write(t);
                out.write(sha.digest());
                out.write(END_MAGIC);
                out.close();
                Files.move(temp, target, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
                committed = true;
            } catch (IOException e) {
                throw new UncheckedIOException("cannot write " + target + ": " + e.getMessage(), e);
            } finally {
                if (!committed) {
                    abandon();
                }
            }
        }

        /** Drops the partial file (on failure). */
        public void abandon() {
            closed = true;
            try {
                out.close();
            } catch (IOException ignored) {
                // the temp file is deleted next; nothing else to do
            }
            try {
                Files.deleteIfExists(temp);
            } catch (IOException ignored) {
                // best effort
            }
        }

        public Path target() {
            return target;
        }
    }
}
