package io.orbitkv.pd.gpu;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A {@link CopyEngine} that does on the CPU exactly what the kernel does on the GPU: encode the chunked table as the
 * kernel receives it, decode it again, and copy every entry between raw addresses. Counts launches; can hold a copy
 * until released, to test what waits for a copy in flight.
 */
@SuppressWarnings("restricted")
final class HostCopyEngine implements CopyEngine {

    final AtomicInteger launches = new AtomicInteger();
    final AtomicInteger closes = new AtomicInteger();
    final CountDownLatch entered = new CountDownLatch(1);
    private final long chunk;
    private final CountDownLatch release;
    volatile RunTable lastLaunch;

    HostCopyEngine(long chunk) {
        this(chunk, null);
    }

    /** An engine whose copies wait for {@code release} after they wrote their bytes (the event not yet complete). */
    HostCopyEngine(long chunk, CountDownLatch release) {
        this.chunk = chunk;
        this.release = release;
    }

    @Override
    public void copy(RunTable table) {
        launches.incrementAndGet();
        RunTable t = table.chunked(chunk);
        try (Arena a = Arena.ofConfined()) {
            MemorySegment encoded = a.allocate(Math.max(1, t.encodedBytes()));
            t.writeTo(encoded);
            RunTable seen = RunTable.readFrom(encoded, t.size());
            lastLaunch = seen;
            for (int i = 0; i < seen.size(); i++) {
                MemorySegment src = MemorySegment.ofAddress(seen.source(i)).reinterpret(seen.length(i));
                MemorySegment dst = MemorySegment.ofAddress(seen.dest(i)).reinterpret(seen.length(i));
                dst.copyFrom(src);
            }
        }
        entered.countDown();
        if (release != null) {
            try {
                if (!release.await(30, TimeUnit.SECONDS)) {
                    throw new IllegalStateException("test engine was never released");
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new IllegalStateException(e);
            }
        }
    }

    @Override
    public String describe() {
        return "host copy (test)";
    }

    @Override
    public void close() {
        closes.incrementAndGet();
    }
}
