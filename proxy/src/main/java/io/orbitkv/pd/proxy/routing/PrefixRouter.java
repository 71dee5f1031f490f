package io.orbitkv.pd.proxy.routing;

import io.orbitkv.pd.engine.client.cache.BlockHashes;
import io.orbitkv.pd.events.RoutingCandidate;
import io.orbitkv.pd.events.RoutingDecision;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.Function;
import java.util.function.ToLongFunction;

/**
 * What the engines hold of one prompt (docs/routing.md, "Routing"): the prompt's full blocks hashed as each engine hashes
 * its own — the algorithm, seed and block size of its registration, so an engine whose seed differs from the proxy's is
 * matched with its own instead of silently matching nothing — and every engine's longest cached prefix in the KV index.
 * An engine whose algorithm the proxy cannot compute matches 0 and says so ({@link #hashingOf}); one that did not register
 * its hashing is taken to hash as the proxy's settings say.
 */
public final class PrefixRouter {

    /** The block hash the proxy computes: vLLM's {@code sha256_cbor} ({@link BlockHashes}). */
    public static final String ALGORITHM = "sha256_cbor";

    private PrefixRouter() { }

    /**
     * One prompt against the engines.
     *
     * @param keys    the prompt's full blocks under the proxy's own hashing, as index keys ({@link BlockSet#key})
     * @param matched per engine, its longest cached prefix in blocks (under its own hashing)
     * @param blocks  per engine, the prompt's full blocks under its hashing (differs from {@code keys.length} only for an
     *                engine of another block size)
     * @param hashing per engine, {@code same} or how its hashing differs from the proxy's
     */
    public record Match(int promptTokens, long[] keys, Map<String, Integer> matched, Map<String, Integer> blocks, Map<String, String> hashing) {
        public int matched(String engineId) {
            return matched.getOrDefault(engineId, 0);
        }

        public int blocks(String engineId) {
            return blocks.getOrDefault(engineId, keys.length);
        }
    }

    /** How {@code engine}'s registered hashing compares with the proxy's {@code own}: {@code same}, or what differs. */
    public static String hashingOf(EngineInfo.Hashing engine, EngineInfo.Hashing own) {
        if (engine == null) {
            return "same"; // it did not say: the proxy's settings are all there is to go on
        }
        if (!ALGORITHM.equals(engine.algorithm())) {
            return "algorithm " + engine.algorithm() + " is not one the proxy computes (" + ALGORITHM + "): not matched by cache";
        }
        if (engine.blockSize() < 1) {
            return "no block size registered: not matched by cache";
        }
        if (engine.seed().equals(own.seed()) && engine.blockSize() == own.blockSize()) {
            return "same";
        }
        return "seed " + engine.seed() + ", " + engine.blockSize() + "-token blocks (the proxy's: seed " + own.seed() + ", " + own.blockSize()
                + "): matched with its own";
    }

    /**
     * Matches {@code tokenIds} against every engine of {@code engines} in {@code index} (a function from a prompt's block
     * hashes to each indexed engine's longest cached prefix), hashing the prompt once per distinct hashing among them.
     */
    public static Match match(int[] tokenIds, List<EngineInfo> engines, EngineInfo.Hashing own, Function<List<byte[]>, Map<String, Integer>> index) {
        Map<EngineInfo.Hashing, List<byte[]>> hashed = new HashMap<>();
        List<byte[]> mine = BlockHashes.chain(own.seed(), own.blockSize(), tokenIds, null);
        hashed.put(own, mine);
        Map<EngineInfo.Hashing, Map<String, Integer>> found = new HashMap<>();
        Map<String, Integer> matched = new LinkedHashMap<>();
        Map<String, Integer> blocks = new LinkedHashMap<>();
        Map<String, String> hashing = new LinkedHashMap<>();
        for (EngineInfo e : engines) {
            String how = hashingOf(e.hashing(), own);
            hashing.put(e.engineId(), how);
            if (!how.equals("same") && !how.endsWith("matched with its own")) {
                matched.put(e.engineId(), 0);
                continue;
            }
            EngineInfo.Hashing h = how.equals("same") ? own : e.hashing();
            List<byte[]> hashes = hashed.computeIfAbsent(h, k -> BlockHashes.chain(k.seed(), k.blockSize(), tokenIds, null));
            matched.put(e.engineId(), found.computeIfAbsent(h, k -> index.apply(hashes)).getOrDefault(e.engineId(), 0));
            blocks.put(e.engineId(), hashes.size());
        }
        long[] keys = new long[mine.size()];
        for (int i = 0; i < keys.length; i++) {
            keys[i] = BlockSet.key(mine.get(i));
        }
        return new Match(tokenIds.length, keys, matched, blocks, hashing);
    }

    /** The routing decision as the log keeps it ({@code RequestAnswered.routing}). */
    public static RoutingDecision decision(String policy, String rule, Match m, EngineInfo.Hashing own, List<EngineInfo> prefillSide,
                                           List<EngineInfo> decodeSide, EngineInfo decode, ToLongFunction<String> load,
                                           Map<String, Double> scores) {
        List<RoutingCandidate> cands = new ArrayList<>();
        for (List<EngineInfo> side : List.of(prefillSide, decodeSide)) {
            String role = side == prefillSide ? "prefill" : "decode";
            for (EngineInfo e : side) {
                cands.add(RoutingCandidate.newBuilder().setEngineId(e.engineId()).setRole(role).setMatchedBlocks(m.matched(e.engineId()))
                        .setLoad(Math.max(e.inFlight(), load.applyAsLong(e.engineId())))
                        .setScore(scores.get(role + "/" + e.engineId())).setHashing(m.hashing().getOrDefault(e.engineId(), "same")).build());
            }
        }
        List<Long> keys = new ArrayList<>(m.keys().length);
        for (long k : m.keys()) {
            keys.add(k);
        }
        return RoutingDecision.newBuilder().setPolicy(policy).setRule(rule).setPromptTokens(m.promptTokens()).setBlockSize(own.blockSize())
                .setHashAlgorithm(ALGORITHM).setHashSeed(own.seed()).setBlockKeys(keys)
                .setDecodeMatchedBlocks(decode == null ? 0 : m.matched(decode.engineId())).setCandidates(cands).build();
    }
}
