package io.orbitkv.pd.engine.sim;

import io.orbitkv.pd.engine.client.BlockAllocator;
import io.orbitkv.pd.engine.client.DecisionListener;
import io.orbitkv.pd.engine.client.RefusedDecision;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.ReleaseSide;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.LongAdder;

/**
 * The control plane's releases of this engine's pages. A {@code ReleaseDecided} frees the pages it names, unless this
 * engine holds none for the request (already freed, an earlier instance's, or forged) or, for decode pages, it names
 * another lease than the one this engine announced in its {@code DecodeReady} (stale or forged): those are refused as
 * {@link RefusedDecision}s and the pages stay held.
 */
final class PageReleases implements DecisionListener {

    private final String engineId;
    private final BlockAllocator allocator;
    private final LongAdder released;
    /**
     * Per request, the lease this engine announced in its DecodeReady ({@code leaseId#epoch}): a decode release must
     * name exactly that one (a recompute bumps the job's epoch for its own writes, not this).
     */
    private final Map<String, String> announcedLeases = new ConcurrentHashMap<>();
    /**
     * Pages ({@code P:rid}, {@code D:rid}) whose report may or may not have reached the log (a prefill report's
     * acknowledgement timed out or the connection went; a decode given up with its lease unconfirmed): held until a
     * release or the request's outcome says what the decider knew.
     */
    private final java.util.Set<String> unsure = ConcurrentHashMap.newKeySet();

    /** @param released counts the releases that freed pages */
    PageReleases(String engineId, BlockAllocator allocator, LongAdder released) {
        this.engineId = engineId;
        this.allocator = allocator;
        this.released = released;
    }

    /** This engine announced {@code leaseId} at {@code epoch} for the decode pages of {@code rid}. */
    void announced(String rid, String leaseId, long epoch) {
        announcedLeases.put(rid, leaseId + "#" + epoch);
    }

    /**
     * The report of {@code rid} behind the {@code side} pages may have been written although its acknowledgement never
     * came (a prefill report), or may never have been (a decode given up with its decode-ready unacknowledged): keep the
     * pages. Freed by a release naming them (the decider read the report), or by the request's outcome without one (it did
     * not: no push can touch them), or by {@link #giveUp} once every deadline of the request is surely past.
     */
    void unsure(ReleaseSide side, String rid) {
        unsure.add((side == ReleaseSide.PREFILL ? "P:" : "D:") + rid);
    }

    /**
     * The request's outcome came, or the fallback delay passed: pages of a report still unsure are freed (the decider
     * releases pages it knew of before the outcome, and no decider deadline reaches as far as the fallback).
     */
    void giveUp(String rid) {
        for (String owner : new String[] {"P:" + rid, "D:" + rid}) {
            if (unsure.remove(owner) && !allocator.blocksOf(owner).isEmpty()) {
                allocator.free(owner);
                released.increment();
                if (owner.startsWith("D:")) {
                    announcedLeases.remove(rid);
                }
            }
        }
    }

    @Override
    public void onOutcome(Decision d, io.orbitkv.pd.events.RequestOutcome outcome) {
        // The decider releases a request's pages before its outcome: prefill pages still held now are ones it never knew.
        giveUp(d.getRequestId());
    }

    @Override
    public void onRelease(Decision d, ReleaseDecided rel) {
        if (!engineId.equals(rel.getEngineId())) {
            return;
        }
        String rid = d.getRequestId();
        String owner = (rel.getSide() == ReleaseSide.PREFILL ? "P:" : "D:") + rid;
        if (rel.getSide() == ReleaseSide.DECODE) {
            String mine = announcedLeases.get(rid);
            String theirs = rel.getLeaseId() + "#" + rel.getLeaseEpoch();
            if (mine != null && !mine.equals(theirs)) {
                // A stale or forged release would free the pages of a request still decoding (issue 22).
                throw new RefusedDecision("STALE_LEASE", "ReleaseDecided for request " + rid + " names lease "
                        + theirs + " but " + engineId + " announced " + mine + " for it: its pages stay held");
            }
        }
        if (allocator.blocksOf(owner).isEmpty()) {
            throw new RefusedDecision("UNKNOWN_REQUEST", "ReleaseDecided (" + rel.getSide() + ") for request " + rid
                    + ": " + engineId + " holds no pages for it (already freed, an earlier instance's, or forged)");
        }
        allocator.free(owner);
        released.increment();
        unsure.remove(owner);
        if (rel.getSide() == ReleaseSide.DECODE) {
            announcedLeases.remove(rid);
        }
    }
}
