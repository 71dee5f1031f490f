package io.orbitkv.pd.engine.sim;

import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvPool;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * The simulated model: a tokenizer, the KV content of a prompt, and generation. Everything is a pure function of
 * the model seed and the text, so any two engines with the same seed agree byte for byte:
 * <ul>
 *   <li>token {@code i} of a prompt has a <em>prefix hash</em> {@code h_i = mix(h_{i-1}, token_i)} (seeded);</li>
 *   <li>the KV bytes of token {@code i} in region {@code r} (a layer's K, V or fused KV) are a pseudo-random
 *       stream seeded by {@code (h_i, layer, part)} — so they depend on the seed, the whole prefix and the layer,
 *       as a real model's KV does;</li>
 *   <li>generated tokens continue the prefix hash: a P/D answer equals the colocated answer exactly when the
 *       decode side started from the same prompt, which it proves by verifying every received page against the
 *       KV it would have computed itself.</li>
 * </ul>
 * Instances are immutable and thread-safe.
 */
public final class SimModel {

    /** Size of the simulated vocabulary. */
    public static final int VOCAB = 32_000;
    private static final long GOLDEN = 0x9E3779B97F4A7C15L;
    private static final String[] ONSETS = {"b", "d", "f", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "st", "tr", "ch"};
    private static final String[] NUCLEI = {"a", "e", "i", "o", "u", "ai", "ou", "ea"};

    private final long seed;

    public SimModel(long seed) {
        this.seed = seed;
    }

    public long seed() {
        return seed;
    }

    // ------------------------------------------------------------------------------------------------ tokens

    /**
     * Splits text into tokens: each token is a run of up to 4 non-space characters with the whitespace before it,
     * hashed into the vocabulary. Deterministic, and roughly as many tokens per word as a BPE tokenizer gives.
     */
    public static int[] tokenize(String text) {
        // On the proxy's request path (it counts and hashes every P/D prompt with this, and its admission grew with the
        // prompt: docs/bench/real-model.md): no boxing, no substrings.
        int n = text.length();
        int[] out = new int[n / 4 + 16];
        int k = 0;
        int i = 0;
        while (i < n) {
            int start = i;
            while (i < n && Character.isWhitespace(text.charAt(i))) {
                i++;
            }
            int chars = 0;
            while (i < n && !Character.isWhitespace(text.charAt(i)) && chars < 4) {
                i++;
                chars++;
            }
            if (i == start) {
                break;
            }
            if (k == out.length) {
                out = Arrays.copyOf(out, out.length * 2);
            }
            out[k++] = Math.floorMod(fnv(text, start, i), VOCAB);
        }
        return k == out.length ? out : Arrays.copyOf(out, k);
    }

    /** The text of generated tokens: each is a space and a pronounceable word. */
    public static String detokenize(int[] tokens) {
        StringBuilder b = new StringBuilder();
        for (int t : tokens) {
            b.append(' ').append(word(t));
        }
        return b.toString();
    }

    /** The word of one token id. */
    public static String word(int token) {
        int v = Math.floorMod(token, VOCAB);
        StringBuilder b = new StringBuilder();
        int syllables = 1 + v % 3;
        v /= 3;
        for (int s = 0; s < syllables; s++) {
            b.append(ONSETS[v % ONSETS.length]);
            v /= ONSETS.length;
            b.append(NUCLEI[v % NUCLEI.length]);
            v /= NUCLEI.length;
            v = v * 7 + s + 1;
        }
        return b.toString();
    }

    // ------------------------------------------------------------------------------------------------ hashes

    /** {@code h[i]}: the hash of the prefix ending at (and including) token {@code i}. */
    public long[] prefixHashes(int[] tokens) {
        long[] h = new long[tokens.length];
        long x = mix(seed ^ GOLDEN);
        for (int i = 0; i < tokens.length; i++) {
            x = mix(x ^ (tokens[i] + 1L) * GOLDEN);
            h[i] = x;
        }
        return h;
    }

    /**
     * Generates {@code maxTokens} tokens after the prompt. The first one is what a prefill engine samples (and
     * reports as {@code first_token}); the rest continue from it.
     */
    public int[] generate(int[] prompt, int maxTokens) {
        long[] h = prefixHashes(prompt);
        long x = h.length == 0 ? mix(seed) : h[h.length - 1];
        int[] out = new int[maxTokens];
        for (int k = 0; k < maxTokens; k++) {
            int t = (int) Long.remainderUnsigned(mix(x ^ 0x5DEECE66DL), VOCAB);
            out[k] = t;
            x = mix(x ^ (t + 1L) * GOLDEN);
        }
        return out;
    }

    /** The answer text of a prompt text (what every engine, P/D or colocated, must return). */
    public String answer(String prompt, int maxTokens) {
        return detokenize(generate(tokenize(prompt), maxTokens));
    }

    // ------------------------------------------------------------------------------------------------ KV content

    /** Bytes of one token in one page (a page holds {@code block_size_tokens} of them). */
    public static int tokenBytes(KvGeometry g) {
        if (g.pageBytes() % g.blockSizeTokens() != 0) {
            throw new IllegalArgumentException("layout.page_bytes " + g.pageBytes() + " is not a multiple of block_size_tokens "
                    + g.blockSizeTokens() + ": the simulated model needs equal token slots");
        }
        return g.pageBytes() / g.blockSizeTokens();
    }

    /** Writes the KV of every prompt token into {@code blocks} (token {@code i} goes to block {@code i / block_size}). */
    public void writeKv(KvPool pool, int[] blocks, int[] tokens) {
        writeKv(pool, blocks, tokens, layers -> { });
    }

    /** As above, layer by layer (layer 0 first, as a forward pass makes them); {@code layersDone} hears each layer's end. */
    public void writeKv(KvPool pool, int[] blocks, int[] tokens, java.util.function.IntConsumer layersDone) {
        KvGeometry g = pool.geometry();
        long[] h = prefixHashes(tokens);
        int tb = tokenBytes(g);
        checkBlocks(g, blocks, tokens.length);
        for (int r = 0; r < g.regionCount(); r++) {
            MemorySegment region = pool.hostRegion(r).orElseThrow();
            for (int i = 0; i < tokens.length; i++) {
                long off = (long) blocks[i / g.blockSizeTokens()] * g.pageBytes() + (long) (i % g.blockSizeTokens()) * tb;
                fill(region, off, tb, streamSeed(h[i], g.layerOf(r), r % g.partsPerLayer()));
            }
            if (r % g.partsPerLayer() == g.partsPerLayer() - 1) {
                layersDone.accept(g.layerOf(r) + 1);
            }
        }
    }

    /** Where a page differs from what the model computes, or null when every token of every page is right. */
    public Mismatch verifyKv(KvPool pool, int[] blocks, int[] tokens) {
        KvGeometry g = pool.geometry();
        long[] h = prefixHashes(tokens);
        int tb = tokenBytes(g);
        checkBlocks(g, blocks, tokens.length);
        for (int r = 0; r < g.regionCount(); r++) {
            MemorySegment region = pool.hostRegion(r).orElseThrow();
            for (int i = 0; i < tokens.length; i++) {
                int block = blocks[i / g.blockSizeTokens()];
                long off = (long) block * g.pageBytes() + (long) (i % g.blockSizeTokens()) * tb;
                long at = check(region, off, tb, streamSeed(h[i], g.layerOf(r), r % g.partsPerLayer()));
                if (at >= 0) {
                    return new Mismatch(g.describeRegion(r), block, i, at - off);
                }
            }
        }
        return null;
    }

    /** A page that does not hold what the model computes: which region, block, token and byte. */
    public record Mismatch(String region, int block, int token, long byteInToken) {
        @Override
        public String toString() {
            return "KV of token " + token + " in block " + block + " (" + region + ") differs at byte " + byteInToken;
        }
    }

    /** Blocks a prompt of {@code tokens} tokens needs. */
    public static int blocksFor(KvGeometry g, int tokens) {
        return (tokens + g.blockSizeTokens() - 1) / g.blockSizeTokens();
    }

    private static void checkBlocks(KvGeometry g, int[] blocks, int tokens) {
        if (blocks.length < blocksFor(g, tokens)) {
            throw new IllegalArgumentException(tokens + " tokens need " + blocksFor(g, tokens) + " blocks, got " + blocks.length);
        }
    }

    private long streamSeed(long prefixHash, int layer, int part) {
        return mix(prefixHash ^ mix(seed + (layer + 1L) * 0xBF58476D1CE4E5B9L + (part + 1L) * 0x94D049BB133111EBL));
    }

    private static final ValueLayout.OfLong LONG = ValueLayout.JAVA_LONG_UNALIGNED;

    /*
     * A token slot's bytes are an XOR stream from the slot's seed: long k (little-endian) is seed ^ ((k + 1) * GOLDEN). The
     * seed (one SplitMix64 mix per slot) makes every slot of every prompt, layer and part distinct, so a page in the wrong
     * place, a stale page or a shifted write never verifies; the step makes every long of a slot distinct, so a shift
     * inside a slot does not either; and an exact compare catches any flipped bit. One xor per 8 bytes: materialising and
     * checking KV costs about a pass over memory (both paths pay the write; only P/D pays the check). XOR rather than a
     * sum so that an engine in another language computes a whole slot at once: the slot is the fixed step table XOR the
     * seed repeated in every lane, one big-integer XOR in Python (python/orbitkv_pd/sim_model.py).
     */
    private static void fill(MemorySegment s, long off, int len, long state) {
        long t = 0;
        int i = 0;
        for (; i + 8 <= len; i += 8) {
            t += GOLDEN;
            s.set(LONG, off + i, state ^ t);
        }
        if (i < len) {
            long v = state ^ (t + GOLDEN);
            for (; i < len; i++, v >>>= 8) {
                s.set(ValueLayout.JAVA_BYTE, off + i, (byte) v);
            }
        }
    }

    /** Offset of the first wrong byte, or -1. */
    private static long check(MemorySegment s, long off, int len, long state) {
        long t = 0;
        long diff = 0;
        int words = len & ~7;
        for (int i = 0; i < words; i += 8) {
            t += GOLDEN;
            diff |= s.get(LONG, off + i) ^ state ^ t; // no branch per word: the common case (all equal) runs at memory speed
        }
        if (diff != 0) {
            t = 0;
            for (int i = 0; i < words; i += 8) {
                t += GOLDEN;
                long got = s.get(LONG, off + i);
                long want = state ^ t;
                if (got != want) {
                    return off + i + Long.numberOfTrailingZeros(got ^ want) / 8;
                }
            }
        }
        if (words < len) {
            long v = state ^ (t + GOLDEN);
            for (int i = words; i < len; i++, v >>>= 8) {
                if (s.get(ValueLayout.JAVA_BYTE, off + i) != (byte) v) {
                    return off + i;
                }
            }
        }
        return -1;
    }

    /** SplitMix64's finalizer. */
    static long mix(long z) {
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return z ^ (z >>> 31);
    }

    /** {@link #fnv(String)} of {@code s[from, to)}: ASCII chars are their UTF-8 bytes; anything else is encoded as Java does. */
    private static int fnv(String s, int from, int to) {
        int h = 0x811C9DC5;
        for (int j = from; j < to; j++) {
            char c = s.charAt(j);
            if (c >= 0x80) {
                return fnv(s.substring(from, to));
            }
            h ^= c;
            h *= 0x01000193;
        }
        return h;
    }

    private static int fnv(String s) {
        int h = 0x811C9DC5;
        for (byte b : s.getBytes(StandardCharsets.UTF_8)) {
            h ^= b & 0xFF;
            h *= 0x01000193;
        }
        return h;
    }
}
