package io.orbitkv.pd.logtools;

import static io.orbitkv.pd.logtools.LogFile.BLOCK;
import static io.orbitkv.pd.logtools.LogFile.END_MAGIC;
import static io.orbitkv.pd.logtools.LogFile.MAGIC;
import static io.orbitkv.pd.logtools.LogFile.MAX_BLOCK_BYTES;
import static io.orbitkv.pd.logtools.LogFile.MAX_TIMING_BYTES;
import static io.orbitkv.pd.logtools.LogFile.RECORD_FIXED_BYTES;
import static io.orbitkv.pd.logtools.LogFile.TARGET_BLOCK_BYTES;
import static io.orbitkv.pd.logtools.LogFile.TRAILER;
import static io.orbitkv.pd.logtools.LogFile.VERSION;

import java.io.BufferedOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.security.MessageDigest;
import java.util.HashMap;
import java.util.Map;
import java.util.zip.CRC32C;

/**
 * Writes an export file ({@link LogFile} describes the format): a temporary file next to the target, renamed into
 * place by {@link #close()}, so a failed export never leaves a half-written file under the target name. Made by
 * {@link LogFile#create}; not thread-safe.
 */
public final class LogFileWriter implements AutoCloseable {
    private final Path target;
    private final Path temp;
    private final OutputStream out;
    private final MessageDigest sha = LogFile.sha256();
    private final CRC32C crc = new CRC32C();
    private final Map<String, Integer> topicIndex = new HashMap<>();
    private final ByteBuffer block = ByteBuffer.allocate(TARGET_BLOCK_BYTES + RECORD_FIXED_BYTES);
    private ByteBuffer big;
    private int blockCount;
    private int inBlock;
    private long records;
    private boolean closed;
    private boolean committed;

    LogFileWriter(Path target, LogSlice slice) {
        this.target = target.toAbsolutePath();
        this.temp = this.target.resolveSibling(this.target.getFileName() + ".partial");
        for (int i = 0; i < slice.topics().size(); i++) {
            topicIndex.put(slice.topics().get(i).name(), i);
        }
        try {
            Files.createDirectories(this.target.getParent());
            this.out = new BufferedOutputStream(Files.newOutputStream(temp), 1 << 20);
            byte[] json = LogFile.headerJson(slice);
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
        byte[] timing = r.timing() == null ? null : r.timing().getBytes(StandardCharsets.US_ASCII);
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
