package io.orbitkv.pd.transport;

import io.orbitkv.pd.kv.KvGeometry;

/**
 * A prefill as a test drives it: how many layers are computed (every page of each), then complete or failed. Shared by the
 * transports' layer-by-layer tests (mooncake, cuda).
 */
public final class LayersComputed implements SourceReadiness {

    private final KvGeometry g;
    private int layers;
    private boolean complete;
    private Integer first;
    private String failure;
    private long version;

    public LayersComputed(KvGeometry g) {
        this.g = g;
    }

    public synchronized void layers(int n) {
        layers = n;
        version++;
        notifyAll();
    }

    public synchronized void complete(int firstToken) {
        layers = g.numLayers();
        complete = true;
        first = firstToken;
        version++;
        notifyAll();
    }

    public synchronized void fail(String why) {
        failure = why;
        version++;
        notifyAll();
    }

    @Override
    public synchronized long readyBytes(int region, long offset, long length) {
        return g.layerOf(region) < layers ? length : 0;
    }

    @Override
    public synchronized long version() {
        return version;
    }

    @Override
    public synchronized boolean awaitChange(long seen, long timeoutMs) throws InterruptedException {
        long until = System.currentTimeMillis() + timeoutMs;
        while (version == seen && System.currentTimeMillis() < until) {
            wait(Math.max(1, until - System.currentTimeMillis()));
        }
        return version != seen;
    }

    @Override
    public synchronized boolean complete() {
        return complete;
    }

    @Override
    public synchronized boolean awaitComplete(long timeoutMs) throws InterruptedException {
        long until = System.currentTimeMillis() + timeoutMs;
        while (!complete && failure == null && System.currentTimeMillis() < until) {
            wait(Math.max(1, until - System.currentTimeMillis()));
        }
        return complete;
    }

    @Override
    public synchronized Integer firstToken() {
        return first;
    }

    @Override
    public synchronized String failure() {
        return failure;
    }
}
