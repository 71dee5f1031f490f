package io.orbitkv.pd.proxy.routing;

/**
 * The blocks one engine caches, as 64-bit keys (the first 8 bytes of each block hash) in one open-addressing array with
 * linear probing and backward-shift deletion: no object per entry, 16 bytes per block at the lowest load (8 at the
 * highest). Two blocks whose hashes share their first 8 bytes read as one — at a million blocks the chance is ~3e-8.
 * Not thread-safe.
 */
final class BlockSet {

    private static final long EMPTY = 0;
    private long[] slots = new long[16];
    private int size;
    private boolean hasZero;

    /** The key of a block hash: its first 8 bytes (SHA-256 output is uniform: no need to mix further). */
    static long key(byte[] hash) {
        long k = 0;
        for (int i = 0; i < Math.min(8, hash.length); i++) {
            k = (k << 8) | (hash[i] & 0xFF);
        }
        return k;
    }

    /** {@link #key(byte[])} of a hash in a buffer, without copying it. */
    static long key(java.nio.ByteBuffer hash) {
        int p = hash.position();
        if (hash.remaining() >= 8) {
            return hash.getLong(p); // big-endian: the first 8 bytes, as key(byte[])
        }
        long k = 0;
        for (int i = 0; i < hash.remaining(); i++) {
            k = (k << 8) | (hash.get(p + i) & 0xFF);
        }
        return k;
    }

    boolean add(long k) {
        if (k == EMPTY) {
            boolean added = !hasZero;
            hasZero = true;
            return added;
        }
        if (2 * (size + 1) > slots.length) {
            resize(slots.length * 2);
        }
        int mask = slots.length - 1;
        for (int i = mix(k) & mask; ; i = (i + 1) & mask) {
            if (slots[i] == k) {
                return false;
            }
            if (slots[i] == EMPTY) {
                slots[i] = k;
                size++;
                return true;
            }
        }
    }

    boolean contains(long k) {
        if (k == EMPTY) {
            return hasZero;
        }
        int mask = slots.length - 1;
        for (int i = mix(k) & mask; ; i = (i + 1) & mask) {
            if (slots[i] == k) {
                return true;
            }
            if (slots[i] == EMPTY) {
                return false;
            }
        }
    }

    boolean remove(long k) {
        if (k == EMPTY) {
            boolean had = hasZero;
            hasZero = false;
            return had;
        }
        int mask = slots.length - 1;
        int i = mix(k) & mask;
        while (slots[i] != k) {
            if (slots[i] == EMPTY) {
                return false;
            }
            i = (i + 1) & mask;
        }
        // backward-shift deletion: pull later entries of the run into the hole when their home slot allows it
        int hole = i;
        for (int j = (hole + 1) & mask; slots[j] != EMPTY; j = (j + 1) & mask) {
            int home = mix(slots[j]) & mask;
            if (((j - home) & mask) >= ((j - hole) & mask)) {
                slots[hole] = slots[j];
                hole = j;
            }
        }
        slots[hole] = EMPTY;
        size--;
        if (slots.length > 16 && 8 * size < slots.length) {
            resize(slots.length / 2);
        }
        return true;
    }

    void clear() {
        slots = new long[16];
        size = 0;
        hasZero = false;
    }

    int size() {
        return size + (hasZero ? 1 : 0);
    }

    /** Bytes the set holds (its array). */
    long bytes() {
        return 8L * slots.length;
    }

    private void resize(int capacity) {
        long[] old = slots;
        slots = new long[capacity];
        size = 0;
        for (long k : old) {
            if (k != EMPTY) {
                add(k);
            }
        }
    }

    private static int mix(long k) {
        return (int) (k ^ (k >>> 32));
    }
}
