package io.orbitkv.pd.harness;

import io.orbitkv.pd.logtools.trace.HandoffAnatomy;
import io.orbitkv.pd.tracing.Hop;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;

/** Percentiles of measured samples, and the hops of many requests' handoffs: what the demo and the benchmarks report. */
public final class Samples {

    private Samples() { }

    /** The {@code p}-th percentile (nearest rank) of ascending {@code sorted}; NaN when there is none. */
    public static double pct(double[] sorted, double p) {
        if (sorted == null || sorted.length == 0) {
            return Double.NaN;
        }
        int i = (int) Math.ceil(p / 100.0 * sorted.length) - 1;
        return sorted[Math.max(0, Math.min(sorted.length - 1, i))];
    }

    /** {@code values} ascending, as {@link #pct} takes them. */
    public static double[] ascending(List<Double> values) {
        return values.stream().mapToDouble(Double::doubleValue).sorted().toArray();
    }

    /** The TTFTs (ms) of the answered requests among {@code results}, ascending. */
    public static double[] ttftMs(List<LoadClient.Result> results) {
        return results.stream().filter(LoadClient.Result::ok).mapToDouble(r -> r.ttftNanos() / 1e6).sorted().toArray();
    }

    /** Every inter-token latency (ms) of the answered, streamed requests among {@code results}, pooled, ascending. */
    public static double[] itlMs(List<LoadClient.Result> results) {
        return results.stream().filter(LoadClient.Result::ok).flatMapToLong(r -> java.util.Arrays.stream(r.tokenGapsNanos()))
                .mapToDouble(g -> g / 1e6).sorted().toArray();
    }

    /** The time per output token (ms) of each answered, streamed request with more than one token, ascending. */
    public static double[] tpotMs(List<LoadClient.Result> results) {
        return results.stream().filter(LoadClient.Result::ok).mapToLong(LoadClient.Result::tpotNanos).filter(t -> t >= 0)
                .mapToDouble(t -> t / 1e6).sorted().toArray();
    }

    /** The handoffs at the proxy (ms) of the answered requests among {@code results} that had one, ascending. */
    public static double[] handoffMs(List<LoadClient.Result> results) {
        return results.stream().filter(r -> r.ok() && !Double.isNaN(r.handoffMs())).mapToDouble(LoadClient.Result::handoffMs).sorted().toArray();
    }

    /**
     * The hops of {@code measured} requests' handoffs, each request on its own path ({@link HandoffAnatomy}): per hop its
     * samples in ms, ascending, in hop order.
     */
    public record Hops(Map<Hop, double[]> ms, int measured) {

        /** How many of the measured requests crossed {@code hop} when not all did ({@code " (n of m)"}), else nothing. */
        public String share(Hop hop) {
            double[] v = ms.get(hop);
            // each request's own path: a hop some requests took instead of another
            return v != null && v.length < measured ? " (" + v.length + " of " + measured + ")" : "";
        }
    }

    /** The hops of these handoffs; every anatomy given counts as measured. */
    public static Hops hops(Iterable<HandoffAnatomy> handoffs) {
        Map<Hop, List<Double>> hops = new EnumMap<>(Hop.class);
        int measured = 0;
        for (HandoffAnatomy a : handoffs) {
            measured++;
            for (HandoffAnatomy.Span span : a.spans()) {
                hops.computeIfAbsent(span.hop(), h -> new ArrayList<>()).add(span.micros() / 1e3);
            }
        }
        Map<Hop, double[]> sorted = new EnumMap<>(Hop.class);
        hops.forEach((h, v) -> sorted.put(h, v.stream().mapToDouble(Double::doubleValue).sorted().toArray()));
        return new Hops(sorted, measured);
    }
}
