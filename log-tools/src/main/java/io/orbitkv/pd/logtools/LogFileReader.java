package io.orbitkv.pd.logtools;

import static io.orbitkv.pd.logtools.LogFile.BLOCK;
import static io.orbitkv.pd.logtools.LogFile.END_MAGIC;
import static io.orbitkv.pd.logtools.LogFile.MAGIC;
import static io.orbitkv.pd.logtools.LogFile.MAX_BLOCK_BYTES;
import static io.orbitkv.pd.logtools.LogFile.MAX_HEADER_BYTES;
import static io.orbitkv.pd.logtools.LogFile.MAX_TIMING_BYTES;
import static io.orbitkv.pd.logtools.LogFile.MIN_VERSION;
import static io.orbitkv.pd.logtools.LogFile.RECORD_FIXED_BYTES;
import static io.orbitkv.pd.logtools.LogFile.TRAILER;
import static io.orbitkv.pd.logtools.LogFile.TRAILER_BYTES;
import static io.orbitkv.pd.logtools.LogFile.VERSION;
import static io.orbitkv.pd.logtools.LogFile.hex;

import java.io.BufferedInputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.function.Consumer;
import java.util.zip.CRC32C;

/**
 * Reads an export file ({@link LogFile} describes the format) front to back and checks it as it goes: every check
 * throws a {@link LogFileException} naming the problem and the file offset, and nothing is allocated from a length
 * that was not first checked against the bytes that remain. Kept apart from {@link LogFile} so the format's checks
 * read as one piece; {@link LogFile#open} runs it over the whole file before any record is handed out.
 */
final class LogFileReader implements AutoCloseable {
    private final Path file;
    private final long size;
    private final InputStream in;
    private final MessageDigest sha = LogFile.sha256();
    private final CRC32C crc = new CRC32C();
    private long pos;
    private LogSlice slice;
    private List<LogSlice.TopicSlice> topicList;
    private int fileVersion = VERSION;
    /** Records of the blocks read so far, and the number of the block being read. */
    private long total;
    private long blockIndex;
    private ByteBuffer block;
    private long blockPayloadAt;
    private long blockTagAt;
    private long blockExpected;
    private long blockParsed;
    private boolean finished;
    /** The last offset read per topic (index) and partition: offsets must grow. */
    private final Map<Long, Long> lastOffset = new HashMap<>();

    LogFileReader(Path file) {
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
        slice = LogFile.parseHeader(file, jsonAt, json);
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
            timing = new String(t, StandardCharsets.US_ASCII);
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
