package io.orbitkv.pd.engine.client.cache;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.List;

/**
 * Prefix-cache block hashes as vLLM computes them with {@code sha256_cbor} (docs/engine-model.md, "Block hashes"): a full
 * block's hash is SHA-256 over the canonical CBOR encoding of the array {@code [parent hash (bytes), [token ids of the
 * block], extra keys (an array of strings, or null)]}; the first block's parent is SHA-256 over the CBOR text string of a
 * configured seed. Specified byte by byte so that the Python engine ({@code orbitkv_pd.engine_model.block_hashes}) and
 * any other language give the same hashes (the golden vectors of {@code engine-model/block-hashes.json}).
 */
public final class BlockHashes {

    private BlockHashes() { }

    /** The first block's parent: SHA-256 of the CBOR text string {@code seed}. */
    public static byte[] root(String seed) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        text(out, seed);
        return sha256(out.toByteArray());
    }

    /** The hash of one full block. */
    public static byte[] block(byte[] parent, int[] tokens, List<String> extraKeys) {
        return sha256(cbor(parent, tokens, extraKeys));
    }

    /** The hashes of every full block of {@code tokens} ({@code blockTokens} each), chained from {@code root(seed)}. */
    public static List<byte[]> chain(String seed, int blockTokens, int[] tokens, List<String> extraKeys) {
        List<byte[]> out = new ArrayList<>();
        byte[] parent = root(seed);
        for (int start = 0; start + blockTokens <= tokens.length; start += blockTokens) {
            int[] block = java.util.Arrays.copyOfRange(tokens, start, start + blockTokens);
            parent = block(parent, block, extraKeys);
            out.add(parent);
        }
        return out;
    }

    /** The canonical CBOR of {@code [parent, [tokens...], extraKeys or null]}. */
    public static byte[] cbor(byte[] parent, int[] tokens, List<String> extraKeys) {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        head(out, 4, 3);
        head(out, 2, parent.length);
        out.writeBytes(parent);
        head(out, 4, tokens.length);
        for (int t : tokens) {
            if (t < 0) {
                throw new IllegalArgumentException("token ids are >= 0, got " + t);
            }
            head(out, 0, t);
        }
        if (extraKeys == null) {
            out.write(0xf6);
        } else {
            head(out, 4, extraKeys.size());
            for (String k : extraKeys) {
                text(out, k);
            }
        }
        return out.toByteArray();
    }

    private static void text(ByteArrayOutputStream out, String s) {
        byte[] b = s.getBytes(StandardCharsets.UTF_8);
        head(out, 3, b.length);
        out.writeBytes(b);
    }

    /** A CBOR head: major type and argument in the shortest form (canonical). */
    private static void head(ByteArrayOutputStream out, int major, long value) {
        int m = major << 5;
        if (value < 24) {
            out.write(m | (int) value);
        } else if (value < 0x100) {
            out.write(m | 24);
            out.write((int) value);
        } else if (value < 0x10000) {
            out.write(m | 25);
            out.write((int) (value >>> 8));
            out.write((int) value & 0xff);
        } else if (value < 0x1_0000_0000L) {
            out.write(m | 26);
            for (int shift = 24; shift >= 0; shift -= 8) {
                out.write((int) (value >>> shift) & 0xff);
            }
        } else {
            out.write(m | 27);
            for (int shift = 56; shift >= 0; shift -= 8) {
                out.write((int) (value >>> shift) & 0xff);
            }
        }
    }

    private static byte[] sha256(byte[] b) {
        try {
            return MessageDigest.getInstance("SHA-256").digest(b);
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException("SHA-256 is part of every JDK", e);
        }
    }
}
