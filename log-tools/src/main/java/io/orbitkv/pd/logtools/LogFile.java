package io.orbitkv.pd.logtools;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.List;
import java.util.function.Consumer;

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
 *
 * <p>This class holds what reading and writing share (the format's constants, the header's JSON, the digests);
 * {@code LogFileReader} reads and checks a file, {@link LogFileWriter} writes one.
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
    static final byte BLOCK = 'B';
    static final byte TRAILER = 'T';
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
        try (LogFileReader r = new LogFileReader(path)) {
            LogSlice slice = r.header();
            long[] counts = r.records(null);
            return new LogFile(path, slice, counts[0], counts[1]);
        }
    }

    /** Starts a new export file; records must be written in merged order. Nothing appears at {@code path} until {@link LogFileWriter#close()}. */
    public static LogFileWriter create(Path path, LogSlice slice) {
        return new LogFileWriter(path, slice);
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
        try (LogFileReader r = new LogFileReader(path)) {
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
        LogFileReader r = new LogFileReader(path);
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
        private final LogFileReader reader;

        private Cursor(LogFileReader reader) {
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

    // ------------------------------------------------------------------------------------------------ shared by reader and writer

    static String hex(int v) {
        return String.format("0x%08x", v);
    }

    static MessageDigest sha256() {
        try {
            return MessageDigest.getInstance("SHA-256");
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is part of every JDK", e);
        }
    }
}
