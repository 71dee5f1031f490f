package io.orbitkv.pd.worker.internal;

import io.orbitkv.pd.engine.client.api.ApiProtocol.PrefillProgress;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.transport.SourceReadiness;
import java.util.HashMap;
import java.util.Map;

/**
 * What of one prefill's KV its engine has reported computed ({@code prefill_progress}, then {@code prefill_completed}):
 * the source side of a push sent layer by layer. A piece — a source region's bytes, i.e. some pages of one layer — is
 * ready when every prompt block it covers is computed in that layer. Progress only moves forward (a late, older report
 * changes nothing). Thread-safe: the engine API's thread reports, the push's stripes wait.
 */
final class PrefillReadiness implements SourceReadiness {

    private final KvGeometry geometry;
    private final int blockTokens;
    /** Source block id → its place in the prompt (block 0 holds tokens 0..block-1). */
    private final Map<Integer, Integer> promptIndex = new HashMap<>();
    private PrefillProgress progress;
    private boolean complete;
    private Integer firstToken;
    private String failure;
    private long version;

    /** {@code sourceBlocks}: the prompt's pages in token order, as the engine's first progress named them. */
    PrefillReadiness(KvGeometry geometry, int[] sourceBlocks, PrefillProgress first) {
        this.geometry = geometry;
        this.blockTokens = geometry.blockSizeTokens();
        for (int i = 0; i < sourceBlocks.length; i++) {
            promptIndex.put(sourceBlocks[i], i);
        }
        this.progress = first;
    }

    /** A newer report: taken when it says more than the current one ({@link PrefillProgress#advances}). */
    synchronized void advance(PrefillProgress p) {
        if (p.advances(progress)) {
            progress = p;
            version++;
            notifyAll();
        }
    }

    /** The prefill completed: everything is computed; {@code first}: its sampled token (null if the engine did not say). */
    synchronized void complete(Integer first) {
        if (failure != null) {
            return; // stopped: a push that was told to stop does not start again
        }
        complete = true;
        firstToken = first;
        version++;
        notifyAll();
    }

    /** The source will never be complete (the prefill failed mid-way, the push was aborted): waiting pushes stop. */
    synchronized void fail(String why) {
        if (failure == null && !complete) {
            failure = why;
            version++;
            notifyAll();
        }
    }

    @Override
    public synchronized long readyBytes(int region, long offset, long length) {
        if (complete) {
            return length;
        }
        long page = geometry.pageBytes();
        int layer = geometry.layerOf(region);
        long ready = 0;
        for (long at = offset; ready < length; at = (at / page + 1) * page) {
            Integer index = promptIndex.get((int) (at / page));
            if (index == null || !progress.complete(index, blockTokens, layer)) {
                break;
            }
            ready = Math.min(length, (at / page + 1) * page - offset);
        }
        return ready;
    }

    @Override
    public synchronized long version() {
        return version;
    }

    @Override
    public synchronized boolean awaitChange(long seen, long timeoutMs) throws InterruptedException {
        long end = System.nanoTime() + timeoutMs * 1_000_000;
        while (version == seen) {
            long left = (end - System.nanoTime()) / 1_000_000;
            if (left <= 0) {
                return false;
            }
            wait(left);
        }
        return true;
    }

    @Override
    public synchronized boolean complete() {
        return complete;
    }

    @Override
    public synchronized boolean awaitComplete(long timeoutMs) throws InterruptedException {
        long end = System.nanoTime() + timeoutMs * 1_000_000;
        while (!complete && failure == null) {
            long left = (end - System.nanoTime()) / 1_000_000;
            if (left <= 0) {
                return false;
            }
            wait(left);
        }
        return complete;
    }

    @Override
    public synchronized Integer firstToken() {
        return firstToken;
    }

    @Override
    public synchronized String failure() {
        return failure;
    }
}
