package io.orbitkv.pd.engine.sim.model;

/**
 * The cost models of the model presets, calibrated against published figures of the preset's model served by vLLM or
 * SGLang on H100 / H200 (docs/engine-model.md, "Calibration": every point, its source, and the model's error; {@code
 * CalibrationTest} re-runs each). The Python engine model carries the same numbers ({@code orbitkv_pd.engine_model}).
 */
public final class CostModels {

    private CostModels() { }

    /**
     * Llama-3.1-8B, one H100, BF16 KV. Fixed 6.44 ms and 43.7 ns per KV token read: vLLM's own fit of batch-1 ITL against
     * context length (FlashAttention-3, 256 to 125k tokens); 28 µs per decoding sequence: SGLang's batch-1 → batch-128
     * decode steps; 22.3 µs per prompt token and 1 ns per attention pair: SGLang's 128 × 128-token prefill batch and
     * vLLM's 20k-token TTFT.
     */
    public static final CostModel LLAMA_8B_H100 = new CostModel(6_440_000_000L, 22_300_000L, 1_000L, 28_000_000L, 43_700L);

    /**
     * Llama-3-70B over four GPUs (tensor parallel 4): 15.6 ms fixed (vLLM's CI latency run on 4 × H200, batch 8, 32 in,
     * 128 out); the per-token parts scaled from the 8B model by the weights and KV each GPU holds (not fitted: one point).
     */
    public static final CostModel LLAMA_70B_TP4 = new CostModel(15_600_000_000L, 58_000_000L, 1_100L, 60_000_000L, 27_000L);

    /** For tests and small demos: fast, not calibrated. */
    public static final CostModel TINY = new CostModel(200_000_000L, 2_000_000L, 0L, 10_000_000L, 0L);

    /** The cost models by their {@code engine.cost} name. */
    public static final java.util.Map<String, CostModel> BY_NAME = java.util.Map.of("llama-8b-h100", LLAMA_8B_H100, "llama-70b-tp4", LLAMA_70B_TP4,
            "tiny", TINY);

    /**
     * {@code engine.cost=per-token}, the engines' model before the step model (and the tests' knob): a step costs the
     * decode time per token, plus the prefill time per prompt token it computes; batch size and context cost nothing.
     */
    public static CostModel perToken(double prefillMsPerToken, double decodeMsPerToken) {
        if (!(prefillMsPerToken >= 0) || !(decodeMsPerToken >= 0)) {
            throw new IllegalArgumentException("engine.compute.*: must be >= 0 ms, got prefill " + prefillMsPerToken + " / decode " + decodeMsPerToken);
        }
        return new CostModel(Math.round(decodeMsPerToken * 1e9), Math.round(prefillMsPerToken * 1e9), 0, 0, 0);
    }
}
