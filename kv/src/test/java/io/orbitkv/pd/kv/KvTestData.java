package io.orbitkv.pd.kv;

import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.KvSplit;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;

/** Layouts and page contents for tests: every page gets bytes that depend on (seed, region, block). */
public final class KvTestData {

    private KvTestData() { }

    /** An 8B-model page shape (32 KiB pages) with few layers, for fast tests. */
    public static KvGeometry small(int layers, int blocks) {
        return new KvGeometry(layers, KvSplit.SEPARATE, 16, 8, 128, Dtype.BF16, 32 * 1024, blocks);
    }

    /** Any page size: one layer, FUSED (page bytes taken as given). */
    public static KvGeometry pages(int pageBytes, int blocks, int layers) {
        return new KvGeometry(layers, KvSplit.FUSED, 16, 1, 1, Dtype.UNKNOWN, pageBytes, blocks);
    }

    /** Fills every page of the pool with its own pattern. */
    public static void fill(KvPool pool, long seed) {
        KvGeometry g = pool.geometry();
        for (int r = 0; r < g.regionCount(); r++) {
            for (int b = 0; b < g.numBlocks(); b++) {
                fillPage(pool.page(r, b), seed, r, b);
            }
        }
    }

    public static void fillPage(MemorySegment page, long seed, int region, int block) {
        long x = seed * 0x9E3779B97F4A7C15L ^ ((long) region << 32 | block);
        long n = page.byteSize() / 8;
        for (long i = 0; i < n; i++) {
            x ^= x << 13;
            x ^= x >>> 7;
            x ^= x << 17;
            page.setAtIndex(ValueLayout.JAVA_LONG_UNALIGNED, i, x);
        }
        for (long i = n * 8; i < page.byteSize(); i++) {
            page.set(ValueLayout.JAVA_BYTE, i, (byte) (x >>> (i % 8)));
        }
    }

    /** Sets every byte of the pool to {@code value}. */
    public static void sentinel(KvPool pool, byte value) {
        for (int r = 0; r < pool.geometry().regionCount(); r++) {
            pool.hostRegion(r).orElseThrow().fill(value);
        }
    }

    /** Null when every byte of the pool is still {@code sentinel}; else the first page that is not. */
    public static String untouched(KvPool pool, byte sentinel) {
        KvGeometry g = pool.geometry();
        MemorySegment clean = java.lang.foreign.Arena.ofAuto().allocate(g.pageBytes());
        clean.fill(sentinel);
        for (int r = 0; r < g.regionCount(); r++) {
            for (int b = 0; b < g.numBlocks(); b++) {
                if (pool.page(r, b).mismatch(clean) != -1) {
                    return "region " + r + " block " + b + " was written";
                }
            }
        }
        return null;
    }

    /**
     * Null when every destination page named by the plan equals its source page, and every other destination page
     * still holds only {@code sentinel}; else the first difference.
     */
    public static String verify(KvPool src, KvPool dst, TransferPlan plan, byte sentinel) {
        KvGeometry g = dst.geometry();
        boolean[] written = new boolean[g.numBlocks()];
        for (int p = 0; p < plan.pairRuns(); p++) {
            for (int i = 0; i < plan.pairCount(p); i++) {
                written[plan.pairDest(p) + i] = true;
                for (int r = 0; r < g.regionCount(); r++) {
                    MemorySegment a = src.page(r, plan.pairSource(p) + i);
                    MemorySegment b = dst.page(r, plan.pairDest(p) + i);
                    long m = a.mismatch(b);
                    if (m != -1) {
                        return "region " + r + ": destination block " + (plan.pairDest(p) + i) + " differs from source block "
                                + (plan.pairSource(p) + i) + " at byte " + m;
                    }
                }
            }
        }
        MemorySegment clean = java.lang.foreign.Arena.ofAuto().allocate(g.pageBytes());
        clean.fill(sentinel);
        for (int b = 0; b < g.numBlocks(); b++) {
            if (!written[b]) {
                for (int r = 0; r < g.regionCount(); r++) {
                    if (dst.page(r, b).mismatch(clean) != -1) {
                        return "region " + r + ": block " + b + " was not a destination but was written";
                    }
                }
            }
        }
        return null;
    }
}
