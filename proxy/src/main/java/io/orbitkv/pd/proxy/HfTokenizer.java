package io.orbitkv.pd.proxy;

import ai.djl.huggingface.tokenizers.Encoding;
import ai.djl.huggingface.tokenizers.HuggingFaceTokenizer;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;

/**
 * A real model's tokenizer ({@code proxy.tokenizer}: the model's {@code tokenizer.json}), through the HuggingFace
 * {@code tokenizers} library's Java binding (DJL): the same Rust code the model's engines tokenize with (vLLM and SGLang
 * load the same file through {@code transformers}), so the proxy counts a prompt's tokens and hashes its blocks as they do.
 * The binding's native library comes in its jar; DJL is told to work offline ({@code ai.djl.offline}), so nothing is
 * downloaded at run time — a machine without network starts the same. Thread-safe.
 */
public final class HfTokenizer implements Tokenizer, AutoCloseable {

    private final HuggingFaceTokenizer tokenizer;

    private HfTokenizer(HuggingFaceTokenizer tokenizer) {
        this.tokenizer = tokenizer;
    }

    /**
     * Loads {@code tokenizerJson}; {@code addSpecialTokens}: add the model's special tokens (a BOS) as the engines do for a
     * completion prompt ({@code proxy.tokenizer.add-special-tokens}, true).
     */
    public static HfTokenizer load(Path tokenizerJson, boolean addSpecialTokens) throws IOException {
        if (!Files.isRegularFile(tokenizerJson)) {
            throw new IllegalArgumentException("proxy.tokenizer: not a file: " + tokenizerJson + " (the model's tokenizer.json)");
        }
        System.setProperty("ai.djl.offline", "true"); // never download: the native library is in the jar
        try {
            return new HfTokenizer(HuggingFaceTokenizer.newInstance(tokenizerJson, Map.of("addSpecialTokens", Boolean.toString(addSpecialTokens))));
        } catch (RuntimeException e) {
            throw new IllegalArgumentException("proxy.tokenizer: cannot load " + tokenizerJson + ": " + e.getMessage(), e);
        }
    }

    @Override
    public int countTokens(String prompt) {
        return tokenIds(prompt).length;
    }

    @Override
    public int[] tokenIds(String prompt) {
        Encoding e = tokenizer.encode(prompt);
        long[] ids = e.getIds();
        int[] out = new int[ids.length];
        for (int i = 0; i < ids.length; i++) {
            out[i] = Math.toIntExact(ids[i]);
        }
        return out;
    }

    @Override
    public void close() {
        tokenizer.close();
    }
}
