package io.orbitkv.pd.engine.sim;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvGeometry;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import org.junit.jupiter.api.Test;

class SimModelTest {

    private static final KvGeometry TINY = ModelPreset.TINY.geometry(64, 1);
    private final SimModel model = new SimModel(42);

    @Test
    void tokenizationIsDeterministicAndChunksWords() {
        int[] a = SimModel.tokenize("The quick brown fox jumps");
        assertThat(SimModel.tokenize("The quick brown fox jumps")).containsExactly(a);
        // "The", " quic", "k", " brow", "n", " fox", " jump", "s"
        assertThat(a).hasSize(8);
        assertThat(SimModel.tokenize("")).isEmpty();
        assertThat(SimModel.tokenize("   ")).hasSize(1); // whitespace is a token too
        // more tokens than a quarter of the characters (the first guess of their number): "a", then " a" 999 times, then " "
        int[] many = SimModel.tokenize("a ".repeat(1000));
        assertThat(many).hasSize(1001);
        assertThat(many[1]).isEqualTo(many[999]).isNotEqualTo(many[0]);
    }

    /**
     * The same values python/tests/test_sim_model.py asserts for the Python port (python/orbitkv_pd/sim_model.py): a
     * Python engine and a Java engine must agree on every token and every KV byte.
     */
    @Test
    void theModelAgreesWithItsPythonPortOnTokensGenerationAndKvBytes() {
        int[] t = SimModel.tokenize("Hello world, P/D disaggregation!");
        assertThat(t).containsExactly(9734, 20638, 2219, 22669, 13462, 17488, 4994, 862, 30563);
        assertThat(model.generate(t, 5)).containsExactly(21709, 19241, 14529, 15933, 11599);
        assertThat(SimModel.detokenize(model.generate(t, 5))).isEqualTo(" biro lugetra dai dea brougi");
        assertThat(SimModel.tokenize("naïve café — 東京 🚀 a\u00a0b\tc")).containsExactly(8556, 20448, 5251, 739, 14481, 5660, 4558, 22469);
        // 44-byte token slots (not a multiple of 8: the tail bytes are checked too).
        KvGeometry g = new KvGeometry(2, io.orbitkv.pd.events.KvSplit.SEPARATE, 16, 1, 22, io.orbitkv.pd.events.Dtype.BF16, 704, 4);
        try (HostKvPool pool = HostKvPool.allocate(g)) {
            model.writeKv(pool, new int[] {2}, t);
            assertThat(hex(pool.hostRegion(1).orElseThrow().asSlice(2 * 704, 44)))
                    .isEqualTo("54abb8f029a7be916b2f6671e22de7337ea32df2bcb32fd51527db727538547728bb86f30fbe9c183f3f4c74");
            assertThat(hex(pool.hostRegion(2).orElseThrow().asSlice(2 * 704 + 8 * 44, 44)))
                    .isEqualTo("ff0a754f7e53498fc08eabceb5d9102dd502e04deb47d8cbbe8616cd22cca369831a4b4c584a6b06949e81cb");
        }
    }

    private static String hex(MemorySegment s) {
        return java.util.HexFormat.of().formatHex(s.toArray(ValueLayout.JAVA_BYTE));
    }

    @Test
    void generationIsAFunctionOfSeedAndPrompt() {
        int[] prompt = SimModel.tokenize("Tell me about disaggregated inference");
        assertThat(model.generate(prompt, 16)).containsExactly(new SimModel(42).generate(prompt, 16));
        assertThat(model.generate(prompt, 16)).isNotEqualTo(new SimModel(43).generate(prompt, 16));
        assertThat(model.generate(prompt, 16)).isNotEqualTo(model.generate(SimModel.tokenize("Tell me about colocated inference"), 16));
        // A longer generation extends a shorter one: the first token is the prefill's.
        assertThat(model.generate(prompt, 16)).startsWith(model.generate(prompt, 1));
        assertThat(model.answer("hello world", 4)).isEqualTo(SimModel.detokenize(model.generate(SimModel.tokenize("hello world"), 4)));
    }

