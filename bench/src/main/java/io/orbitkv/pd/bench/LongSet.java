package io.orbitkv.pd.bench;

/**
 * A set of 64-bit hashes in one open-addressing array: what the benchmark's actors remember (every decision id
 * they saw, every request that finished) without one object per entry. Those entries live for the whole run, and
 * as objects each was copied by up to 15 young collections before promotion, in the same JVM as the decider under
 * test: the benchmark's own bookkeeping lengthened the pauses it measures. Not thread-safe.
 */
final class LongSet {

    private static final long EMPTY = 0;
    private long[] slots = new long[1 << 16];
    private int size;
    private boolean hasZero;

    /** Adds {@code key}'s 64-bit hash; false when it was already there (a collision of two keys reads as a repeat). */
    boolean add(CharSequence key) {
        return add(hash(key));
    }

    boolean add(long h) {
        if (h == EMPTY) {
            boolean added = !hasZero;
            hasZero = true;
            return added;
        }
        if (2 * (size + 1) > slots.length) {
            grow();
        }
        int mask = slots.length - 1;
        for (int i = mix(h) & mask; ; i = (i + 1) & mask) {
            if (slots[i] == h) {
                return false;
            }
            if (slots[i] == EMPTY) {
                slots[i] = h;
                size++;
                return true;
            }
        }
    }

    int size() {
        return size + (hasZero ? 1 : 0);
    }

    private void grow() {
        long[] old = slots;
        slots = new long[old.length * 2];
        size = 0;
        for (long h : old) {
            if (h != EMPTY) {
                add(h);
            }
        }
    }

    private static int mix(long h) {
        long x = h * 0x9E3779B97F4A7C15L;
        return (int) (x ^ (x >>> 32));
    }

    /** 64-bit FNV-1a over the UTF-16 chars. */
    static long hash(CharSequence s) {
        long h = 0xcbf29ce484222325L;
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            h = (h ^ (c & 0xff)) * 0x100000001b3L;
            h = (h ^ (c >>> 8)) * 0x100000001b3L;
        }
        return h;
    }
}
