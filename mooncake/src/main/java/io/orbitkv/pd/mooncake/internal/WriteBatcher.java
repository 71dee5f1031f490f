package io.orbitkv.pd.mooncake.internal;

import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.mooncake.te.RequestArray;
import io.orbitkv.pd.transport.SourceReadiness;
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
 *
 * <p>A batcher covers a range of the plan's spans (a push sent layer by layer sends all but the last layer in one part,
 * the last in another) and keeps a cursor per region: with a {@link SourceReadiness} each fill takes what the engine has
 * computed, lowest layer first, so a chunked prefill's first chunk goes in every layer before the next chunk exists.
 */
public final class WriteBatcher {

    private final TransferPlan plan;
    private final long[] sourceBases;
    private final long[] targetBases;
    private final long[] targetLengths;
    private final int segment;
    private final long maxRequestBytes;
    /** Per region the range touches, in plan order: the region, its next span, its end span, and how far into the next. */
    private final int[] region;
    private final int[] next;
    private final int[] end;
    private final long[] within;
    private final long bytes;
    private int firstOpen;
    private long issuedBytes;
    private long issuedRequests;

    /**
     * @param sourceBases   base address of every source region (the local pool)
     * @param targetBases   base address of every destination region in the receiver's address space
     * @param targetLengths registered length of every destination region
     * @param segment       the receiver's segment id (from {@code openSegment})
     */
    public WriteBatcher(TransferPlan plan, long[] sourceBases, long[] targetBases, long[] targetLengths, int segment, long maxRequestBytes) {
        this(plan, 0, plan.spans(), sourceBases, targetBases, targetLengths, segment, maxRequestBytes);
    }

    /** Spans {@code [fromSpan, toSpan)} of {@code plan} only. */
    public WriteBatcher(TransferPlan plan, int fromSpan, int toSpan, long[] sourceBases, long[] targetBases, long[] targetLengths, int segment,
                        long maxRequestBytes) {
        if (fromSpan < 0 || toSpan > plan.spans() || fromSpan > toSpan) {
            throw new IllegalArgumentException("spans " + fromSpan + ".." + toSpan + " of a plan of " + plan.spans());
        }
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
        int groups = 0;
        long total = 0;
        for (int i = fromSpan; i < toSpan; i++) {
            if (i == fromSpan || plan.spanRegion(i) != plan.spanRegion(i - 1)) {
                groups++;
            }
            total += plan.spanLength(i);
        }
        this.bytes = total;
        region = new int[groups];
        next = new int[groups];
        end = new int[groups];
        within = new long[groups];
        for (int i = fromSpan, k = -1; i < toSpan; i++) {
            if (i == fromSpan || plan.spanRegion(i) != plan.spanRegion(i - 1)) {
                k++;
                region[k] = plan.spanRegion(i);
                next[k] = i;
            }
            end[k] = i + 1;
        }
    }

    /** Bytes of the spans this batcher covers. */
    public long bytes() {
        return bytes;
    }

    public boolean hasMore() {
        while (firstOpen < region.length && next[firstOpen] == end[firstOpen]) {
            firstOpen++;
        }
        return firstOpen < region.length;
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
        return fill(into, max, null);
    }

    /**
     * As {@link #fill(RequestArray, int)}, taking only what {@code ready} says is computed (null: everything), lowest
     * region first; 0 when nothing not yet issued is computed.
     */
    public int fill(RequestArray into, int max, SourceReadiness ready) {
        int n = 0;
        int limit = Math.min(max, into.capacity());
        for (int k = firstOpen; k < region.length && n < limit; k++) {
            int r = region[k];
            while (n < limit && next[k] < end[k]) {
                int sp = next[k];
                long length = Math.min(maxRequestBytes, plan.spanLength(sp) - within[k]);
                long src = plan.spanSourceOffset(sp) + within[k];
                if (ready != null) {
                    length = ready.readyBytes(r, src, length);
                    if (length == 0) {
                        break; // this layer waits for the engine; the next may have pages to send
                    }
                }
                long dst = plan.spanDestOffset(sp) + within[k];
                if (dst < 0 || dst + length > targetLengths[r]) {
                    throw new TransferException(TransferError.OUT_OF_RANGE, "a write of " + length + " bytes at offset " + dst + " of region " + r
                            + " would leave the receiver's registered region of " + targetLengths[r] + " bytes");
                }
                into.write(n++, sourceBases[r] + src, segment, targetBases[r] + dst, length);
                issuedBytes += length;
                within[k] += length;
                if (within[k] == plan.spanLength(sp)) {
                    next[k]++;
                    within[k] = 0;
                }
            }
        }
        issuedRequests += n;
        return n;
    }
}
