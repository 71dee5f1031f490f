package io.orbitkv.pd.engine.sim.model;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.engine.client.cache.BlockHashes;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HexFormat;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

/**
 * Block hashes byte by byte: the CBOR every language must produce (worked by hand from RFC 8949), the chain's prefix
 * property, and the golden vectors ({@code engine-model/block-hashes.json}) the Python engine checks too.
 */
class BlockHashesTest {

    static final Path VECTORS = Path.of("src/test/resources/engine-model/block-hashes.json");
    private static final HexFormat HEX = HexFormat.of();

    @Test
    void theCborIsCanonicalAndWorkedByHand() {
        // [h'00', [1, 2], null]: array(3), bytes(1) 00, array(2) 1 2, null
        assertThat(HEX.formatHex(BlockHashes.cbor(new byte[] {0}, new int[] {1, 2}, null))).isEqualTo("834100820102f6");
        // token ids of one, two and four bytes; extra keys as an array of text strings
        assertThat(HEX.formatHex(BlockHashes.cbor(new byte[] {0}, new int[] {23, 24, 1000, 100_000}, List.of("lora-a"))))
                .isEqualTo("834100" + "84" + "17" + "1818" + "1903e8" + "1a000186a0" + "81" + "666c6f72612d61");
    }

    @Test
    void aSharedPrefixGivesTheSameHashesAndAnythingElseDoesNot() {
        int[] a = new Random(1).ints(64, 0, 128_000).toArray();
        int[] b = a.clone();
        b[40] = b[40] + 1; // differs in the third 16-token block
        List<byte[]> ha = BlockHashes.chain("orbitkv", 16, a, null);
        List<byte[]> hb = BlockHashes.chain("orbitkv", 16, b, null);
        assertThat(ha).hasSize(4);
        assertThat(ha.get(1)).isEqualTo(hb.get(1));
        assertThat(ha.get(2)).isNotEqualTo(hb.get(2));
        assertThat(ha.get(3)).as("a block's hash covers its whole prefix").isNotEqualTo(hb.get(3));
        assertThat(BlockHashes.chain("other-seed", 16, a, null).get(0)).isNotEqualTo(ha.get(0));
        assertThat(BlockHashes.chain("orbitkv", 16, a, List.of("lora-a")).get(0)).isNotEqualTo(ha.get(0));
        assertThat(BlockHashes.chain("orbitkv", 16, java.util.Arrays.copyOf(a, 47), null)).as("only full blocks").hasSize(2);
    }

    @Test
    void theGoldenVectorsHold() throws Exception {
        ObjectMapper json = new ObjectMapper();
        if (Boolean.getBoolean("orbitkv.golden.write")) {
            ObjectNode root = json.createObjectNode();
            root.put("about", "Block hash vectors (docs/engine-model.md, 'Block hashes'): seed, block size, token ids, extra keys, and"
                    + " the hex SHA-256 of every full block. Written by BlockHashesTest; checked by the Java and Python engine models.");
            ArrayNode vs = root.putArray("vectors");
            Random r = new Random(32);
            for (int i = 0; i < 6; i++) {
                int n = 16 * (1 + r.nextInt(5)) + r.nextInt(16);
                int[] tokens = r.ints(n, 0, i % 2 == 0 ? 32_000 : 152_000).toArray();
                List<String> extra = i % 3 == 2 ? List.of("lora-" + i, "salt-" + i) : null;
                ObjectNode v = vs.addObject().put("seed", i < 4 ? "orbitkv" : "seed-" + i).put("block_tokens", 16);
                ArrayNode t = v.putArray("tokens");
                for (int x : tokens) {
                    t.add(x);
                }
                if (extra == null) {
                    v.putNull("extra_keys");
                } else {
                    extra.forEach(v.putArray("extra_keys")::add);
                }
                ArrayNode h = v.putArray("hashes");
                BlockHashes.chain(v.get("seed").asText(), 16, tokens, extra).forEach(b -> h.add(HEX.formatHex(b)));
            }
            Files.createDirectories(VECTORS.getParent());
            Files.writeString(VECTORS, json.writerWithDefaultPrettyPrinter().writeValueAsString(root) + "\n");
        }
        JsonNode root = json.readTree(VECTORS.toFile());
        assertThat(root.path("vectors").size()).isGreaterThanOrEqualTo(6);
        for (JsonNode v : root.path("vectors")) {
            int[] tokens = new int[v.path("tokens").size()];
            for (int i = 0; i < tokens.length; i++) {
                tokens[i] = v.path("tokens").get(i).asInt();
            }
            List<String> extra = v.path("extra_keys").isNull() ? null
                    : java.util.stream.StreamSupport.stream(v.path("extra_keys").spliterator(), false).map(JsonNode::asText).toList();
            List<String> got = BlockHashes.chain(v.path("seed").asText(), v.path("block_tokens").asInt(), tokens, extra).stream()
                    .map(HEX::formatHex).toList();
            List<String> want = java.util.stream.StreamSupport.stream(v.path("hashes").spliterator(), false).map(JsonNode::asText).toList();
            assertThat(got).isEqualTo(want);
        }
    }
}
