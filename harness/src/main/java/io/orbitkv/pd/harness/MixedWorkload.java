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

    /** Where the run is: {@code done} of {@code total} requests of the phase {@code label} answered. */
    public interface Progress {
        void update(String label, int done, int total);
    }

    /** One rate's results, both layouts (rate 0: zero load, one request at a time). */
    public record Level(double rate, List<LoadClient.Result> pd, List<LoadClient.Result> colocated) { }

    /** Everything a run measured; {@code warmed}: the discarded warm-up's P/D requests (admitted to the log too). */
    public record Run(int warmed, List<Level> levels) { }

    /**
     * Runs the mixed workload through {@code client}'s proxy: a discarded warm-up ({@code warm} requests each layout at 8 in
     * flight: cold JVMs measure the JIT, not the design), zero load ({@code zero} requests one at a time, the reference the
     * loaded ITL is compared with), then per rate {@code seconds} of Poisson arrivals on P/D, then the same arrival times on
     * the same engines colocated (same lengths, prompts of their own). Seeds are fixed: every run sends the same workload.
     */
    public static Run run(LoadClient client, Shape shape, int warm, int zero, List<Double> rates, double seconds, Progress progress)
            throws InterruptedException {
        java.util.concurrent.atomic.AtomicInteger w = new java.util.concurrent.atomic.AtomicInteger();
        client.run(requests(7, warm, shape, false), 8, () -> progress.update("warming up (not measured)", w.incrementAndGet(), 2 * warm));
        client.run(requests(7, warm, shape, true), 8, () -> progress.update("warming up (not measured)", w.incrementAndGet(), 2 * warm));
        List<Level> levels = new ArrayList<>();
        java.util.concurrent.atomic.AtomicInteger z = new java.util.concurrent.atomic.AtomicInteger();
        List<LoadClient.Result> zeroPd = client.run(requests(11, zero, shape, false), 1, () -> progress.update("zero load", z.incrementAndGet(), 2 * zero));
        List<LoadClient.Result> zeroCol = client.run(requests(11, zero, shape, true), 1, () -> progress.update("zero load", z.incrementAndGet(), 2 * zero));
        levels.add(new Level(0, zeroPd, zeroCol));
        for (int li = 0; li < rates.size(); li++) {
            double rate = rates.get(li);
            int n = Math.max(4, (int) Math.round(rate * seconds));
            long[] at = poisson(42 + li, rate, n);
            java.util.concurrent.atomic.AtomicInteger a = new java.util.concurrent.atomic.AtomicInteger();
            java.util.concurrent.atomic.AtomicInteger b = new java.util.concurrent.atomic.AtomicInteger();
            String r = rateLabel(rate);
            List<LoadClient.Result> pd = client.runOpen(requests(42 + li, n, shape, false), at, () -> progress.update("P/D       " + r, a.incrementAndGet(), n));
            List<LoadClient.Result> col = client.runOpen(requests(42 + li, n, shape, true), at,
                    () -> progress.update("colocated " + r, b.incrementAndGet(), n));
            levels.add(new Level(rate, pd, col));
        }
        return new Run(warm, levels);
    }

    private static String rateLabel(double rate) {
        return String.format(java.util.Locale.ROOT, "%5s/s", num(rate));
    }

    static String num(double v) {
        return v == Math.rint(v) ? Long.toString((long) v) : String.format(java.util.Locale.ROOT, "%.1f", v);
    }

    private static String ms(double v) {
        return Double.isNaN(v) ? "-" : String.format(java.util.Locale.ROOT, "%.1f ms", v);
    }

    /**
     * A run judged: each layout's point per rate, the zero-load references, and the two findings — the ITL p99 of each layout
     * at the first rate where colocated ITL p99 reached 3× its zero load (what P/D is for), and the rate from which P/D's
     * goodput stays above colocated's.
     */
    public record Summary(Slo slo, Point zeroPd, Point zeroColocated, List<Point> pd, List<Point> colocated) {

        public static Summary of(Run run, Slo slo) {
            Level z = run.levels().get(0);
            List<Point> pd = new ArrayList<>();
            List<Point> col = new ArrayList<>();
            for (Level l : run.levels().subList(1, run.levels().size())) {
                pd.add(Point.of("P/D 1+1", l.rate(), l.pd(), slo));
                col.add(Point.of("colocated", l.rate(), l.colocated(), slo));
            }
            return new Summary(slo, Point.of("P/D 1+1", 0, z.pd(), slo), Point.of("colocated", 0, z.colocated(), slo), pd, col);
        }

        /** The index of the first rate where colocated ITL p99 is at least 3× its zero-load ITL p99, or -1. */
        public int interferenceIndex() {
            for (int i = 0; i < colocated.size(); i++) {
                if (colocated.get(i).itlP99() >= 3 * zeroColocated.itlP99()) {
                    return i;
                }
            }
            return -1;
        }

        public double crossover() {
            return MixedWorkload.crossover(pd, colocated);
        }

        /** The findings in words (one line each). */
        public List<String> findings() {
            List<String> out = new ArrayList<>();
            int i = interferenceIndex();
            if (i < 0) {
                out.add("Colocated ITL p99 stays under 3x its zero load at these rates.");
            } else {
                Point c = colocated.get(i);
                Point p = pd.get(i);
                out.add(String.format(java.util.Locale.ROOT, "At %s requests/s colocated ITL p99 is %.1fx its zero load (%s vs %s); P/D's decode ITL p99 is"
                                + " %.2fx its own (%s vs %s): target <= 1.3x %s.", num(c.rate()), c.itlP99() / zeroColocated.itlP99(), ms(c.itlP99()),
                        ms(zeroColocated.itlP99()), p.itlP99() / zeroPd.itlP99(), ms(p.itlP99()), ms(zeroPd.itlP99()),
                        p.itlP99() <= 1.3 * zeroPd.itlP99() ? "met" : "MISSED"));
            }
            double from = crossover();
            out.add(Double.isNaN(from) ? "P/D goodput does not overtake colocated goodput at these rates."
                    : "P/D goodput overtakes colocated goodput (the same two engines) from " + num(from) + " requests/s on.");
            return out;
        }

        /** The table the demo prints. */
        public void print(java.io.PrintStream out) {
            out.println("Summary (client side: TTFT = time to the first streamed token; ITL = between streamed tokens, every gap of every request;"
                    + " TPOT = a request's mean ITL; goodput = requests/s meeting TTFT <= " + num(slo.ttftMs()) + " ms and TPOT <= "
                    + num(slo.tpotMs()) + " ms; handoff = prefill answered -> decode's first byte, at the proxy)");
            out.printf("%-6s %-10s %-5s %-10s %-10s %-9s %-9s %-9s %-13s %-9s %-12s %-7s%n", "rate", "layout", "reqs", "TTFT p50", "TTFT p99",
                    "ITL p50", "ITL p99", "TPOT p50", "SLOs met", "goodput", "handoff p50", "KV MiB");
            List<Point> all = new ArrayList<>(List.of(zeroPd, zeroColocated));
            for (int i = 0; i < pd.size(); i++) {
                all.add(pd.get(i));
                all.add(colocated.get(i));
            }
            for (Point x : all) {
                out.printf(java.util.Locale.ROOT, "%-6s %-10s %-5d %-10s %-10s %-9s %-9s %-9s %-13s %-9s %-12s %-7.1f%n", x.rate() == 0 ? "zero" : num(x.rate()),
                        x.layout(), x.requests(), ms(x.ttftP50()), ms(x.ttftP99()), ms(x.itlP50()), ms(x.itlP99()), ms(x.tpotP50()),
                        String.format(java.util.Locale.ROOT, "%.0f %%", 100 * x.attained()) + (x.failed() > 0 ? " (" + x.failed() + " failed)" : ""),
                        x.rate() == 0 ? "-" : String.format(java.util.Locale.ROOT, "%.2f/s", x.goodput()), ms(x.handoffP50()), x.kvBytes() / 1048576.0);
            }
            findings().forEach(out::println);
        }
    }
}
