package io.orbitkv.pd.kv;

import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.KvLayout;
import io.orbitkv.pd.events.KvSplit;
import java.util.ArrayList;
import java.util.List;
import java.util.Objects;

/**
 * The validated shape of one engine's paged KV cache, the Java side of the {@code KvLayout} contract.
 *
 * <p>Memory model (vLLM's): every layer owns one tensor per <em>part</em> — {@code K} and {@code V} for
 * {@link KvSplit#SEPARATE}, one {@code KV} tensor for {@link KvSplit#FUSED} — and each of those tensors, a
 * <em>region</em>, is an array of {@code num_blocks} pages of {@code page_bytes}. Block id {@code b} names the
 * same slot in every region, so one request's KV is its block ids times {@link #regionCount()} pages. For
 * {@code FUSED} a page is the whole per-layer entry of a block (K then V, or the single latent of MLA caches), so
 * {@code page_bytes} is taken as given; for {@code SEPARATE} with a known dtype it must equal
 * {@code block_size_tokens × num_kv_heads × head_dim × dtype bytes}.
 *
 * <p>Regions are numbered layer-major: {@code region = layer × partsPerLayer + part}.
 */
public record KvGeometry(int numLayers, KvSplit split, int blockSizeTokens, int numKvHeads, int headDim, Dtype dtype, int pageBytes,
                         int numBlocks) {

    public KvGeometry {
        positive("layout.num_layers", numLayers);
        positive("layout.block_size_tokens", blockSizeTokens);
        positive("layout.num_kv_heads", numKvHeads);
        positive("layout.head_dim", headDim);
        positive("layout.page_bytes", pageBytes);
        positive("layout.num_blocks", numBlocks);
        if (split == null || split == KvSplit.UNKNOWN) {
            throw new IllegalArgumentException("layout.kv_split: must be SEPARATE or FUSED, got " + split);
        }
        if (dtype == null) {
            throw new IllegalArgumentException("layout.dtype: required");
        }
        if (split == KvSplit.SEPARATE && dtype != Dtype.UNKNOWN) {
            long expected = (long) blockSizeTokens * numKvHeads * headDim * dtypeBytes(dtype);
            if (expected != pageBytes) {
                throw new IllegalArgumentException("layout.page_bytes: must be block_size_tokens × num_kv_heads × head_dim × dtype bytes = "
                        + blockSizeTokens + " × " + numKvHeads + " × " + headDim + " × " + dtypeBytes(dtype) + " = " + expected
                        + " for a SEPARATE layout, got " + pageBytes);
            }
        }
        long regions = (long) numLayers * (split == KvSplit.SEPARATE ? 2 : 1);
        if (regions > 1_000_000) {
            throw new IllegalArgumentException("layout.num_layers: " + numLayers + " layers is more than this pool model supports");
        }
    }

    /** Validates a layout from an event; an error names the field ({@code layout.page_bytes: ...}). */
    public static KvGeometry of(KvLayout l) {
        if (l == null) {
            throw new IllegalArgumentException("layout: required");
        }
        return new KvGeometry(l.getNumLayers(), l.getKvSplit(), l.getBlockSizeTokens(), l.getNumKvHeads(), l.getHeadDim(), l.getDtype(),
                l.getPageBytes(), l.getNumBlocks());
    }

    /** The same shape with another pool size (prefill and decode pools differ in size, never in page shape). */
    public KvGeometry withNumBlocks(int blocks) {
        return new KvGeometry(numLayers, split, blockSizeTokens, numKvHeads, headDim, dtype, pageBytes, blocks);
    }

    public KvLayout toLayout(int tpRank, int tpSize) {
        return KvLayout.newBuilder().setNumLayers(numLayers).setKvSplit(split).setBlockSizeTokens(blockSizeTokens).setNumKvHeads(numKvHeads)
                .setHeadDim(headDim).setDtype(dtype).setTpRank(tpRank).setTpSize(tpSize).setPageBytes(pageBytes).setNumBlocks(numBlocks)
                .build();
    }

    /** Bytes of one element, 0 for {@link Dtype#UNKNOWN}. */
    public static int dtypeBytes(Dtype d) {
        return switch (d) {
            case FP32 -> 4;
            case FP16, BF16 -> 2;
            case FP8_E4M3, FP8_E5M2, INT8 -> 1;
            case UNKNOWN -> 0;
        };
    }

    /** 2 (K and V) for SEPARATE, 1 (KV) for FUSED. */
    public int partsPerLayer() {
        return split == KvSplit.SEPARATE ? 2 : 1;
    }

    public int regionCount() {
        return numLayers * partsPerLayer();
    }

    public int region(int layer, int part) {
        if (layer < 0 || layer >= numLayers || part < 0 || part >= partsPerLayer()) {
            throw new IndexOutOfBoundsException("layer " + layer + " part " + part + " outside " + numLayers + " layers × " + partsPerLayer() + " parts");
        }
        return layer * partsPerLayer() + part;
    }

    public int layerOf(int region) {
        return region / partsPerLayer();
    }

    /** {@code K}, {@code V} or {@code KV}: the {@code MemoryRegion.part} of a region. */
    public String partName(int region) {
        return split == KvSplit.FUSED ? "KV" : (region % 2 == 0 ? "K" : "V");
    }

    /** Bytes of one region: {@code num_blocks × page_bytes}. */
    public long regionBytes() {
        return (long) numBlocks * pageBytes;
    }

    /** Bytes of the whole pool. */
    public long poolBytes() {
        return regionBytes() * regionCount();
    }

    /** Bytes one block holds over every region: what moving one block id costs. */
    public long bytesPerBlock() {
        return (long) pageBytes * regionCount();
    }

    /** "layer 3 V", for messages. */
    public String describeRegion(int region) {
        return "layer " + layerOf(region) + " " + partName(region);
    }

    /**
     * Null when pages of this (source) geometry can be copied page for page into pages of {@code dest}; else which
     * fields differ. Pool sizes may differ. A geometry knows no tensor-parallel size, so this is
     * {@link #incompatibility(KvLayout, String, KvLayout, String)} with the same one on both sides.
     */
    public String incompatibility(KvGeometry dest) {
        return incompatibility(toLayout(0, 1), "source", dest.toLayout(0, 1), "destination");
    }

    /**
     * The one page-shape comparison of the KV model (the decider pairs engines' layouts with it, the workers their pools
     * and orders): null when pages laid out as {@code source} can be copied page for page into pages laid out as
     * {@code dest}; else every field that differs, {@code "<field> <source value> (<sourceName>) vs <dest value>
     * (<destName>)"}, joined by ", ". Pool sizes and ranks may differ; tp_size may not (ranks of different
     * tensor-parallel degrees hold different slices of the heads).
     */
    public static String incompatibility(KvLayout source, String sourceName, KvLayout dest, String destName) {
        Diffs d = new Diffs(new ArrayList<>(), " (" + sourceName + ") vs ", " (" + destName + ")");
        // The decider's order of old: its reasons are in the decision log, and a replay of an old log must read the same.
        d.add("num_layers", source.getNumLayers(), dest.getNumLayers());
        d.add("dtype", source.getDtype(), dest.getDtype());
        d.add("num_kv_heads", source.getNumKvHeads(), dest.getNumKvHeads());
        d.add("head_dim", source.getHeadDim(), dest.getHeadDim());
        d.add("block_size_tokens", source.getBlockSizeTokens(), dest.getBlockSizeTokens());
        d.add("kv_split", source.getKvSplit(), dest.getKvSplit());
        d.add("tp_size", source.getTpSize(), dest.getTpSize());
        d.add("page_bytes", source.getPageBytes(), dest.getPageBytes());
        return d.out().isEmpty() ? null : String.join(", ", d.out());
    }

    private record Diffs(List<String> out, String vs, String after) {
        void add(String field, Object src, Object dst) {
            if (!Objects.equals(src, dst)) {
                out.add(field + " " + src + vs + dst + after);
            }
        }
    }

    private static void positive(String field, int v) {
        if (v < 1) {
            throw new IllegalArgumentException(field + ": must be >= 1, got " + v);
        }
    }
}
