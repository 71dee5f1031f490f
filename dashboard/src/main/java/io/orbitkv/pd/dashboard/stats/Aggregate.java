package io.orbitkv.pd.dashboard.stats;

import java.util.Collections;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;

/**
 * The statistics of one key (outcomes, transfers, one engine...) in one window of one task: named counters and named
 * {@link LogHistogram}s. Everything in it merges by addition, so the windows of every task and every instance are
 * combined at query time, and any range of windows merges into one aggregate whose percentiles are computed once.
 * Not thread-safe.
 */
public final class Aggregate {

    /** Name of the counter that takes the labels past a cap (see {@link #addCapped}). */
    public static final String OTHER = "other";

    private final TreeMap<String, Long> counters = new TreeMap<>();
    private final TreeMap<String, LogHistogram> histograms = new TreeMap<>();

    public Aggregate add(String counter, long delta) {
        if (delta != 0) {
            counters.merge(counter, delta, Long::sum);
        }
        return this;
    }

    /**
     * Adds to {@code prefix + label}, unless {@code maxLabels} labels under {@code prefix} exist already and this is not
     * one of them: then to {@code prefix + "other"}. Keeps free-text labels (failure reasons) from growing the store.
     */
    public Aggregate addCapped(String prefix, String label, long delta, int maxLabels) {
        String name = prefix + label;
        if (!counters.containsKey(name) && withPrefix(prefix).size() >= maxLabels) {
            name = prefix + OTHER;
        }
        return add(name, delta);
    }

    public Aggregate record(String histogram, long value) {
        histograms.computeIfAbsent(histogram, k -> new LogHistogram()).record(value);
        return this;
    }

    public long counter(String name) {
        return counters.getOrDefault(name, 0L);
    }

    /** Counters whose names start with {@code prefix}, keyed by the rest of the name. */
    public SortedMap<String, Long> withPrefix(String prefix) {
        TreeMap<String, Long> out = new TreeMap<>();
        for (Map.Entry<String, Long> e : counters.tailMap(prefix, true).entrySet()) {
            if (!e.getKey().startsWith(prefix)) {
                break;
            }
            out.put(e.getKey().substring(prefix.length()), e.getValue());
        }
        return out;
    }

    /** The named histogram; an empty one (not stored) when nothing was recorded. */
    public LogHistogram histogram(String name) {
        LogHistogram h = histograms.get(name);
        return h == null ? new LogHistogram() : h;
    }

    public Map<String, Long> counters() {
        return Collections.unmodifiableMap(counters);
    }

    public Map<String, LogHistogram> histograms() {
        return Collections.unmodifiableMap(histograms);
    }

    /** Adds everything of {@code other} into this aggregate. */
    public Aggregate merge(Aggregate other) {
        other.counters.forEach((k, v) -> counters.merge(k, v, Long::sum));
        other.histograms.forEach((k, h) -> histograms.computeIfAbsent(k, x -> new LogHistogram()).merge(h));
        return this;
    }

    void putHistogram(String name, LogHistogram h) {
        histograms.put(name, h);
    }

    public boolean isEmpty() {
        return counters.isEmpty() && histograms.isEmpty();
    }

    @Override
    public boolean equals(Object o) {
        return o instanceof Aggregate a && a.counters.equals(counters) && a.histograms.equals(histograms);
    }

    @Override
    public int hashCode() {
        return counters.hashCode() * 31 + histograms.hashCode();
    }

    @Override
    public String toString() {
        return "Aggregate{" + counters + ", " + histograms + "}";
    }
}