    @Test
    void kvWrittenByOneEngineVerifiesOnAnotherAtOtherBlocks() {
        int[] prompt = SimModel.tokenize("a".repeat(10) + " lorem ipsum dolor sit amet, consectetur adipiscing elit ".repeat(8));
        int blocks = SimModel.blocksFor(TINY, prompt.length);
        try (HostKvPool prefill = HostKvPool.allocate(TINY); HostKvPool decode = HostKvPool.allocate(TINY)) {
            int[] src = range(3, blocks);
            int[] dst = range(40, blocks);
            model.writeKv(prefill, src, prompt);
            copy(prefill, src, decode, dst);
            assertThat(model.verifyKv(decode, dst, prompt)).isNull();
            // Another prompt's KV, another seed's, or a shifted page list does not verify.
            assertThat(model.verifyKv(decode, dst, SimModel.tokenize("something else entirely, of similar length, and more"))).isNotNull();
            assertThat(new SimModel(7).verifyKv(decode, dst, prompt)).isNotNull();
        }
    }

    @Test
    void aSingleFlippedByteInAnyPageIsCaught() {
        int[] prompt = SimModel.tokenize("the decode side verifies every page it received ".repeat(6));
        int n = SimModel.blocksFor(TINY, prompt.length);
        try (HostKvPool pool = HostKvPool.allocate(TINY)) {
            int[] blocks = range(0, n);
            model.writeKv(pool, blocks, prompt);
            assertThat(model.verifyKv(pool, blocks, prompt)).isNull();
            // flip one bit in the last layer's V page of the second block, token 5
            int region = TINY.regionCount() - 1;
            int tb = SimModel.tokenBytes(TINY);
            MemorySegment page = pool.page(region, blocks[1]);
            long at = 5L * tb + 17;
            page.set(ValueLayout.JAVA_BYTE, at, (byte) (page.get(ValueLayout.JAVA_BYTE, at) ^ 0x10));
            SimModel.Mismatch m = model.verifyKv(pool, blocks, prompt);
            assertThat(m).isNotNull();
            assertThat(m.block()).isEqualTo(blocks[1]);
            assertThat(m.token()).isEqualTo(TINY.blockSizeTokens() + 5);
            assertThat(m.byteInToken()).isEqualTo(17);
            assertThat(m.region()).isEqualTo("layer 3 V");
        }
    }

    @Test
    void kvOfATokenDependsOnItsWholePrefixAndLayer() {
        int[] a = SimModel.tokenize("one two three four");
        int[] b = SimModel.tokenize("uno two three four");
        long[] ha = model.prefixHashes(a);
        long[] hb = model.prefixHashes(b);
        for (int i = 0; i < a.length; i++) {
            assertThat(ha[i]).isNotEqualTo(hb[i]);
        }
        try (HostKvPool pool = HostKvPool.allocate(TINY)) {
            model.writeKv(pool, new int[] {0}, a);
            assertThat(pool.page(0, 0).asSlice(0, 64).toArray(ValueLayout.JAVA_BYTE))
                    .isNotEqualTo(pool.page(2, 0).asSlice(0, 64).toArray(ValueLayout.JAVA_BYTE));
        }
    }

    @Test
    void presetsAreShapedLikeRealModels() {
        KvGeometry g8 = ModelPreset.LLAMA_8B.geometry(16, 1);
        assertThat(g8.pageBytes()).isEqualTo(32 * 1024);
        assertThat(g8.bytesPerBlock()).isEqualTo(2L * 1024 * 1024);
        KvGeometry g70 = ModelPreset.LLAMA_70B.geometry(16, 1);
        assertThat(g70.numLayers()).isEqualTo(80);
        assertThat(g70.bytesPerBlock()).isEqualTo(5L * 1024 * 1024);
        assertThat(ModelPreset.LLAMA_70B.geometry(16, 8).pageBytes()).isEqualTo(4 * 1024);
    }

    private static int[] range(int start, int n) {
        int[] r = new int[n];
        for (int i = 0; i < n; i++) {
            r[i] = start + i;
        }
        return r;
    }

    private static void copy(HostKvPool from, int[] src, HostKvPool to, int[] dst) {
        for (int r = 0; r < TINY.regionCount(); r++) {
            for (int i = 0; i < src.length; i++) {
                to.page(r, dst[i]).copyFrom(from.page(r, src[i]));
            }
        }
    }
}
