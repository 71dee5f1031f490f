package io.orbitkv.pd.proxy.internal;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The request ids a client named (x-request-id) that this proxy admitted recently. The id is the log's key for
 * everything about the request, so an id used twice would mix two requests' facts, decisions and pages (the second
 * one's pages were never released: issue 22); the proxy refuses the reuse instead. Bounded: the last {@code capacity}
 * ids. A reuse through another proxy instance is not seen here.
 */
public final class RequestIds {

    private final Map<String, Long> recent;

    public RequestIds(int capacity) {
        this.recent = new LinkedHashMap<>(1024, 0.75f, false) {
            @Override
            protected boolean removeEldestEntry(Map.Entry<String, Long> eldest) {
                return size() > capacity;
            }
        };
    }

    /** Takes {@code id} for a new request at {@code nowMs}; false (and the time it was taken) when it was taken before. */
    public synchronized long claim(String id, long nowMs) {
        Long before = recent.putIfAbsent(id, nowMs);
        return before == null ? -1 : before;
    }

    /** Gives {@code id} back: the request it was taken for never started (nothing in the log carries it). */
    public synchronized void release(String id) {
        recent.remove(id);
    }
}
