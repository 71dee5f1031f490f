package io.orbitkv.pd.engine.sim;

/**
 * How long the simulated model "computes": {@code prefillMsPerToken} per prompt token (a prefill is one forward
 * pass over the prompt) and {@code decodeMsPerToken} per generated token (one decode step each). Sequences run
 * concurrently, as in a continuously batched engine, up to the engine's batch limit.
 */
public record ComputeModel(double prefillMsPerToken, double decodeMsPerToken) {

    public ComputeModel {
        if (!(prefillMsPerToken >= 0) || !(decodeMsPerToken >= 0)) {
            throw new IllegalArgumentException("engine.compute.*: must be >= 0 ms, got prefill " + prefillMsPerToken + " / decode "
                    + decodeMsPerToken);
        }
    }

    public long prefillNanos(int tokens) {
        return (long) (prefillMsPerToken * 1e6 * tokens);
    }

    public long decodeStepNanos() {
        return (long) (decodeMsPerToken * 1e6);
    }
}
