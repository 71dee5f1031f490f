package io.orbitkv.pd.proxy.routing;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.orbitkv.pd.engine.client.cache.BlockHashes;
import io.orbitkv.pd.events.BlockStored;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.events.KvCacheEvent;
import io.orbitkv.pd.events.RoutingDecision;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class PrefixRouterTest {

    private static final EngineInfo.Hashing OWN = new EngineInfo.Hashing(PrefixRouter.ALGORITHM, "orbitkv", 16);

    private static int[] prompt(int tokens) {
        int[] ids = new int[tokens];
        for (int i = 0; i < tokens; i++) {
            ids[i] = 1000 + i;
        }
        return ids;
    }

    /** The engine cached the whole prompt, its blocks hashed with {@code seed} in {@code blockSize}-token blocks. */
    private static KvCacheEvent cachedBy(String engine, String seed, int blockSize, int[] ids) {
        List<ByteBuffer> hashes = new ArrayList<>();
        BlockHashes.chain(seed, blockSize, ids, null).forEach(h -> hashes.add(ByteBuffer.wrap(h)));
        List<Integer> tokens = new ArrayList<>();
        for (int i = 0; i < hashes.size() * blockSize; i++) {
            tokens.add(ids[i]);
        }
        return KvEvents.ev(engine, 1, 1, BlockStored.newBuilder().setBlockHashes(hashes).setTokenIds(tokens).setBlockSize(blockSize).build());
    }

    private static EngineInfo engine(String id, EngineInfo.Hashing h) {
        return new EngineInfo(id, EngineRole.PREFILL, "http://x", 0, null, h);
    }

    @Test
    void anEngineOfAnotherSeedIsMatchedWithItsOwnHashesNotSilentlyZero() {
        int[] ids = prompt(100); // 6 full blocks of 16
        KvIndex index = new KvIndex();
        index.apply(cachedBy("same", "orbitkv", 16, ids));
        index.apply(cachedBy("other-seed", "salted", 16, ids));
        index.apply(cachedBy("unregistered", "orbitkv", 16, ids));
        List<EngineInfo> engines = List.of(engine("same", OWN), engine("other-seed", new EngineInfo.Hashing("sha256_cbor", "salted", 16)),
                engine("unregistered", null), engine("xxhash", new EngineInfo.Hashing("xxhash", "orbitkv", 16)));
        PrefixRouter.Match m = PrefixRouter.match(ids, engines, OWN, index::matches);
        assertEquals(6, m.keys().length);
        assertEquals(6, m.matched("same"));
        assertEquals(6, m.matched("other-seed"), "hashed with its registered seed");
        assertEquals(6, m.matched("unregistered"), "no hashing registered: the proxy's settings");
        assertEquals(0, m.matched("xxhash"));
        assertEquals("same", m.hashing().get("same"));
        assertTrue(m.hashing().get("other-seed").contains("seed salted") && m.hashing().get("other-seed").endsWith("matched with its own"),
                m.hashing().get("other-seed"));
        assertTrue(m.hashing().get("xxhash").contains("not matched by cache"), m.hashing().get("xxhash"));
    }

    @Test
    void anEngineOfAnotherBlockSizeCountsItsOwnBlocks() {
        int[] ids = prompt(100);
        KvIndex index = new KvIndex();
        index.apply(cachedBy("big-blocks", "orbitkv", 32, ids));
        PrefixRouter.Match m = PrefixRouter.match(ids, List.of(engine("big-blocks", new EngineInfo.Hashing("sha256_cbor", "orbitkv", 32))), OWN,
                index::matches);
        assertEquals(3, m.matched("big-blocks"));
        assertEquals(3, m.blocks("big-blocks"));
        PrefixScore.Choice c = PrefixScore.choose(List.of(engine("big-blocks", null)), m, id -> 0, new PrefixScore.Weights(1, 1));
        assertEquals(1.0, c.score(), 1e-9, "all of its blocks: a full match");
    }

    @Test
    void theDecisionNamesEveryCandidateItsMatchLoadScoreAndTheRule() {
        int[] ids = prompt(64);
        KvIndex index = new KvIndex();
        index.apply(cachedBy("p0", "orbitkv", 16, java.util.Arrays.copyOf(ids, 32)));
        EngineInfo p0 = engine("p0", OWN);
        EngineInfo p1 = engine("p1", OWN);
        EngineInfo d0 = new EngineInfo("d0", EngineRole.DECODE, "http://x", 0, null, OWN);
        PrefixRouter.Match m = PrefixRouter.match(ids, List.of(p0, p1, d0), OWN, index::matches);
        Map<String, Integer> load = Map.of("p0", 3, "p1", 0);
        PrefixScore.Choice c = PrefixScore.choose(List.of(p0, p1), m, id -> load.getOrDefault(id, 0), new PrefixScore.Weights(1, 1));
        assertEquals("p1", c.engine().engineId(), "half the prompt on the busiest engine loses to an idle one at weights 1/1");
        Map<String, Double> scores = new java.util.HashMap<>();
        c.scores().forEach((id, v) -> scores.put("prefill/" + id, v));
        RoutingDecision d = PrefixRouter.decision("prefix_aware", "prefix_score", m, OWN, List.of(p0, p1), List.of(d0), d0,
                id -> load.getOrDefault(id, 0), scores);
        assertEquals(4, d.getBlockKeys().size());
        assertEquals(BlockSet.key(BlockHashes.chain("orbitkv", 16, ids, null).get(0)), d.getBlockKeys().get(0));
        assertEquals(3, d.getCandidates().size());
        assertEquals(2, d.getCandidates().get(0).getMatchedBlocks());
        assertEquals(3, d.getCandidates().get(0).getLoad());
        assertEquals(0.5 - 0.75, d.getCandidates().get(0).getScore(), 1e-9);
        assertEquals(null, d.getCandidates().get(2).getScore(), "the decode side was not scored");
        String text = io.orbitkv.pd.schemas.EventText.describe(io.orbitkv.pd.events.RequestAnswered.newBuilder().setRequestId("r").setProxyId("p")
                .setRoute("pd").setStatus(200).setEnd("ANSWERED").setTotalUs(1).setAnsweredAtMs(1).setRouting(d).build());
        assertTrue(text.contains("routing={prefix_aware rule=prefix_score prompt=64 tokens/4 blocks prefill=[p0 2 cached, load 3, score -0.250"), text);
    }

    @Test
    void aPromptNoEngineHoldsGoesWhereTheCacheHasMostRoomNotToTheFirstById() {
        int[] ids = prompt(64);
        PrefixRouter.Match m = PrefixRouter.match(ids, List.of(engine("p0", OWN), engine("p1", OWN)), OWN, new KvIndex()::matches);
        Map<String, Long> cached = Map.of("p0", 900L, "p1", 100L);
        PrefixScore.Choice c = PrefixScore.choose(List.of(engine("p0", OWN), engine("p1", OWN)), m, id -> 0, new PrefixScore.Weights(1, 1),
                id -> cached.getOrDefault(id, 0L));
        assertEquals("p1", c.engine().engineId());
    }
}
