package io.orbitkv.pd.proxy;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.engine.client.cache.BlockHashes;
import java.nio.file.Files;
import java.nio.file.Path;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * A real model's tokenizer in the proxy: a small {@code tokenizer.json} the test writes (HuggingFace's format: a word-level
 * model over a whitespace pre-tokenizer, a BOS added by a template post-processor, as Llama's files add one) is loaded
 * offline through the binding, and gives the ids its vocabulary says — so the proxy hashes a prompt's blocks over the
 * ids the model's engines compute.
 */
class HfTokenizerTest {

    /** [BOS]=1, [UNK]=0, then one id per word. */
    static String tokenizerJson() {
        String[] words = {"the", "cache", "moves", "only", "what", "is", "missing", "prefill", "decode", "engine"};
        StringBuilder vocab = new StringBuilder("\"[UNK]\": 0, \"[BOS]\": 1");
        for (int i = 0; i < words.length; i++) {
            vocab.append(", \"").append(words[i]).append("\": ").append(i + 2);
        }
        return """
                {"version": "1.0", "truncation": null, "padding": null,
                 "added_tokens": [
                   {"id": 0, "content": "[UNK]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},
                   {"id": 1, "content": "[BOS]", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true}],
                 "normalizer": null,
                 "pre_tokenizer": {"type": "Whitespace"},
                 "post_processor": {"type": "TemplateProcessing",
                   "single": [{"SpecialToken": {"id": "[BOS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                   "pair": [{"SpecialToken": {"id": "[BOS]", "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 1}}],
                   "special_tokens": {"[BOS]": {"id": "[BOS]", "ids": [1], "tokens": ["[BOS]"]}}},
                 "decoder": null,
                 "model": {"type": "WordLevel", "vocab": {%s}, "unk_token": "[UNK]"}}
                """.formatted(vocab);
    }

    @Test
    void theModelsTokenizerGivesTheIdsItsVocabularySaysWithTheBos(@TempDir Path dir) throws Exception {
        Path file = Files.writeString(dir.resolve("tokenizer.json"), tokenizerJson());
        try (HfTokenizer t = HfTokenizer.load(file, true)) {
            assertThat(t.tokenIds("the cache moves only what is missing")).containsExactly(1, 2, 3, 4, 5, 6, 7, 8);
            assertThat(t.tokenIds("the prefill engine decode unknownword")).containsExactly(1, 2, 9, 11, 10, 0);
            assertThat(t.countTokens("the cache")).isEqualTo(3);
            // the prompt's blocks hashed over the model's ids, as its engines hash them
            int[] ids = t.tokenIds("the cache moves ".repeat(11).trim()); // 34 ids: 2 full blocks of 16
            assertThat(BlockHashes.chain("orbitkv", 16, ids, null)).hasSize(2);
        }
        try (HfTokenizer t = HfTokenizer.load(file, false)) {
            assertThat(t.tokenIds("the cache")).containsExactly(2, 3);
        }
        assertThat(System.getProperty("ai.djl.offline")).as("nothing downloaded at run time").isEqualTo("true");
    }

    @Test
    void aMissingOrBrokenFileIsRefusedNamingTheKey(@TempDir Path dir) throws Exception {
        assertThatThrownBy(() -> HfTokenizer.load(dir.resolve("nope.json"), true)).hasMessageContaining("proxy.tokenizer: not a file");
        Path bad = Files.writeString(dir.resolve("tokenizer.json"), "{\"model\": 3}");
        assertThatThrownBy(() -> HfTokenizer.load(bad, true)).hasMessageContaining("proxy.tokenizer: cannot load");
    }
}
