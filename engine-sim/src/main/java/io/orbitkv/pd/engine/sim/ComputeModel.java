package io.orbitkv.pd.engine.sim;

import static io.orbitkv.pd.schemas.config.ConfigProps.requireRange;

import io.orbitkv.pd.engine.sim.model.CostModel;
import io.orbitkv.pd.engine.sim.model.CostModels;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.util.Map;
import java.util.TreeSet;

/**
 * How the simulated model computes (docs/engine-model.md): one forward step at a time, scheduled by the engine model's
 * {@code StepScheduler} under vLLM's limits, each step as long as the cost model says.
 *
 * @param cost             the cost model's name ({@code engine.cost}: llama-8b-h100, llama-70b-tp4, tiny, per-token)
 * @param costs            its parameters
 * @param maxBatchedTokens tokens a step computes at most ({@code engine.max-batched-tokens}, vLLM's {@code max_num_batched_tokens})
 * @param maxNumSeqs       sequences running at once ({@code engine.max-num-seqs}, vLLM's {@code max_num_seqs})
 * @param prefixCache      whether cached prompt blocks spare their compute ({@code engine.prefix-cache.enabled})
 * @param prefixCacheSeed  the seed of the first block's parent hash ({@code engine.prefix-cache.seed})
 * @param skipCached       a decode engine says how many of the prompt's first blocks its prefix cache holds, fills them
 *                         itself and the order moves only the rest ({@code engine.prefix-cache.skip-transfer}, true;
 *                         false: every block moves, as before the KV-aware routing)
 * @param kvWait           how long a request waits for free KV pages, first come first served, before it is refused 503
 *                         ({@code engine.kv-wait}, 30 s; 0: refused at once): vLLM keeps a request that does not fit in its
 *                         waiting queue until pages free up, it does not refuse it
 * @param progressReports  how many times a prefill step reports how far its layers have come ({@code prefill_progress},
 *                         so the worker pushes each layer's KV while the next computes: docs/worker.md, "Layer by layer";
 *                         {@code engine.layerwise.reports-per-step}, 32: every layer of an 8B-shaped model; 0: never), spread evenly over the step's time
 * @param progressInterval the least time between two of a step's progress reports ({@code engine.layerwise.min-report-interval},
 *                         1 ms): a short step groups its layers into fewer reports, so their cost (~60 µs of CPU a frame,
 *                         docs/bench/progress-signal.md) stays a small share of the step's time
 */
public record ComputeModel(String cost, CostModel costs, int maxBatchedTokens, int maxNumSeqs, boolean prefixCache, String prefixCacheSeed,
                           boolean skipCached, java.time.Duration kvWait, int progressReports,
                           java.time.Duration progressInterval) {

    public static final String PER_TOKEN = "per-token";

    public ComputeModel {
        requireRange("engine.max-batched-tokens", maxBatchedTokens, 1, 10_000_000);
        requireRange("engine.max-num-seqs", maxNumSeqs, 1, 100_000);
        if (kvWait.isNegative()) {
            throw new IllegalArgumentException("engine.kv-wait: must be >= 0, got " + kvWait);
        }
        requireRange("engine.layerwise.reports-per-step", progressReports, 0, 1024);
        if (progressInterval.isNegative()) {
            throw new IllegalArgumentException("engine.layerwise.min-report-interval: must be >= 0, got " + progressInterval);
        }
    }

    /**
     * Reads the keys. {@code engine.cost} defaults to the preset's calibrated model (8b → llama-8b-h100, 70b →
     * llama-70b-tp4, tiny → tiny), or to {@code per-token} when {@code engine.compute.prefill-ms-per-token} or
     * {@code .decode-ms-per-token} is set (the engines' knobs before the step model; defaults 0.05 and 2.0 ms).
     */
    static ComputeModel from(ConfigProps p, ModelPreset preset) {
        String prefillMs = p.string("engine.compute.prefill-ms-per-token", null);
        String decodeMs = p.string("engine.compute.decode-ms-per-token", null);
        String def = prefillMs != null || decodeMs != null ? PER_TOKEN : switch (preset) {
            case LLAMA_8B -> "llama-8b-h100";
            case LLAMA_70B -> "llama-70b-tp4";
            case TINY -> "tiny";
        };
        String cost = p.string("engine.cost", def).trim();
        CostModel costs;
        if (PER_TOKEN.equals(cost)) {
            costs = CostModels.perToken(number("engine.compute.prefill-ms-per-token", prefillMs, 0.05),
                    number("engine.compute.decode-ms-per-token", decodeMs, 2.0));
        } else {
            costs = CostModels.BY_NAME.get(cost);
            if (costs == null) {
                TreeSet<String> names = new TreeSet<>(CostModels.BY_NAME.keySet());
                names.add(PER_TOKEN);
                throw new IllegalArgumentException("engine.cost: must be one of " + names + ", got '" + cost + "'");
            }
        }
        return new ComputeModel(cost, costs, p.integer("engine.max-batched-tokens", 8192), p.integer("engine.max-num-seqs", 256),
                p.bool("engine.prefix-cache.enabled", true), p.string("engine.prefix-cache.seed", "orbitkv"),
                p.bool("engine.prefix-cache.skip-transfer", true),
                p.duration("engine.kv-wait", java.time.Duration.ofSeconds(30)), p.integer("engine.layerwise.reports-per-step", 32),
                p.duration("engine.layerwise.min-report-interval", java.time.Duration.ofMillis(1)));
    }

    private static double number(String key, String v, double def) {
        if (v == null) {
            return def;
        }
        try {
            return Double.parseDouble(v.trim());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(key + ": must be a number, got '" + v + "'");
        }
    }

    /** What {@code /stats} says of it. */
    Map<String, Object> describe() {
        return Map.of("cost", cost, "max_batched_tokens", maxBatchedTokens, "max_num_seqs", maxNumSeqs, "prefix_cache", prefixCache);
    }
}
