package io.orbitkv.pd.mooncake.te;

import java.lang.foreign.MemorySegment;
import java.util.List;

/**
 * What the {@code mooncake} transport needs from a transfer engine: one engine per worker, its memory registered once,
 * peers' segments opened by name, batches of one-sided WRITEs submitted and polled. {@link NativeTransferEngine} is
 * the real one (Mooncake through FFM); tests also run the transport's protocol on an in-process engine.
 *
 * <p>Data-path calls ({@link #submit}, {@link #status}, {@link #freeBatch}) return the engine's raw result code (0 is
 * success, see {@link ResultCode}) and never throw for a failed transfer; setup calls throw {@link MooncakeException}.
 * Requests are laid out as {@link MooncakeEngine#TRANSFER_REQUEST} (see {@link RequestArray}), statuses as
 * {@link MooncakeEngine#TRANSFER_STATUS}. Thread-safe: pushes submit and poll from their own threads.
 */
public interface TransferEngine extends AutoCloseable {

    /** A range of host memory. */
    record Range(long address, long length) { }

    /** A notification a peer engine sent ({@code notify_msg_t}). */
    record Notification(String name, String message) { }

    /** {@code rdma} or {@code tcp}: the protocol the engine moves bytes with. */
    String protocol();

    /** The name peers open this engine's registered memory by (P2P handshake: {@code host:port} of its RPC listener). */
    String segmentName();

    /** Registers ranges; {@code remoteAccessible}: peers may WRITE (and READ) them with one-sided operations. */
    void registerMemory(List<Range> ranges, boolean remoteAccessible);

    /** Unregisters ranges registered before (by their start address). */
    void unregisterMemory(List<Range> ranges);

    /**
     * Opens a peer's segment: the id requests target. {@code fresh} bypasses the engine's descriptor cache (the peer
     * restarted).
     *
     * @throws MooncakeException when the peer cannot be reached or has no such segment
     */
    int openSegment(String name, boolean fresh);

    /** A batch for up to {@code capacity} requests. */
    long allocateBatch(int capacity);

    /** Submits {@code count} requests from {@code requests}; the engine copies them before returning. */
    int submit(long batch, MemorySegment requests, int count);

    /** The state of request {@code task} of a batch into {@code status}; a non-zero result for a task that does not exist. */
    int status(long batch, long task, MemorySegment status);

    /** Frees a batch whose tasks all finished; {@code Status::kBatchBusy} otherwise. */
    int freeBatch(long batch);

    /** Notifications received from peers since the last call. */
    List<Notification> notifications();

    /** Sends a notification to the engine behind an opened segment. */
    void notify(int segment, String name, String message);

    /** Stops the engine; registered memory may be freed afterwards. Idempotent. */
    @Override
    void close();
}
