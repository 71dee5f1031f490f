package io.orbitkv.pd.dashboard.stats;

import java.util.ArrayList;
import java.util.List;

/**
 * The two tumbling window sizes the dashboard keeps, and the window arithmetic. Windows are aligned to the epoch
 * ({@code start = ts - ts mod size}), half-open {@code [start, start + size)}, and assigned by the record's timestamp
 * (the time the fact was produced, or the decider's stream time for a decision), never by the wall clock, so a
 * replay of the log fills the same windows. A window accepts records until stream time reaches its end plus the
 * grace; later records are counted as late and dropped.
 */
public enum StatsWindow {
    ONE_SECOND("1s", 1_000L, "dashboard-1s"),
    ONE_MINUTE("1m", 60_000L, "dashboard-1m");

    private final String label;
    private final long sizeMs;
    private final String storeName;

    StatsWindow(String label, long sizeMs, String storeName) {
        this.label = label;
        this.sizeMs = sizeMs;
        this.storeName = storeName;
    }

    public String label() {
        return label;
    }

    public long sizeMs() {
        return sizeMs;
    }

    /** Name of the window store (fixed: changelog topics are named after it). */
    public String storeName() {
        return storeName;
    }

    /** Start of the window that holds {@code timestampMs}. */
    public long start(long timestampMs) {
        return start(timestampMs, sizeMs);
    }

    /** Whether the window starting at {@code windowStart} no longer accepts records at {@code streamTimeMs}. */
    public boolean closed(long windowStart, long graceMs, long streamTimeMs) {
        return closed(windowStart, sizeMs, graceMs, streamTimeMs);
    }

    /** The window starts in {@code [fromMs, toMs)}, after aligning {@code fromMs} down to a window start. */
    public List<Long> starts(long fromMs, long toMs) {
        List<Long> out = new ArrayList<>();
        for (long s = start(fromMs); s < toMs; s += sizeMs) {
            out.add(s);
        }
        return out;
    }

    /** {@code 1s} or {@code 1m}. */
    public static StatsWindow parse(String label) {
        for (StatsWindow w : values()) {
            if (w.label.equals(label)) {
                return w;
            }
        }
        throw new IllegalArgumentException("window: must be 1s or 1m, got '" + label + "'");
    }

    /** Start of the {@code sizeMs} window holding {@code timestampMs} (floor, also for negative timestamps). */
    public static long start(long timestampMs, long sizeMs) {
        if (sizeMs <= 0) {
            throw new IllegalArgumentException("window size must be positive, got " + sizeMs);
        }
        return Math.floorDiv(timestampMs, sizeMs) * sizeMs;
    }

    /** A window {@code [start, start + size)} closes when stream time reaches {@code start + size + grace}. */
    public static boolean closed(long windowStart, long sizeMs, long graceMs, long streamTimeMs) {
        return windowStart + sizeMs + graceMs <= streamTimeMs;
    }
}
