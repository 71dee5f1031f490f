package io.orbitkv.pd.broker;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.SeekableByteChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;

/** Reads the last lines of a (possibly large, possibly still growing) log file for error messages. */
public final class LogTail {

    /** Enough for a stack trace or a config error without flooding an exception message. */
    private static final int MAX_BYTES = 24 * 1024;

    private LogTail() {
    }

    /**
     * @return the last {@code lines} lines of {@code file}, or a short note if it cannot be read; never throws
     */
    public static String of(Path file, int lines) {
        try (SeekableByteChannel ch = Files.newByteChannel(file)) {
            long size = ch.size();
            int len = (int) Math.min(size, MAX_BYTES);
            ByteBuffer buf = ByteBuffer.allocate(len);
            ch.position(size - len);
            while (buf.hasRemaining() && ch.read(buf) > 0) {
                // keep reading until the window is full
            }
            String text = new String(buf.array(), 0, buf.position(), StandardCharsets.UTF_8);
            List<String> all = Arrays.asList(text.split("\\R"));
            // The first line of a cut window is usually partial.
            int from = Math.max(len < size ? 1 : 0, all.size() - lines);
            return String.join(System.lineSeparator(), all.subList(Math.min(from, all.size()), all.size()));
        } catch (IOException e) {
            return "(cannot read " + file + ": " + e + ")";
        }
    }
}
