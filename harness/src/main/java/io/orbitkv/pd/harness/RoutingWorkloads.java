package io.orbitkv.pd.harness;

import io.orbitkv.pd.engine.client.cache.BlockHashes;
import io.orbitkv.pd.engine.sim.SimModel;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.List;
import java.util.Random;
import java.util.Set;

/**
 * The workloads of {@code bench routing} (docs/routing.md, "Measured"): prompts that share prefixes, as users' traffic does.
 * Fixed seeds; completions (the prompt text is what the engines cache, no chat template around it); streamed.
 */
public final class RoutingWorkloads {

    private RoutingWorkloads() { }

    /**
     * inference-perf's {@code shared_prefix} / vLLM's {@code prefix_repetition}: {@code groups} long system prompts of
     * {@code prefixWords} words, each request one of them (uniformly) followed by a user's question of {@code questionWords}
     * words of its own, answered in {@code outputTokens} tokens.
     */
    public record SharedPrefix(int groups, int prefixWords, int questionWords, int outputTokens) {
        public SharedPrefix {
            if (groups < 1 || prefixWords < 1 || questionWords < 1 || outputTokens < 1) {
                throw new IllegalArgumentException("shared-prefix workload: every size must be >= 1, got " + this);
            }
        }

        /** Group {@code g}'s system prompt. */
        public String system(int g) {
            return LoadClient.prompt(new Random(1_000 + g), "System prompt " + g + ":", prefixWords);
        }

        /** {@code count} requests, the {@code i}-th of group {@code rnd(seed)}, numbered from {@code first}. */
        public List<LoadClient.Request> requests(long seed, int first, int count) {
            Random rnd = new Random(seed);
            String[] systems = new String[groups];
            List<LoadClient.Request> out = new ArrayList<>(count);
            for (int i = 0; i < count; i++) {
                int g = rnd.nextInt(groups);
                if (systems[g] == null) {
                    systems[g] = system(g);
                }
                String prompt = LoadClient.prompt(rnd, systems[g] + " Question " + (first + i) + ":", questionWords);
                out.add(new LoadClient.Request(first + i, false, prompt, outputTokens, true, false, LoadClient.Cancel.NONE, 0));
            }
            return out;
        }

        @Override
        public String toString() {
            return groups + " system prompts of " + prefixWords + " words, a " + questionWords + "-word question each, " + outputTokens + " output tokens";
        }
    }

    /**
     * A multi-turn chat: each conversation opens with a context of {@code contextWords} words, then {@code turns} turns; a
     * turn's prompt is the whole conversation so far (every earlier question and answer) and the user's new message of
     * {@code userWords} words; answers of {@code outputTokens} tokens, the engines' own (the simulated model's answer is a
     * function of the prompt, so the conversation is known before it is sent).
     */
    public record MultiTurn(int contextWords, int turns, int userWords, int outputTokens) {
        public MultiTurn {
            if (contextWords < 1 || turns < 1 || userWords < 1 || outputTokens < 1) {
                throw new IllegalArgumentException("multi-turn workload: every size must be >= 1, got " + this);
            }
        }

        /** Conversation {@code c}'s turns in order, numbered {@code c * turns + t}. */
        public List<LoadClient.Request> conversation(long seed, int c, SimModel model) {
            Random rnd = new Random(seed * 1_000_003L + c);
            String history = LoadClient.prompt(rnd, "Conversation " + c + " context:", contextWords);
            List<LoadClient.Request> out = new ArrayList<>(turns);
            for (int t = 0; t < turns; t++) {
                String prompt = LoadClient.prompt(rnd, history + " User:", userWords);
                out.add(new LoadClient.Request(c * turns + t, false, prompt, outputTokens, true, false, LoadClient.Cancel.NONE, 0));
                history = prompt + " Assistant:" + model.answer(prompt, outputTokens);
            }
            return out;
        }

        @Override
        public String toString() {
            return turns + " turns a conversation, a " + contextWords + "-word context, " + userWords + "-word messages, " + outputTokens
                    + "-token answers; each turn's prompt the whole conversation so far";
        }
    }

    /**
     * The workload's ideal: per prompt, in sending order, the tokens an engine holding every earlier prompt's full blocks
     * (an unbounded cache, every request on it) would not compute — its longest prefix of full blocks seen before, less
     * the last token (always computed) — summed; with the prompts' tokens.
     *
     * @param seed      the engines' block hash seed
     * @param blockSize tokens per block
     */
    public static Ideal ideal(List<LoadClient.Request> inOrder, String seed, int blockSize) {
        Set<ByteBuffer> seen = new HashSet<>();
        long hits = 0;
        long tokens = 0;
        for (LoadClient.Request r : inOrder) {
            int[] ids = SimModel.tokenize(r.prompt());
            List<byte[]> hashes = BlockHashes.chain(seed, blockSize, ids, null);
            int n = 0;
            while (n < hashes.size() && seen.contains(ByteBuffer.wrap(hashes.get(n)))) {
                n++;
            }
            hits += Math.min((long) n * blockSize, ids.length - 1);
            tokens += ids.length;
            hashes.forEach(h -> seen.add(ByteBuffer.wrap(h)));
        }
        return new Ideal(hits, tokens);
    }

    /** Cached tokens an ideal router and cache would find, of the prompts' tokens. */
    public record Ideal(long hitTokens, long promptTokens) {
        public double rate() {
            return promptTokens == 0 ? 0 : (double) hitTokens / promptTokens;
        }
    }
}
