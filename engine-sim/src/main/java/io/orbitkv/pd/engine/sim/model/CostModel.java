package io.orbitkv.pd.engine.sim.model;

import java.util.List;

/**
 * How long one forward step takes (docs/engine-model.md, "The cost model"), in integer picoseconds so that every
 * language computes the same number:
 *
 * <pre>
 * step = fixed
 *      + prefillToken  × (prompt tokens computed in the step)
 *      + prefillPair   × (attention pairs of those tokens: each attends to every earlier token of its prompt)
 *      + decodeSeq     × (sequences decoding in the step)
 *      + kvToken       × (KV tokens the decoding sequences read: each sequence's whole context)
 * </pre>
 *
 * {@code fixed} is what a step costs whatever it holds (reading the weights, the launch); a decode step is bound by
 * memory (weights, then each sequence's KV), a prefill by compute (the tokens, then their attention, which grows with
 * the context). Calibrated per model preset against published vLLM / SGLang figures on H100 / H200.
 *
 * @param fixedPs        a step's fixed cost
 * @param prefillTokenPs per prompt token computed
 * @param prefillPairPs  per (token, earlier token) attention pair of the prompt tokens computed
 * @param decodeSeqPs    per decoding sequence
 * @param kvTokenPs      per KV token a decoding sequence reads
 */
public record CostModel(long fixedPs, long prefillTokenPs, long prefillPairPs, long decodeSeqPs, long kvTokenPs) {

    public CostModel {
        if (fixedPs < 0 || prefillTokenPs < 0 || prefillPairPs < 0 || decodeSeqPs < 0 || kvTokenPs < 0) {
            throw new IllegalArgumentException("engine cost model: every part must be >= 0, got " + this);
        }
    }

    /** Nothing costs anything: every step is instantaneous (tests that do not care about time). */
    public static final CostModel FREE = new CostModel(0, 0, 0, 0, 0);

    /**
     * The attention pairs of computing prompt tokens {@code start .. start+n-1}: token i attends to i+1 tokens (itself and
     * every earlier one), so {@code n·start + n(n+1)/2}.
     */
    public static long pairs(int start, int n) {
        return (long) n * start + (long) n * (n + 1) / 2;
    }

    /** The step's duration in picoseconds. */
    public long stepPs(List<StepScheduler.Chunk> prefills, int decodes, long decodeContextTokens) {
        long tokens = 0;
        long pairs = 0;
        for (StepScheduler.Chunk c : prefills) {
            tokens += c.tokens();
            pairs += pairs(c.start(), c.tokens());
        }
        return fixedPs + prefillTokenPs * tokens + prefillPairPs * pairs + decodeSeqPs * decodes + kvTokenPs * decodeContextTokens;
    }
}
