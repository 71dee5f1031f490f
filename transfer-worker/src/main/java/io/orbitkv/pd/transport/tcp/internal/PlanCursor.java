package io.orbitkv.pd.transport.tcp.internal;

import io.orbitkv.pd.kv.TransferPlan;

/**
 * Walks the byte range {@code [from, to)} of a plan's spans laid end to end, handing out pieces no longer than
 * asked: how one stripe turns its share of the plan into WRITE segments.
 */
public final class PlanCursor {

    private final TransferPlan plan;
    private int span;
    private long within;
    private long remaining;
    private int region;
    private long sourceOffset;
    private long destOffset;

    public PlanCursor(TransferPlan plan, long from, long to) {
        if (from < 0 || to < from || to > plan.totalBytes()) {
            throw new IllegalArgumentException("range [" + from + ", " + to + ") outside a plan of " + plan.totalBytes() + " bytes");
        }
        this.plan = plan;
        this.remaining = to - from;
        long pos = 0;
        while (span < plan.spans() && pos + plan.spanLength(span) <= from) {
            pos += plan.spanLength(span);
            span++;
        }
        within = from - pos;
    }

    public boolean hasMore() {
        return remaining > 0;
    }

    /** The region of the bytes {@link #take} hands out next. */
    public int nextRegion() {
        return plan.spanRegion(span);
    }

    /** The source offset of the bytes {@link #take} hands out next. */
    public long nextSourceOffset() {
        return plan.spanSourceOffset(span) + within;
    }

    /** How many bytes {@link #take}{@code (max)} would hand out. */
    public long nextLength(long max) {
        return Math.min(Math.min(max, remaining), plan.spanLength(span) - within);
    }

    /** Takes up to {@code max} bytes from the current span; then {@link #region()} and the offsets describe them. */
    public long take(long max) {
        long len = Math.min(Math.min(max, remaining), plan.spanLength(span) - within);
        region = plan.spanRegion(span);
        sourceOffset = plan.spanSourceOffset(span) + within;
        destOffset = plan.spanDestOffset(span) + within;
        within += len;
        remaining -= len;
        if (within == plan.spanLength(span)) {
            span++;
            within = 0;
        }
        return len;
    }

    public int region() {
        return region;
    }

    public long sourceOffset() {
        return sourceOffset;
    }

    public long destOffset() {
        return destOffset;
    }
}
