package io.orbitkv.pd.logtools;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.zip.CRC32C;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The export file format: a round trip keeps every record byte for byte, and a file that was changed, cut short,
 * forged or is not an export at all is refused by {@link LogFile#open} with the problem and the file offset,
 * before any record is handed out.
 */
class LogFileTest {

    @TempDir
    Path dir;

    private static final LogSlice SLICE = new LogSlice("test", "embedded", 1L, null, List.of(
            new LogSlice.TopicSlice("t.request-events", TopicRole.REQUEST_EVENTS, List.of(new LogSlice.PartitionRange(0, 0, 100_000, true),
                    new LogSlice.PartitionRange(1, 10, 100_000, false))),
            new LogSlice.TopicSlice("t.decisions", TopicRole.DECISIONS, List.of(new LogSlice.PartitionRange(0, 0, 100_000, true)))));

    private static List<LogRecord> records(int n, int bigEvery) {
        Random rnd = new Random(3);
        List<LogRecord> out = new ArrayList<>();
        long[] next = {0, 10};
        long decisions = 0;
        for (int i = 0; i < n; i++) {
            int kind = rnd.nextInt(4);
            byte[] value = new byte[bigEvery > 0 && i % bigEvery == 0 ? 1_500_000 : rnd.nextInt(300)];
            rnd.nextBytes(value);
            if (kind == 0) {
                out.add(LogRecord.of(TopicRole.DECISIONS, "t.decisions", 0, decisions++, 1000 + i, ("req-" + i).getBytes(), value));
            } else if (kind == 1) {
                int p = rnd.nextInt(2);
                out.add(LogRecord.mark("t.request-events", p, next[p]++, 1000 + i));
            } else {
                int p = rnd.nextInt(2);
                out.add(LogRecord.of(TopicRole.REQUEST_EVENTS, "t.request-events", p, next[p]++, 1000 + i, kind == 2 ? null : ("req-" + i).getBytes(),
                        kind == 2 ? null : value));
            }
        }
        return out;
    }

    private Path write(List<LogRecord> records) {
        Path f = dir.resolve("log-" + System.nanoTime() + ".okvlog");
        try (LogFileWriter w = LogFile.create(f, SLICE)) {
            records.forEach(w::write);
        }
        return f;
    }

    private static List<LogRecord> readAll(LogFile f) {
        List<LogRecord> out = new ArrayList<>();
        f.read(LogSource.RecordFilter.ALL, out::add, Progress.NONE);
        return out;
    }

    @Test
    void roundTripKeepsEveryRecordAndTheHeader() {
        List<LogRecord> in = records(5_000, 1_000);
        Path f = write(in);
        LogFile file = LogFile.open(f);
        assertThat(file.recordCount()).isEqualTo(in.size());
        assertThat(in).anySatisfy(r -> assertThat(r.value()).hasSizeGreaterThan(LogFile.TARGET_BLOCK_BYTES));
        assertThat(file.blockCount()).isGreaterThan(2); // a record larger than a block gets a block of its own
        assertThat(file.slice().topics()).isEqualTo(SLICE.topics());
        assertThat(file.slice().origin()).isEqualTo("test");
        assertThat(readAll(file)).isEqualTo(in);
        assertThat(dir.resolve(f.getFileName() + ".partial")).doesNotExist();
    }

    @Test
    void anEmptySliceIsAValidFile() {
        Path f = write(List.of());
        assertThat(readAll(LogFile.open(f))).isEmpty();
    }

    @Test
    void aFlippedByteAnywhereIsRefusedWithItsOffset() throws IOException {
        Path f = write(records(2_000, 0));
        byte[] good = Files.readAllBytes(f);
        Random rnd = new Random(11);
        for (int trial = 0; trial < 200; trial++) {
            byte[] bad = good.clone();
            int at = rnd.nextInt(bad.length);
            bad[at] ^= (byte) (1 << rnd.nextInt(8));
            Path g = dir.resolve("flip-" + trial);
            Files.write(g, bad);
            assertThatThrownBy(() -> LogFile.open(g)).as("flip at %d", at).isInstanceOf(LogFileException.class)
                    .satisfies(e -> assertThat(((LogFileException) e).fileOffset()).isBetween(0L, (long) bad.length));
        }
    }

    @Test
    void aFlippedByteInABlockNamesTheBlockAndItsChecksum() throws IOException {
        Path f = write(records(2_000, 0));
        byte[] bad = Files.readAllBytes(f);
        bad[bad.length / 2] ^= 0x40;
        Files.write(f, bad);
        assertThatThrownBy(() -> LogFile.open(f)).isInstanceOf(LogFileException.class)
                .hasMessageContaining("checksum mismatch").hasMessageContaining("block ").hasMessageContaining("at file offset");
    }

    @Test
    void aTruncatedFileIsRefusedWhereverItIsCut() throws IOException {
        Path f = write(records(3_000, 0));
        byte[] good = Files.readAllBytes(f);
        for (int cut : new int[] {0, 5, 8, 12, 40, good.length / 3, good.length / 2, good.length - 60, good.length - 45, good.length - 1}) {
            Path g = dir.resolve("cut-" + cut);
            Files.write(g, Arrays.copyOf(good, cut));
            assertThatThrownBy(() -> LogFile.open(g)).as("cut at %d of %d", cut, good.length).isInstanceOf(LogFileException.class)
                    .satisfies(e -> assertThat(e.getMessage()).containsAnyOf("truncated", "only", "not an OrbitKV log export", "impossible"));
        }
    }

    @Test
    void aFileCutAtABlockBoundaryIsRefusedForItsMissingTrailer() throws IOException {
        Path f = write(records(3_000, 0));
        byte[] good = Files.readAllBytes(f);
        // the trailer is the last 53 bytes: without it, every block is intact but the file is not complete
        Path g = dir.resolve("no-trailer");
        Files.write(g, Arrays.copyOf(good, good.length - LogFile.TRAILER_BYTES));
        assertThatThrownBy(() -> LogFile.open(g)).isInstanceOf(LogFileException.class).hasMessageContaining("without its trailer");
    }

    @Test
    void notAnExportAtAll() throws IOException {
        Path g = dir.resolve("zip");
        Files.write(g, new byte[] {0x50, 0x4B, 0x03, 0x04, 1, 2, 3, 4, 5, 6, 7, 8});
        assertThatThrownBy(() -> LogFile.open(g)).isInstanceOf(LogFileException.class)
                .hasMessageContaining("not an OrbitKV log export: bad magic number 50 4b 03 04").hasMessageContaining("at file offset 0");
        assertThatThrownBy(() -> LogFile.open(dir.resolve("missing"))).isInstanceOf(LogFileException.class).hasMessageContaining("no such file");
    }

    @Test
    void aNewerVersionIsRefusedByName() throws IOException {
        Path f = write(records(10, 0));
        byte[] b = Files.readAllBytes(f);
        b[LogFile.MAGIC.length + 1] = 3; // version u16 = 3
        Files.write(f, b);
        assertThatThrownBy(() -> LogFile.open(f)).isInstanceOf(LogFileException.class)
                .hasMessageContaining("unsupported format version 3").hasMessageContaining("newer orbitkv-pd").hasMessageContaining("at file offset 8");
    }

    @Test
    void timingMarksTravelWithTheirRecords() {
        List<LogRecord> in = new ArrayList<>();
        for (int i = 0; i < 50; i++) {
            String timing = i % 3 == 0 ? null : "in=" + (1_000 + i) + ",out=" + (2_000 + i);
            in.add(LogRecord.of(TopicRole.DECISIONS, "t.decisions", 0, i, 1000 + i, ("req-" + i).getBytes(), new byte[] {1, 2, 3}, timing));
        }
        List<LogRecord> back = readAll(LogFile.open(write(in)));
        assertThat(back).isEqualTo(in);
        assertThat(back.get(1).marks().get("out").getAsLong()).isEqualTo(2_001);
        assertThat(back.get(0).marks().isEmpty()).isTrue();
    }

    @Test
    void aVersion1FileWithoutTimingStillReads() throws Exception {
        List<LogRecord> in = records(200, 0);
        Path f = write(in);
        byte[] b = Files.readAllBytes(f);
        // what an older orbitkv-pd wrote: version 1 (no record carries timing), its header CRC and SHA-256 made for it
        int v = LogFile.MAGIC.length;
        b[v + 1] = 1;
        int len = ByteBuffer.wrap(b, v + 2, 4).getInt();
        CRC32C crc = new CRC32C();
        crc.update(b, v, 6 + len);
        ByteBuffer.wrap(b, v + 6 + len, 4).putInt((int) crc.getValue());
        byte[] sha = java.security.MessageDigest.getInstance("SHA-256").digest(Arrays.copyOf(b, b.length - 40));
        System.arraycopy(sha, 0, b, b.length - 40, 32);
        Files.write(f, b);
        assertThat(readAll(LogFile.open(f))).isEqualTo(in);
    }

    @Test
    void aForgedHeaderLengthAllocatesNothing() throws IOException {
        Path f = write(records(10, 0));
        byte[] b = Files.readAllBytes(f);
        ByteBuffer.wrap(b).putInt(LogFile.MAGIC.length + 2, Integer.MAX_VALUE); // a 2 GiB header claimed by a small file
        Files.write(f, b);
        assertThatThrownBy(() -> LogFile.open(f)).isInstanceOf(LogFileException.class).hasMessageContaining("header length 2147483647 is impossible");
    }

    @Test
    void aForgedBlockLengthAllocatesNothing() throws IOException {
        Path f = write(records(100, 0));
        byte[] b = Files.readAllBytes(f);
        int block = firstBlock(b);
        ByteBuffer.wrap(b).putInt(block + 9, 0x7FFF_FFF0);
        Files.write(f, b);
        assertThatThrownBy(() -> LogFile.open(f)).isInstanceOf(LogFileException.class).hasMessageContaining("claims 2147483632 bytes")
                .hasMessageContaining("at file offset " + (block + 9));
    }

    @Test
    void aForgedRecordLengthInsideAValidBlockIsCaught() throws IOException {
        Path f = write(records(50, 0));
        byte[] b = Files.readAllBytes(f);
        int block = firstBlock(b);
        ByteBuffer bb = ByteBuffer.wrap(b);
        int len = bb.getInt(block + 9);
        // the first record's key length, forged, with the block checksum recomputed: only the bounds check is left
        int keyLenAt = block + 13 + 1 + 2 + 4 + 8 + 8;
        bb.putInt(keyLenAt, 1 << 30);
        CRC32C crc = new CRC32C();
        crc.update(b, block + 1, 12 + len);
        bb.putInt(block + 13 + len, (int) crc.getValue());
        Files.write(f, b);
        assertThatThrownBy(() -> LogFile.open(f)).isInstanceOf(LogFileException.class).hasMessageContaining("key length 1073741824");
    }

    @Test
    void recordsOutsideTheHeadersRangesOrOrderAreRefused() {
        List<LogRecord> bad = List.of(LogRecord.of(TopicRole.REQUEST_EVENTS, "t.request-events", 1, 3, 1, null, null));
        Path f = write(bad);
        assertThatThrownBy(() -> LogFile.open(f)).isInstanceOf(LogFileException.class).hasMessageContaining("outside the header's range [10, 100000)");
        Path g = write(List.of(LogRecord.of(TopicRole.REQUEST_EVENTS, "t.request-events", 0, 5, 1, null, null),
                LogRecord.of(TopicRole.REQUEST_EVENTS, "t.request-events", 0, 4, 2, null, null)));
        assertThatThrownBy(() -> LogFile.open(g)).isInstanceOf(LogFileException.class).hasMessageContaining("offset 4 after offset 5");
    }

    @Test
    void bytesAfterTheTrailerAreRefused() throws IOException {
        Path f = write(records(10, 0));
        Files.write(f, new byte[] {1, 2, 3}, java.nio.file.StandardOpenOption.APPEND);
        assertThatThrownBy(() -> LogFile.open(f)).isInstanceOf(LogFileException.class).hasMessageContaining("3 unexpected bytes after the trailer");
    }

    @Test
    void aWriterThatFailsLeavesNothingBehind() {
        Path f = dir.resolve("never.okvlog");
        LogFileWriter w = LogFile.create(f, SLICE);
        assertThatThrownBy(() -> w.write(LogRecord.of(TopicRole.ENGINES, "not.in.header", 0, 0, 0, null, null)))
                .isInstanceOf(IllegalArgumentException.class);
        w.abandon();
        assertThat(f).doesNotExist();
        assertThat(dir.resolve("never.okvlog.partial")).doesNotExist();
    }

    /** Offset of the first block: after magic, version, header length, header and its checksum. */
    private static int firstBlock(byte[] b) {
        int headerLen = ByteBuffer.wrap(b).getInt(LogFile.MAGIC.length + 2);
        return LogFile.MAGIC.length + 6 + headerLen + 4;
    }
}
