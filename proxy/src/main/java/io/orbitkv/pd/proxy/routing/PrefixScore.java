package io.orbitkv.pd.proxy.routing;

import java.util.List;
import java.util.Map;
import java.util.function.ToLongFunction;

/**
 * Prefix-aware choice of a prefill engine (docs/routing.md, "Routing"): each candidate scores
 * {@code cacheWeight × (its longest cached prefix of the prompt / the prompt's blocks) − loadWeight × (its requests in
 * flight / (the most any candidate has + 1))}; the highest wins, ties to the less loaded, then (given the index) to the
 * one caching the fewest blocks, then the first in id order.
 * The cache term says how much prefill an engine would skip, the load term how long the request would queue there —
 * the same trade llm-d's precise scorer (prefix × load weights) and Dynamo's router (prefill blocks + decode blocks) make.
 */
public final class PrefixScore {

    private PrefixScore() { }

    /** The weights ({@code proxy.routing.prefix.cache-weight}, {@code .load-weight}). */
    public record Weights(double cache, double load) {
        public Weights {
            if (!(cache >= 0) || !(load >= 0)) {
                throw new IllegalArgumentException("proxy.routing.prefix.*-weight: must be >= 0, got cache " + cache + ", load " + load);
            }
        }
    }

    /** What was chosen and why: the engine, its matched blocks and score, and every candidate's score by engine id. */
    public record Choice(EngineInfo engine, int matchedBlocks, double score, Map<String, Double> scores) { }

    public static Choice choose(List<EngineInfo> candidates, Map<String, Integer> matches, int promptBlocks, ToLongFunction<String> load,
                                Weights w) {
        return choose(candidates, id -> matches.getOrDefault(id, 0), id -> promptBlocks, load, w, id -> 0);
    }

    /** As above, each engine's prompt blocks counted in its own block size ({@link PrefixRouter.Match}). */
    public static Choice choose(List<EngineInfo> candidates, PrefixRouter.Match m, ToLongFunction<String> load, Weights w) {
        return choose(candidates, m::matched, m::blocks, load, w, id -> 0);
    }

    /**
     * As above; among engines of the same score and load, the one whose cache holds the fewest blocks ({@code cached}:
     * what the KV index holds of it) — a prompt no engine holds goes where there is most room for it, instead of to the
     * first engine by id, which would collect every new prefix while loads tie and evict its own.
     */
    public static Choice choose(List<EngineInfo> candidates, PrefixRouter.Match m, ToLongFunction<String> load, Weights w, ToLongFunction<String> cached) {
        return choose(candidates, m::matched, m::blocks, load, w, cached);
    }

    private static Choice choose(List<EngineInfo> candidates, java.util.function.ToIntFunction<String> matched,
                                 java.util.function.ToIntFunction<String> blocks, ToLongFunction<String> load, Weights w, ToLongFunction<String> cached) {
        long maxLoad = 0;
        for (EngineInfo e : candidates) {
            maxLoad = Math.max(maxLoad, Math.max(e.inFlight(), load.applyAsLong(e.engineId())));
        }
        Choice best = null;
        long bestLoad = Long.MAX_VALUE;
        long bestCached = Long.MAX_VALUE;
        Map<String, Double> scores = new java.util.LinkedHashMap<>();
        for (EngineInfo e : candidates) {
            int m = matched.applyAsInt(e.engineId());
            int b = blocks.applyAsInt(e.engineId());
            long l = Math.max(e.inFlight(), load.applyAsLong(e.engineId()));
            double score = w.cache() * (b == 0 ? 0 : (double) m / b) - w.load() * ((double) l / (maxLoad + 1));
            scores.put(e.engineId(), score);
            long c = cached.applyAsLong(e.engineId());
            if (best == null || score > best.score() || (score == best.score() && (l < bestLoad || (l == bestLoad && c < bestCached)))) {
                best = new Choice(e, m, score, scores);
                bestLoad = l;
                bestCached = c;
            }
        }
        return best;
    }
}
