package io.orbitkv.pd.proxy;

/**
 * How many tokens a prompt is, as the engines behind this proxy count them. The proxy admits a P/D request with its
 * prompt's token count (the decider sizes the request's lease and the dashboard its KV from it), so the count must be
 * the engines' own: the simulated engines' tokenizer for the simulator, the model's tokenizer for a real engine.
 * Called on the request's event loop: keep it cheap and thread-safe.
 */
@FunctionalInterface
public interface Tokenizer {

    /** The number of tokens {@code prompt} is, never negative. */
    int countTokens(String prompt);
}
