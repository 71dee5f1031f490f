package io.orbitkv.pd.mooncake.internal;

import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.mooncake.te.RequestArray;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;

/**
 * Turns a {@link TransferPlan} into batches of one-sided WRITE requests: one request per span (a stretch contiguous
 * on both sides, so coalesced pages cost one request), split where a span is longer than {@code maxRequestBytes},
 * and filled into a {@link RequestArray} a batch at a time.
 *
 * <p>A request writes from the source pool's address space into the receiver's: source address = local region
 * base + offset, target = the receiver's region base (from its HELLO_OK, the same numbers its registration
 * announces) + offset. Every target is checked against the receiver's region before it is handed to the engine:
 * the gate admitted the destination runs, this makes sure the addresses computed from them stay inside too.
 */
public final class WriteBatcher {

    private final TransferPlan plan;
    private final long[] sourceBases;
    private final long[] targetBases;
    private final long[] targetLengths;
    private final int segment;
    private final long maxRequestBytes;
    private int span;
    private long within;
    private long issuedBytes;
    private long issuedRequests;

    /**
     * @param sourceBases   base address of every source region (the local pool)
     * @param targetBases   base address of every destination region in the receiver's address space
     * @param targetLengths registered length of every destination region
     * @param segment       the receiver's segment id (from {@code openSegment})
     */
    public WriteBatcher(TransferPlan plan, long[] sourceBases, long[] targetBases, long[] targetLengths, int segment, long maxRequestBytes) {
        if (maxRequestBytes < 1) {
            throw new IllegalArgumentException("maxRequestBytes must be positive, got " + maxRequestBytes);
        }
        if (sourceBases.length < plan.source().regionCount()) {
            throw new TransferException(TransferError.LAYOUT_MISMATCH, "source pool has " + sourceBases.length + " regions, the plan needs "
                    + plan.source().regionCount());
        }
        if (targetBases.length < plan.dest().regionCount() || targetLengths.length != targetBases.length) {
            throw new TransferException(TransferError.LAYOUT_MISMATCH, "the receiver announced " + targetBases.length + " regions, the plan needs "
                    + plan.dest().regionCount());
        }
        this.plan = plan;
        this.sourceBases = sourceBases.clone();
        this.targetBases = targetBases.clone();
        this.targetLengths = targetLengths.clone();
        this.segment = segment;
        this.maxRequestBytes = maxRequestBytes;
    }

    public boolean hasMore() {
        return span < plan.spans();
    }

    /** Bytes handed out in requests so far. */
    public long issuedBytes() {
        return issuedBytes;
    }

    public long issuedRequests() {
        return issuedRequests;
    }

    /**
     * Fills requests {@code 0..n-1} of {@code into} with the next pieces of the plan, {@code n <= max}.
     *
     * @return the number of requests filled (0 when the plan is exhausted)
     * @throws TransferException {@link TransferError#OUT_OF_RANGE} when a target would leave the receiver's region
     */
    public int fill(RequestArray into, int max) {
        int n = 0;
        int limit = Math.min(max, into.capacity());
        while (n < limit && span < plan.spans()) {
            int region = plan.spanRegion(span);
            long length = Math.min(maxRequestBytes, plan.spanLength(span) - within);
            long src = plan.spanSourceOffset(span) + within;
            long dst = plan.spanDestOffset(span) + within;
            if (dst < 0 || dst + length > targetLengths[region]) {
                throw new TransferException(TransferError.OUT_OF_RANGE, "a write of " + length + " bytes at offset " + dst + " of region " + region
                        + " would leave the receiver's registered region of " + targetLengths[region] + " bytes");
            }
            into.write(n++, sourceBases[region] + src, segment, targetBases[region] + dst, length);
            issuedBytes += length;
            within += length;
            if (within == plan.spanLength(span)) {
                span++;
                within = 0;
            }
        }
        issuedRequests += n;
        return n;
    }
}
