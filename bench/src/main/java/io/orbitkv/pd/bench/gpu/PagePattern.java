package io.orbitkv.pd.bench.gpu;

import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/** The bytes of a page as a function of (seed, region, block): written by one process, checked by another. */
final class PagePattern {

    private PagePattern() { }

    static void fill(MemorySegment page, long seed, int region, int block) {
        long x = (seed * 0x9E3779B97F4A7C15L) ^ (((long) region << 32) | block) ^ 0x5DEECE66DL;
        if (x == 0) {
            x = 1;
        }
        long n = page.byteSize() / 8;
        for (long i = 0; i < n; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            page.set(ValueLayout.JAVA_LONG_UNALIGNED, i * 8, x);
        }
        for (long i = n * 8; i < page.byteSize(); i++) {
            page.set(ValueLayout.JAVA_BYTE, i, (byte) (x >>> (8 * (i % 8))));
        }
    }
}
