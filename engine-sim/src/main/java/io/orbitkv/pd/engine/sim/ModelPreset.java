package io.orbitkv.pd.engine.sim;

import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.kv.KvGeometry;
import java.util.Arrays;
import java.util.Locale;

/**
 * KV layouts shaped like real models (vLLM's paged cache: 16-token blocks, K and V per layer, BF16), per
 * tensor-parallel rank. {@code tiny} is for tests and small demos.
 */
public enum ModelPreset {
    /** Llama-3-8B: 32 layers, 8 KV heads (GQA), head dim 128: 32 KiB pages, 2 MiB per block over all layers. */
    LLAMA_8B("8b", 32, 8, 128),
    /** Llama-3-70B: 80 layers, 8 KV heads, head dim 128: 32 KiB pages, 5 MiB per block (before tensor parallelism). */
    LLAMA_70B("70b", 80, 8, 128),
    /** A small shape for tests: 4 layers, 2 KV heads, head dim 64: 4 KiB pages, 32 KiB per block. */
    TINY("tiny", 4, 2, 64);

    private final String key;
    private final int layers;
    private final int kvHeads;
    private final int headDim;

    ModelPreset(String key, int layers, int kvHeads, int headDim) {
        this.key = key;
        this.layers = layers;
        this.kvHeads = kvHeads;
        this.headDim = headDim;
    }

    public String key() {
        return key;
    }

    /**
     * The per-rank pool geometry: KV heads are split over {@code tpSize} ranks (at least one head per rank, as vLLM
     * replicates heads when tp exceeds them).
     */
    public KvGeometry geometry(int numBlocks, int tpSize) {
        if (tpSize < 1) {
            throw new IllegalArgumentException("engine.layout.tp-size: must be >= 1, got " + tpSize);
        }
        int heads = Math.max(1, kvHeads / tpSize);
        int block = 16;
        return new KvGeometry(layers, KvSplit.SEPARATE, block, heads, headDim, Dtype.BF16, block * heads * headDim * 2, numBlocks);
    }

    public static ModelPreset of(String key) {
        for (ModelPreset p : values()) {
            if (p.key.equalsIgnoreCase(key) || p.name().equalsIgnoreCase(key)) {
                return p;
            }
        }
        throw new IllegalArgumentException("engine.preset: must be one of " + Arrays.stream(values()).map(ModelPreset::key).toList()
                + ", got '" + key + "'");
    }

    @Override
    public String toString() {
        return key.toLowerCase(Locale.ROOT);
    }
}
