package io.orbitkv.pd.gpu;

import java.util.Arrays;
import java.util.stream.Collectors;

/**
 * The page-run copy kernels compiled into {@code kv_copy.ptx} (source: {@code gpu/src/main/cuda/kv_copy.cu}). All
 * run the same grid-stride loop over a {@link RunTable}; they differ in block size, in how many 16-byte loads each
 * thread keeps in flight, and in cache hints (1: loads skip L1 and fetch 256-byte L2 sectors, stores evict-first).
 */
public enum CopyKernel {
    T128_U8_H0(128, 8, 0),
    T128_U8_H1(128, 8, 1),
    T256_U4_H0(256, 4, 0),
    T256_U4_H1(256, 4, 1),
    T256_U8_H0(256, 8, 0),
    T256_U8_H1(256, 8, 1),
    T512_U4_H0(512, 4, 0),
    T512_U4_H1(512, 4, 1);

    /**
     * The transport's default, chosen from the H200 benchmark (docs/bench/gpu.md): within 1-2 % of the best variant at
     * every page size from 16 to 128 KiB with one block per chunk, where others lead at one size and trail at another.
     */
    public static final CopyKernel DEFAULT = T256_U8_H0;

    private final int threads;
    private final int unroll;
    private final int hints;

    CopyKernel(int threads, int unroll, int hints) {
        this.threads = threads;
        this.unroll = unroll;
        this.hints = hints;
    }

    /** The PTX entry point, e.g. {@code kv_copy_t256_u8_h1}. */
    public String entryName() {
        return "kv_copy_" + shortName();
    }

    /** {@code t256_u8_h1}: the name used in settings and benchmark tables. */
    public String shortName() {
        return "t" + threads + "_u" + unroll + "_h" + hints;
    }

    public int threads() {
        return threads;
    }

    public int unroll() {
        return unroll;
    }

    public int hints() {
        return hints;
    }

    /** Bytes one block moves per round of loads: threads × unroll × 16. */
    public int bytesPerRound() {
        return threads * unroll * 16;
    }

    /** The kernel for a short name ({@code t256_u8_h1}). */
    public static CopyKernel byShortName(String field, String name) {
        for (CopyKernel k : values()) {
            if (k.shortName().equals(name)) {
                return k;
            }
        }
        throw new IllegalArgumentException(field + ": unknown kernel '" + name + "'; one of "
                + Arrays.stream(values()).map(CopyKernel::shortName).collect(Collectors.joining(", ")));
    }
}
