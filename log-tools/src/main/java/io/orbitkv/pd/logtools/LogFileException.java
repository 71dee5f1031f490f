package io.orbitkv.pd.logtools;

import java.nio.file.Path;

/**
 * An export file that cannot be trusted: wrong magic or version, a checksum that does not match, a length that
 * points past the end, a truncated file. The message names the file, what is wrong and the byte offset in the
 * file where it was found, so a user can tell a truncated download from a corrupted disk from a file that is
 * not an export at all.
 */
public final class LogFileException extends RuntimeException {

    private final transient Path file;
    private final long fileOffset;

    public LogFileException(Path file, long fileOffset, String problem) {
        this(file, fileOffset, problem, null);
    }

    public LogFileException(Path file, long fileOffset, String problem, Throwable cause) {
        super(file + ": " + problem + (fileOffset >= 0 ? " (at file offset " + fileOffset + ")" : ""), cause);
        this.file = file;
        this.fileOffset = fileOffset;
    }

    public Path file() {
        return file;
    }

    /** Byte offset in the file where the problem was found, or -1. */
    public long fileOffset() {
        return fileOffset;
    }
}
