package io.orbitkv.pd.mooncake;

import io.orbitkv.pd.mooncake.internal.AdmissionClient;
import io.orbitkv.pd.mooncake.internal.WriteBatcher;
import io.orbitkv.pd.mooncake.te.MooncakeEngine;
import io.orbitkv.pd.mooncake.te.MooncakeException;
import io.orbitkv.pd.mooncake.te.RequestArray;
import io.orbitkv.pd.mooncake.te.ResultCode;
import io.orbitkv.pd.mooncake.te.TaskStatus;
import io.orbitkv.pd.mooncake.te.TransferEngine;
import io.orbitkv.pd.transport.SourceReadiness;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import java.io.IOException;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.util.ArrayDeque;
import java.util.Iterator;
import java.util.concurrent.locks.LockSupport;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The submit/poll loop of one admitted push: submits its WRITE requests {@code batch-requests} per batch, up to
 * {@code max-inflight-requests} in flight, and polls them in order with a pause that doubles from {@code poll-min} to
 * {@code poll-max} while nothing completes. The first failure stops the submitting; {@link #run} returns only when every
 * submitted request finished (or {@code drain-timeout} passed: {@link #leaked} says how many did not). Confined to the
 * push's thread, like the arena its request arrays live in. With a {@link SourceReadiness} (layer by layer) it submits
 * what the engine has computed; with nothing computed and nothing in flight it waits for the engine's next report.
 */
final class WritePump {

    private static final Logger log = LoggerFactory.getLogger(MooncakeTransport.class);

    private final MooncakeTransfer transfer;
    private final MooncakeConfig config;
    private final TransferEngine engine;
    private final AdmissionClient client;
    private final int push;
    private final WriteBatcher batcher;
    private final SourceReadiness ready;
    private final ArrayDeque<Batch> inflight = new ArrayDeque<>();
    private final ArrayDeque<RequestArray> spare = new ArrayDeque<>();
    private final MemorySegment status;
    private final Arena arena;
    private int inflightRequests;
    /** Bytes of the requests that completed. */
    long completed;
    /** Requests still unfinished when the drain timed out: their bytes may still land. */
    int leaked;
    /** The first failure, or null. */
    TransferException failure;
    /** The receiver sent STOP (a fence). */
    boolean stoppedByReceiver;
    /** The admission connection broke during the push. */
    boolean connectionBroken;

    WritePump(MooncakeTransfer transfer, Arena arena, AdmissionClient client, int push, WriteBatcher batcher, SourceReadiness ready) {
        this.transfer = transfer;
        this.config = transfer.config();
        this.engine = transfer.engine();
        this.arena = arena;
        this.client = client;
        this.push = push;
        this.batcher = batcher;
        this.ready = ready;
        this.status = arena.allocate(MooncakeEngine.TRANSFER_STATUS);
    }

    private void fail(TransferException e) {
        if (failure == null) {
            failure = e;
        }
    }

    void run() {
        long pollMin = config.pollMin().toNanos();
        long pollMax = config.pollMax().toNanos();
        long pause = pollMin;
        long drainDeadline = 0;
        while (true) {
            boolean progress = false;
            if (failure == null) {
                checkStop();
            }
            long seen = ready == null ? 0 : ready.version();
            boolean waiting = false; // for the engine: nothing computed is left to submit
            while (failure == null && batcher.hasMore()
                    && (inflight.isEmpty() || inflightRequests + config.batchRequests() <= config.maxInflightRequests())) {
                if (!submitNext()) {
                    waiting = true;
                    break;
                }
                progress = true;
            }
            progress |= poll();
            if (inflight.isEmpty() && (failure != null || !batcher.hasMore())) {
                return;
            }
            if (waiting && inflight.isEmpty() && failure == null) {
                awaitSource(seen);
                continue;
            }
            if (failure != null) {
                long now = System.nanoTime();
                if (drainDeadline == 0) {
                    drainDeadline = now + config.drainTimeout().toNanos();
                } else if (now > drainDeadline) {
                    leaked = inflight.stream().mapToInt(b -> b.count - b.next).sum();
                    return;
                }
            }
            if (progress) {
                pause = pollMin;
            } else {
                LockSupport.parkNanos(pause);
                pause = Math.min(pause * 2, pollMax);
            }
        }
    }

    /** Nothing in flight, nothing computed to send: waits a slice for the engine's next report (stops are checked around it). */
    private void awaitSource(long seen) {
        try {
            ready.awaitChange(seen, 20);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            fail(new TransferException(TransferError.ABORTED, "aborted: interrupted while the prefill computed"));
        }
    }

    private void checkStop() {
        TransferException stop = transfer.stopCause();
        if (stop == null && ready != null && ready.failure() != null) {
            stop = new TransferException(TransferError.ABORTED, "aborted: " + ready.failure());
        }
        if (stop != null) {
            fail(stop);
            return;
        }
        try {
            TransferException fenced = client.stopped(push);
            if (fenced != null) {
                stoppedByReceiver = true;
                fail(fenced);
            }
        } catch (IOException e) {
            connectionBroken = true;
            fail(new TransferException(TransferError.CONNECTION_LOST, "admission connection to " + transfer.peer() + " lost during the push: "
                    + e.getMessage(), e));
        }
    }

    /** Submits the next batch; false when nothing is computed yet that is not submitted (nothing submitted then). */
    private boolean submitNext() {
        RequestArray a = spare.isEmpty() ? new RequestArray(arena, config.batchRequests()) : spare.pop();
        int n;
        long batch;
        try {
            n = batcher.fill(a, config.batchRequests(), ready);
            if (n == 0) {
                spare.push(a);
                return false;
            }
            batch = engine.allocateBatch(n);
        } catch (TransferException e) {
            spare.push(a);
            fail(e);
            return true;
        } catch (MooncakeException e) {
            spare.push(a);
            fail(new TransferException(e.kind(), e.getMessage(), e));
            return true;
        }
        int rc = engine.submit(batch, a.segment(), n);
        Batch b = new Batch(batch, n, a, rc != 0);
        inflight.add(b);
        inflightRequests += n;
        if (rc != 0) {
            fail(new TransferException(ResultCode.of(rc).kind(), "submitTransfer of " + n + " writes to " + transfer.peer() + " failed: "
                    + ResultCode.describe(rc)));
        }
        return true;
    }

    /** Polls every batch in order; frees the finished ones. True if anything finished. */
    private boolean poll() {
        boolean progress = false;
        for (Iterator<Batch> it = inflight.iterator(); it.hasNext(); ) {
            Batch b = it.next();
            while (b.next < b.count) {
                int rc = engine.status(b.id, b.next, status);
                if (rc != 0) {
                    if (!b.submitFailed) {
                        fail(new TransferException(TransferError.INTERNAL, "getTransferStatus of write " + b.next + " failed: "
                                + ResultCode.describe(rc)));
                        b.leak = true;
                    }
                    // A submit that failed part-way: the engine knows only the tasks it created.
                    b.count = b.next;
                    break;
                }
                TaskStatus s = RequestArray.statusOf(status);
                if (s == TaskStatus.COMPLETED) {
                    completed += b.requests.length(b.next);
                    b.next++;
                    progress = true;
                } else if (s.finished()) {
                    fail(new TransferException(s.error(), "Mooncake reports " + s + " for a write of " + b.requests.length(b.next)
                            + " bytes to 0x" + Long.toHexString(b.requests.targetOffset(b.next)) + " in " + transfer.peer()
                            + " (the engines' logs on stderr say why)"));
                    b.next++;
                    progress = true;
                } else {
                    if (s == TaskStatus.TIMEOUT || s == TaskStatus.UNKNOWN) {
                        fail(new TransferException(s.error(), "Mooncake reports " + s + " for a write to " + transfer.peer()));
                    }
                    break;
                }
            }
            if (b.next >= b.count) {
                if (!b.leak) {
                    int rc = engine.freeBatch(b.id);
                    if (rc != 0) {
                        log.atWarn().addKeyValue("orderId", transfer.request().orderId()).log("freeBatchID failed: " + ResultCode.describe(rc));
                    }
                }
                inflightRequests -= b.submitted;
                spare.push(b.requests);
                it.remove();
                progress = true;
            }
        }
        return progress;
    }

    /** A submitted batch and how far polling got. */
    private static final class Batch {
        final long id;
        final int submitted;
        final RequestArray requests;
        final boolean submitFailed;
        int count;
        int next;
        boolean leak;

        Batch(long id, int count, RequestArray requests, boolean submitFailed) {
            this.id = id;
            this.submitted = count;
            this.count = count;
            this.requests = requests;
            this.submitFailed = submitFailed;
        }
    }
}
