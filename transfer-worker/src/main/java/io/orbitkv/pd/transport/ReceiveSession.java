package io.orbitkv.pd.transport;

import io.orbitkv.pd.kv.BlockRuns;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvPool;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.ReentrantLock;

/**
 * One admitted push at the receiver: which pages it may write, and whether it still may. A transport calls
 * {@link #beginFrame()} before it writes a frame, {@link #target} for every write in it (before touching memory),
 * and {@link #endFrame(long)} after; a fence waits for the frame in progress, so it never races a write.
 * Used by one receiving thread at a time.
 */
public final class ReceiveSession implements AutoCloseable {

    private final PushGate gate;
    private final long id;
    private final String transport;
    private final long openedNanos = System.nanoTime();
    private final PushRequest request;
    private final KvPool pool;
    private final KvGeometry geometry;
    private final BlockRuns.Intervals authorized;
    private final ReentrantLock frame = new ReentrantLock();
    private volatile TransferException stopped;
    private long bytes;
    private boolean closed;
    private volatile boolean complete;
    /** What this session wrote: a byte written twice in it is refused; at {@link #complete} it joins the push's count. */
    private final Coverage wrote;

    ReceiveSession(PushGate gate, long id, String transport, PushRequest request, KvPool pool, BlockRuns.Intervals authorized) {
        this.gate = gate;
        this.id = id;
        this.transport = transport;
        this.request = request;
        this.pool = pool;
        this.geometry = pool.geometry();
        this.authorized = authorized;
        this.wrote = new Coverage(geometry.regionCount());
    }

    public long id() {
        return id;
    }

    public PushRequest request() {
        return request;
    }

    /** The transport receiving this push. */
    public String transport() {
        return transport;
    }

    /** Enters a frame; refuses if the push was fenced since it was admitted. */
    public void beginFrame() {
        frame.lock();
        TransferException s = stopped;
        if (s != null) {
            frame.unlock();
            throw s;
        }
    }

    /** Leaves a frame that wrote {@code written} bytes. */
    public void endFrame(long written) {
        bytes += written;
        frame.unlock();
    }

    /**
     * The host memory for a write of {@code length} bytes at {@code offset} into {@code region}, after {@link #claim}
     * checked it.
     *
     * @throws TransferException {@link TransferError#OUT_OF_RANGE} naming the region and pages
     */
    public MemorySegment target(int region, long offset, long length) {
        claim(region, offset, length);
        return pool.hostRegion(region)
                .orElseThrow(() -> new TransferException(TransferError.UNSUPPORTED, pool.location() + " pool has no host view for this transport"))
                .asSlice(offset, length);
    }

    /**
     * Checks a write of {@code length} bytes at {@code offset} into {@code region} before it happens — inside the
     * registered region, inside the push's destination pages, not already written in this push — and counts it. A
     * transport that writes without {@link #target} (a device copy) claims each piece before it copies.
     *
     * @throws TransferException {@link TransferError#OUT_OF_RANGE} naming the region and pages
     */
    public void claim(int region, long offset, long length) {
        if (region < 0 || region >= geometry.regionCount()) {
            throw new TransferException(TransferError.OUT_OF_RANGE, request.describe() + ": write to region " + region + ", the pool has "
                    + geometry.regionCount() + " regions");
        }
        if (length < 1 || offset < 0 || offset > geometry.regionBytes() - length) {
            throw new TransferException(TransferError.OUT_OF_RANGE, request.describe() + ": write of " + length + " bytes at offset " + offset
                    + " is outside the registered region " + geometry.describeRegion(region) + " (" + geometry.regionBytes() + " bytes)");
        }
        long page = geometry.pageBytes();
        long first = offset / page;
        long end = (offset + length + page - 1) / page;
        if (!authorized.covers(first, end)) {
            throw new TransferException(TransferError.OUT_OF_RANGE, request.describe() + ": write to pages " + first + ".." + (end - 1) + " of "
                    + geometry.describeRegion(region) + ", which are not among the order's destination pages");
        }
        if (!wrote.add(region, offset, offset + length)) {
            throw new TransferException(TransferError.OUT_OF_RANGE, request.describe() + ": bytes " + offset + ".." + (offset + length - 1) + " of "
                    + geometry.describeRegion(region) + " written twice in one push");
        }
    }

    /**
     * The transport received everything this session announced (a tcp stripe's END, a cuda copy's event): its bytes join
     * the push's count, and only complete sessions count towards the push's landing ({@link PushGate#onLanded}); a session
     * that claimed nothing (a transport whose sender writes the memory itself, mooncake's RDMA) counts by its bytes. Null when
     * it may acknowledge; else why not — bytes another part of the same push already wrote (a piece written twice), and
     * this session then counts for nothing.
     */
    public TransferException complete() {
        TransferException twice = gate.count(this, wrote);
        complete = twice == null;
        return twice;
    }

    boolean isComplete() {
        return complete && stopped == null;
    }

    /** Bytes claimed piece by piece ({@link #claim}, {@link #target}); 0 for a transport that counts by size only. */
    public long claimedBytes() {
        return wrote.bytes();
    }

    /** Bytes written so far. */
    public long bytesWritten() {
        return bytes;
    }

    /** Why the push was stopped, or null. */
    public TransferException stoppedBy() {
        return stopped;
    }

    /** Stops the session; waits up to {@code waitMs} for a frame in progress. False if it did not finish in time. */
    boolean stop(TransferException why, long waitMs) {
        if (stopped == null) {
            stopped = why;
        }
        try {
            if (frame.tryLock(waitMs, TimeUnit.MILLISECONDS)) {
                frame.unlock();
                return true;
            }
            return false;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    @Override
    public void close() {
        if (!closed) {
            closed = true;
            gate.closed(this, System.nanoTime() - openedNanos);
        }
    }
}
