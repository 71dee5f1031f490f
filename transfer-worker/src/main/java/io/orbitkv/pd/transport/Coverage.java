package io.orbitkv.pd.transport;

import java.util.Map;
import java.util.TreeMap;

/**
 * Which bytes of each region a push has written, as disjoint intervals, and how many. The receiving side's count of a
 * push's pieces (layer by layer, stripe by stripe, transport by transport): a write that overlaps one already counted is
 * a piece written twice, and — every write having been checked to lie inside the push's destination pages — bytes equal
 * to the pages' size with no overlap means every piece of every layer is in place. Not thread-safe (its owner locks).
 */
final class Coverage {

    private final TreeMap<Long, Long>[] regions;
    private long bytes;

    @SuppressWarnings("unchecked")
    Coverage(int regionCount) {
        regions = (TreeMap<Long, Long>[]) new TreeMap<?, ?>[regionCount];
    }

    /** Bytes counted. */
    long bytes() {
        return bytes;
    }

    /** Whether {@code [start, end)} of {@code region} overlaps anything counted. */
    boolean overlaps(int region, long start, long end) {
        TreeMap<Long, Long> m = regions[region];
        if (m == null) {
            return false;
        }
        Map.Entry<Long, Long> before = m.floorEntry(start);
        if (before != null && before.getValue() > start) {
            return true;
        }
        Long next = m.ceilingKey(start);
        return next != null && next < end;
    }

    /** Counts {@code [start, end)} of {@code region}; false (and nothing counted) when it overlaps what is already there. */
    boolean add(int region, long start, long end) {
        if (overlaps(region, start, end)) {
            return false;
        }
        TreeMap<Long, Long> m = regions[region];
        if (m == null) {
            m = regions[region] = new TreeMap<>();
        }
        long s = start;
        long e = end;
        Map.Entry<Long, Long> before = m.floorEntry(start);
        if (before != null && before.getValue() == start) { // adjacent: merged, so sequential writes stay one interval
            s = before.getKey();
            m.remove(before.getKey());
        }
        Long after = m.get(end);
        if (after != null) {
            e = after;
            m.remove(end);
        }
        m.put(s, e);
        bytes += end - start;
        return true;
    }

    /** Whether any interval of {@code other} overlaps this one's. */
    boolean overlaps(Coverage other) {
        for (int r = 0; r < regions.length; r++) {
            if (other.regions[r] != null) {
                for (Map.Entry<Long, Long> i : other.regions[r].entrySet()) {
                    if (overlaps(r, i.getKey(), i.getValue())) {
                        return true;
                    }
                }
            }
        }
        return false;
    }

    /** Counts all of {@code other} (which must not overlap: {@link #overlaps(Coverage)}). */
    void addAll(Coverage other) {
        for (int r = 0; r < regions.length; r++) {
            if (other.regions[r] != null) {
                for (Map.Entry<Long, Long> i : other.regions[r].entrySet()) {
                    if (!add(r, i.getKey(), i.getValue())) {
                        throw new IllegalStateException("region " + r + " bytes " + i.getKey() + ".." + i.getValue() + " already counted");
                    }
                }
            }
        }
    }
}
