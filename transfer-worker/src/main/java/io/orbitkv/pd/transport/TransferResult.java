package io.orbitkv.pd.transport;

/**
 * A push the receiver acknowledged: every byte is in the destination pages.
 *
 * @param bytes          bytes acknowledged
 * @param durationNanos  from the start of the push to the last acknowledgement
 * @param transport      which transport moved them
 * @param connections    connections (streams) used
 */
public record TransferResult(long bytes, long durationNanos, String transport, int connections) {

    public double gigabytesPerSecond() {
        return durationNanos == 0 ? 0 : bytes / (double) durationNanos;
    }
}
