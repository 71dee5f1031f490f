package io.orbitkv.pd.bench;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;

/** The bytes and the scatter a transport benchmark moves: the same for every transport it compares. */
final class PageData {

    private PageData() { }

    /** Fills {@code s} with a xorshift sequence (incompressible, and a wrong byte shows). */
    static void fill(MemorySegment s) {
        long x = 0x9E3779B97F4A7C15L;
        for (long i = 0; i < s.byteSize() / 8; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            s.setAtIndex(ValueLayout.JAVA_LONG, i, x);
        }
    }

    /** A random order of {@code 0..n-1}: pages scattered through the pool, as an engine's block table leaves them. */
    static int[] permutation(int n, Random rnd) {
        List<Integer> l = new ArrayList<>(n);
        for (int i = 0; i < n; i++) {
            l.add(i);
        }
        Collections.shuffle(l, rnd);
        return l.stream().mapToInt(Integer::intValue).toArray();
    }
}
