package io.orbitkv.pd.mooncake.te;

import static java.lang.foreign.ValueLayout.ADDRESS;
import static java.lang.foreign.ValueLayout.JAVA_INT;
import static java.lang.foreign.ValueLayout.JAVA_LONG;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;

/**
 * A native array of {@code struct transfer_request}, filled in place and handed to {@code submitTransfer} as is.
 * Owned by the push that fills it (one thread); the memory belongs to the arena it was made in.
 */
public final class RequestArray {

    private static final long SIZE = MooncakeEngine.TRANSFER_REQUEST.byteSize();

    private final MemorySegment memory;
    private final int capacity;

    public RequestArray(Arena arena, int capacity) {
        this.capacity = capacity;
        this.memory = arena.allocate(MooncakeEngine.TRANSFER_REQUEST, capacity);
    }

    public int capacity() {
        return capacity;
    }

    /** The array, for {@link TransferEngine#submit}. */
    public MemorySegment segment() {
        return memory;
    }

    /** Request {@code i}: a WRITE of {@code length} bytes from {@code source} to {@code targetAddress} in segment {@code target}. */
    public void write(int i, long source, int target, long targetAddress, long length) {
        set(i, MooncakeEngine.OPCODE_WRITE, source, target, targetAddress, length);
    }

    public void set(int i, int opcode, long source, int target, long targetOffset, long length) {
        long base = i * SIZE;
        memory.set(JAVA_INT, base + MooncakeEngine.REQ_OPCODE, opcode);
        memory.set(ADDRESS, base + MooncakeEngine.REQ_SOURCE, MemorySegment.ofAddress(source));
        memory.set(JAVA_INT, base + MooncakeEngine.REQ_TARGET_ID, target);
        memory.set(JAVA_LONG, base + MooncakeEngine.REQ_TARGET_OFFSET, targetOffset);
        memory.set(JAVA_LONG, base + MooncakeEngine.REQ_LENGTH, length);
    }

    public int opcode(int i) {
        return memory.get(JAVA_INT, i * SIZE + MooncakeEngine.REQ_OPCODE);
    }

    public long source(int i) {
        return memory.get(ADDRESS, i * SIZE + MooncakeEngine.REQ_SOURCE).address();
    }

    public int target(int i) {
        return memory.get(JAVA_INT, i * SIZE + MooncakeEngine.REQ_TARGET_ID);
    }

    /** The target address (the C field is called target_offset; for host memory it is the peer's absolute address). */
    public long targetOffset(int i) {
        return memory.get(JAVA_LONG, i * SIZE + MooncakeEngine.REQ_TARGET_OFFSET);
    }

    public long length(int i) {
        return memory.get(JAVA_LONG, i * SIZE + MooncakeEngine.REQ_LENGTH);
    }

    /** Reads a request array someone else filled (an engine implemented in Java reads what was submitted). */
    public static long sourceAt(MemorySegment requests, int i) {
        return requests.get(ADDRESS, i * SIZE + MooncakeEngine.REQ_SOURCE).address();
    }

    public static int targetAt(MemorySegment requests, int i) {
        return requests.get(JAVA_INT, i * SIZE + MooncakeEngine.REQ_TARGET_ID);
    }

    public static long targetOffsetAt(MemorySegment requests, int i) {
        return requests.get(JAVA_LONG, i * SIZE + MooncakeEngine.REQ_TARGET_OFFSET);
    }

    public static long lengthAt(MemorySegment requests, int i) {
        return requests.get(JAVA_LONG, i * SIZE + MooncakeEngine.REQ_LENGTH);
    }

    public static int opcodeAt(MemorySegment requests, int i) {
        return requests.get(JAVA_INT, i * SIZE + MooncakeEngine.REQ_OPCODE);
    }

    /** Reads {@link TaskStatus} out of a {@code transfer_status}. */
    public static TaskStatus statusOf(MemorySegment status) {
        return TaskStatus.of(status.get(JAVA_INT, MooncakeEngine.STATUS_STATUS));
    }

    public static long transferredOf(MemorySegment status) {
        return status.get(JAVA_LONG, MooncakeEngine.STATUS_BYTES);
    }

    /** Writes a {@code transfer_status} (for engines implemented in Java). */
    public static void putStatus(MemorySegment status, TaskStatus s, long transferred) {
        status.set(JAVA_INT, MooncakeEngine.STATUS_STATUS, s.code());
        status.set(JAVA_LONG, MooncakeEngine.STATUS_BYTES, transferred);
    }
}
