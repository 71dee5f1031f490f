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

    /**
     * The token ids of {@code prompt}, as the engines compute them, for hashing its blocks as they do (prefix-aware
     * routing, docs/routing.md); null when this tokenizer only counts (then the proxy cannot route by cache).
     */
    default int[] tokenIds(String prompt) {
        return null;
    }
}
