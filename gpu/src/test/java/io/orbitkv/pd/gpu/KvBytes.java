package io.orbitkv.pd.gpu;

import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.TransferPlan;
import io.orbitkv.pd.kv.HostKvPool;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/** Page contents for tests: every page of a pool gets bytes that depend on (seed, region, block). */
final class KvBytes {

    private KvBytes() { }

    static void fill(HostKvPool pool, long seed) {
        KvGeometry g = pool.geometry();
        for (int r = 0; r < g.regionCount(); r++) {
            for (int b = 0; b < g.numBlocks(); b++) {
                MemorySegment page = pool.page(r, b);
                long x = seed * 0x9E3779B97F4A7C15L ^ ((long) r << 32 | b) | 1;
                for (long i = 0; i + 8 <= page.byteSize(); i += 8) {
                    x ^= x << 13;
                    x ^= x >>> 7;
                    x ^= x << 17;
                    page.set(ValueLayout.JAVA_LONG_UNALIGNED, i, x);
                }
                for (long i = page.byteSize() / 8 * 8; i < page.byteSize(); i++) {
                    page.set(ValueLayout.JAVA_BYTE, i, (byte) (x >>> (i % 8)));
                }
            }
        }
    }

    static void sentinel(HostKvPool pool, byte value) {
        for (int r = 0; r < pool.geometry().regionCount(); r++) {
            pool.region(r).fill(value);
        }
    }

    /** Null when every destination page of the plan equals its source page and every other page still holds {@code sentinel}. */
    static String verify(HostKvPool src, HostKvPool dst, TransferPlan plan, byte sentinel) {
        KvGeometry g = dst.geometry();
        boolean[] written = new boolean[g.numBlocks()];
        for (int p = 0; p < plan.pairRuns(); p++) {
            for (int i = 0; i < plan.pairCount(p); i++) {
                written[plan.pairDest(p) + i] = true;
                for (int r = 0; r < g.regionCount(); r++) {
                    long m = src.page(r, plan.pairSource(p) + i).mismatch(dst.page(r, plan.pairDest(p) + i));
                    if (m != -1) {
                        return "region " + r + ": block " + (plan.pairDest(p) + i) + " differs from source block " + (plan.pairSource(p) + i)
                                + " at byte " + m;
                    }
                }
            }
        }
        return untouched(dst, sentinel, written);
    }

    /** Null when every page not marked written holds only {@code sentinel}. */
    static String untouched(HostKvPool pool, byte sentinel, boolean[] written) {
        KvGeometry g = pool.geometry();
        MemorySegment clean = java.lang.foreign.Arena.ofAuto().allocate(g.pageBytes());
        clean.fill(sentinel);
        for (int r = 0; r < g.regionCount(); r++) {
            for (int b = 0; b < g.numBlocks(); b++) {
                if (written != null && written[b]) {
                    continue;
                }
                long m = pool.page(r, b).mismatch(clean);
                if (m != -1) {
                    return "region " + r + ": block " + b + " was written at byte " + m;
                }
            }
        }
        return null;
    }
}
