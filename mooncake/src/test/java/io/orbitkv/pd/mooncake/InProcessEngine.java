package io.orbitkv.pd.mooncake;

import io.orbitkv.pd.mooncake.te.MooncakeException;
import io.orbitkv.pd.mooncake.te.RequestArray;
import io.orbitkv.pd.mooncake.te.TaskStatus;
import io.orbitkv.pd.mooncake.te.TransferEngine;
import java.lang.foreign.MemorySegment;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import java.util.function.LongPredicate;

/**
 * A transfer engine in this JVM with Mooncake's contract, for running the mooncake transport's protocol where the
 * library is not installed: one-sided writes copy straight into the target engine's registered memory on a copier
 * thread, a write outside the target's remote-accessible registrations fails (as Mooncake's TCP server refuses
 * addresses outside its buffers), batches can be freed only when every task finished. Tests can slow writes down and
 * make chosen ones fail.
 */
final class InProcessEngine implements TransferEngine {

    private static final Map<String, InProcessEngine> FABRIC = new ConcurrentHashMap<>();
    private static final AtomicInteger NAMES = new AtomicInteger();

    private final String name = "inproc-" + NAMES.incrementAndGet() + ":1";
    private final List<Range> remote = new CopyOnWriteArrayList<>();
    private final List<Range> local = new CopyOnWriteArrayList<>();
    private final Map<Integer, InProcessEngine> segments = new ConcurrentHashMap<>();
    private final AtomicInteger nextSegment = new AtomicInteger(1);
    private final Map<Long, Batch> batches = new ConcurrentHashMap<>();
    private final AtomicLong nextBatch = new AtomicLong(1);
    private final ExecutorService copier = Executors.newSingleThreadExecutor(r -> Thread.ofPlatform().daemon().name(name + "-copier").unstarted(r));
    private final ConcurrentLinkedQueue<Notification> inbox = new ConcurrentLinkedQueue<>();
    /** Writes that landed, over the engine's life. */
    final AtomicLong writesLanded = new AtomicLong();
    final AtomicInteger submits = new AtomicInteger();
    final List<Boolean> segmentOpensFresh = new CopyOnWriteArrayList<>();
    volatile long writeDelayNanos;
    volatile LongPredicate failTarget = a -> false;
    private volatile boolean closed;

    private record Batch(int capacity, AtomicIntegerArray states, AtomicInteger size) { }

    InProcessEngine() {
        FABRIC.put(name, this);
    }

    @Override
    public String protocol() {
        return "tcp";
    }

    @Override
    public String segmentName() {
        return name;
    }

    @Override
    public void registerMemory(List<Range> ranges, boolean remoteAccessible) {
        (remoteAccessible ? remote : local).addAll(ranges);
    }

    @Override
    public void unregisterMemory(List<Range> ranges) {
        remote.removeAll(ranges);
        local.removeAll(ranges);
    }

    @Override
    public int openSegment(String segment, boolean fresh) {
        InProcessEngine peer = FABRIC.get(segment);
        if (peer == null || peer.closed) {
            throw new MooncakeException("openSegment", -1, "segment '" + segment + "': not in this process");
        }
        segmentOpensFresh.add(fresh);
        int id = nextSegment.getAndIncrement();
        segments.put(id, peer);
        return id;
    }

    @Override
    public long allocateBatch(int capacity) {
        long id = nextBatch.getAndIncrement();
        batches.put(id, new Batch(capacity, new AtomicIntegerArray(capacity), new AtomicInteger()));
        return id;
    }

    @Override
    public int submit(long batch, MemorySegment requests, int count) {
        Batch b = batches.get(batch);
        if (b == null || b.size().get() + count > b.capacity()) {
            return 1;
        }
        submits.incrementAndGet();
        int first = b.size().getAndAdd(count);
        for (int i = 0; i < count; i++) {
            int task = first + i;
            long src = RequestArray.sourceAt(requests, i);
            long dst = RequestArray.targetOffsetAt(requests, i);
            long len = RequestArray.lengthAt(requests, i);
            InProcessEngine peer = segments.get(RequestArray.targetAt(requests, i));
            b.states().set(task, TaskStatus.WAITING.code());
            copier.execute(() -> {
                long d = writeDelayNanos;
                if (d > 0) {
                    LockSupport.parkNanos(d);
                }
                if (peer == null || peer.closed || !peer.accepts(dst, len) || failTarget.test(dst)) {
                    b.states().set(task, TaskStatus.FAILED.code());
                    return;
                }
                MemorySegment.copy(address(src, len), 0, address(dst, len), 0, len);
                writesLanded.incrementAndGet();
                b.states().set(task, TaskStatus.COMPLETED.code());
            });
        }
        return 0;
    }

    @SuppressWarnings("restricted")
    private static MemorySegment address(long a, long len) {
        return MemorySegment.ofAddress(a).reinterpret(len);
    }

    private boolean accepts(long address, long length) {
        for (Range r : remote) {
            if (address >= r.address() && address + length <= r.address() + r.length()) {
                return true;
            }
        }
        return false;
    }

    @Override
    public int status(long batch, long task, MemorySegment status) {
        Batch b = batches.get(batch);
        if (b == null || task >= b.size().get()) {
            return 1;
        }
        RequestArray.putStatus(status, TaskStatus.of(b.states().get((int) task)), 0);
        return 0;
    }

    @Override
    public int freeBatch(long batch) {
        Batch b = batches.get(batch);
        if (b == null) {
            return 1;
        }
        for (int i = 0; i < b.size().get(); i++) {
            int s = b.states().get(i);
            if (s != TaskStatus.COMPLETED.code() && s != TaskStatus.FAILED.code()) {
                return 4;
            }
        }
        batches.remove(batch);
        return 0;
    }

    /** Batches allocated and not freed. */
    int openBatches() {
        return batches.size();
    }

    @Override
    public List<Notification> notifications() {
        List<Notification> out = new ArrayList<>();
        for (Notification n = inbox.poll(); n != null; n = inbox.poll()) {
            out.add(n);
        }
        return out;
    }

    @Override
    public void notify(int segment, String n, String message) {
        segments.get(segment).inbox.add(new Notification(n, message));
    }

    @Override
    public void close() {
        if (!closed) {
            closed = true;
            FABRIC.remove(name);
            copier.shutdown();
            try {
                copier.awaitTermination(10, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }
    }
}
