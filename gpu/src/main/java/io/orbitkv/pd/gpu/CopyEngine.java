package io.orbitkv.pd.gpu;

/**
 * Executes a {@link RunTable} on a device: one kernel launch or one batched copy per call, never one call per page.
 * An engine belongs to one thread (the transport's copy thread, which has the device's context current).
 */
public interface CopyEngine extends AutoCloseable {

    /**
     * Enqueues every copy of {@code table} and returns only after the copy's completion event completed: when it
     * returns, every byte is in place; when it throws, the copy may have written part of the destination.
     */
    void copy(RunTable table);

    /**
     * When the last {@link #copy} had its table staged (chunked, written to pinned memory, upload enqueued) and its copies
     * launched, µs since the epoch ({@code Marks.nowMicros}); zeros when the engine does not say. For the push's marks.
     */
    default long[] lastSteps() {
        return new long[2];
    }

    /** {@code kernel t256_u8_h1, 64 KiB chunks, grid per chunk} or {@code batch}: for logs and endpoint attributes. */
    String describe();

    @Override
    void close();
}
