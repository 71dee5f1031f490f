package io.orbitkv.pd.transport;

import io.orbitkv.pd.tracing.Marks;

/**
 * A push the receiver acknowledged: every byte is in the destination pages.
 *
 * @param bytes          bytes acknowledged
 * @param durationNanos  from the start of the push to the last acknowledgement
 * @param transport      which transport moved them
 * @param connections    connections (streams) used
 * @param marks          the push's steps on the wall clock, as far as the transport knows them ({@link #CONNECTED},
 *                       {@link #ADMITTED}, {@link #WRITTEN}, {@link #ACKED}); the latest stripe's when it used several
 */
public record TransferResult(long bytes, long durationNanos, String transport, int connections, Marks marks) {

    /** Every connection the push uses is ready (pooled, or connected and through its handshake). */
    public static final String CONNECTED = Marks.CONNECTED;
    /** The receiver admitted the push (token, epochs, fences, bounds checked) and will take its bytes. */
    public static final String ADMITTED = Marks.ADMITTED;
    /** The last page byte was handed to the wire (or the copy engine). */
    public static final String WRITTEN = Marks.WRITTEN;
    /** The receiver acknowledged every byte in place. */
    public static final String ACKED = Marks.ACKED;

    /** A result without step marks but its acknowledgement, now. */
    public TransferResult(long bytes, long durationNanos, String transport, int connections) {
        this(bytes, durationNanos, transport, connections, Marks.empty().mark(ACKED));
    }

    public double gigabytesPerSecond() {
        return durationNanos == 0 ? 0 : bytes / (double) durationNanos;
    }
}
