package io.orbitkv.pd.harness;

import static io.orbitkv.pd.harness.Samples.pct;

import java.util.ArrayList;
import java.util.List;
import java.util.Random;

/**
 * The mixed workload of the demo and {@code bench e2e --workload mixed} (docs/engine-model.md, "What P/D is for"): Poisson
 * arrivals at a given rate, prompt and output lengths drawn uniformly from a {@link Shape}, a fixed seed; every answer
 * streamed (inter-token latency is what it measures). And what is judged of it: TTFT, ITL, TPOT and goodput, the rate of
 * requests that meet both a TTFT and a TPOT objective ({@link Slo}), as vLLM's benchmark and DistServe (OSDI '24) count it.
 */
public final class MixedWorkload {

    private MixedWorkload() { }

    /**
     * Request lengths: prompt words uniform in [{@code minWords}, {@code maxWords}] (the simulated tokenizer gives about 1.2
     * tokens a word), output tokens uniform in [{@code minOutput}, {@code maxOutput}].
     */
    public record Shape(int minWords, int maxWords, int minOutput, int maxOutput) {
        /** Long prompts (about 1,200 to 3,600 tokens) and short to medium answers: the regime P/D is for, where a colocated engine's decodes stall behind prefills. */
        public static final Shape DEFAULT = new Shape(1000, 3000, 16, 128);

        public Shape {
            if (minWords < 1 || maxWords < minWords || minOutput < 1 || maxOutput < minOutput) {
                throw new IllegalArgumentException("workload shape: 1 <= min <= max for prompt words and output tokens, got " + this);
            }
        }

        @Override
        public String toString() {
            return "prompt " + minWords + "-" + maxWords + " words, output " + minOutput + "-" + maxOutput + " tokens (uniform)";
        }
    }

    /**
     * {@code count} streamed requests of {@code shape}; every third a chat completion. The colocated ones have the same
     * lengths as the P/D ones of the same seed but prompts of their own: a run of one layout must not find the other's
     * prompts in the engines' prefix caches.
     */
    public static List<LoadClient.Request> requests(long seed, int count, Shape shape, boolean colocated) {
        Random rnd = new Random(seed);
        List<LoadClient.Request> out = new ArrayList<>(count);
        for (int i = 0; i < count; i++) {
            int words = shape.minWords + rnd.nextInt(shape.maxWords - shape.minWords + 1);
            int output = shape.minOutput + rnd.nextInt(shape.maxOutput - shape.minOutput + 1);
            String prompt = LoadClient.prompt(rnd, "Request " + i + (colocated ? " (colocated):" : ":"), words);
            out.add(new LoadClient.Request(i, i % 3 == 2, prompt, output, true, colocated, LoadClient.Cancel.NONE, 0));
        }
        return out;
    }

    /** Arrival times (ns after the start) of {@code count} requests, a Poisson process of {@code ratePerSecond}. */
    public static long[] poisson(long seed, double ratePerSecond, int count) {
        if (!(ratePerSecond > 0)) {
            throw new IllegalArgumentException("rate must be > 0 requests/s, got " + ratePerSecond);
        }
        Random rnd = new Random(seed);
        long[] at = new long[count];
        double t = 0;
        for (int i = 0; i < count; i++) {
            t += -Math.log(1 - rnd.nextDouble()) / ratePerSecond;
            at[i] = (long) (t * 1e9);
        }
        return at;
    }

    /** Service objectives: time to first token, and time per output token (a request's mean inter-token latency). */
    public record Slo(double ttftMs, double tpotMs) {
        boolean met(LoadClient.Result r) {
            return r.ok() && r.ttftNanos() / 1e6 <= ttftMs && (r.tpotNanos() < 0 || r.tpotNanos() / 1e6 <= tpotMs);
        }
    }

    /**
     * What one layout did at one rate.
     *
     * @param attained the share of requests that met both objectives (failed ones count as missed)
     * @param goodput  requests per second that met both: {@code attained × rate}
     */
    public record Point(String layout, double rate, int requests, int failed, double ttftP50, double ttftP99, double itlP50, double itlP99,
                        double tpotP50, double tpotP99, double attained, double goodput, double handoffP50, double handoffP99, long kvBytes) {

        public static Point of(String layout, double rate, List<LoadClient.Result> rs, Slo slo) {
            double[] ttft = Samples.ttftMs(rs);
            double[] itl = Samples.itlMs(rs);
            double[] tpot = Samples.tpotMs(rs);
            double[] hand = Samples.handoffMs(rs);
            int failed = (int) rs.stream().filter(r -> !r.ok()).count();
            double attained = rs.isEmpty() ? 0 : (double) rs.stream().filter(slo::met).count() / rs.size();
            return new Point(layout, rate, rs.size(), failed, pct(ttft, 50), pct(ttft, 99), pct(itl, 50), pct(itl, 99), pct(tpot, 50),
                    pct(tpot, 99), attained, attained * rate, pct(hand, 50), pct(hand, 99), rs.stream().mapToLong(LoadClient.Result::kvBytes).sum());
        }
    }

    /** The lowest of {@code rates} from which on P/D's goodput stays above colocated's, or NaN when it never does. */
    public static double crossover(List<Point> pd, List<Point> colocated) {
        double from = Double.NaN;
        for (int i = 0; i < Math.min(pd.size(), colocated.size()); i++) {
            if (pd.get(i).goodput() > colocated.get(i).goodput()) {
                if (Double.isNaN(from)) {
                    from = pd.get(i).rate();
                }
            } else {
                from = Double.NaN;
            }
        }
        return from;
    }
}
