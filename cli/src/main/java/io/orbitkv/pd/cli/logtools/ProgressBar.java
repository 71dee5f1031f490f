package io.orbitkv.pd.cli.logtools;

import io.orbitkv.pd.logtools.Progress;
import java.io.PrintStream;
import java.util.Locale;

/**
 * A progress bar on stderr for long reads: {@code reading … [#######.......]  48%  480,000/1,000,000  310,000/s  ETA 2s}.
 * Redraws at most ten times a second on one line; {@link #done()} leaves the final state on its own line. Shown
 * only on a terminal or when asked (--progress), and never on stdout, so piped and JSON output stay clean.
 */
public final class ProgressBar implements Progress {

    private static final long REDRAW_NANOS = 100_000_000L;
    private final PrintStream err;
    private String what;
    private long total;
    private long done;
    private long start;
    private long lastDraw;
    private int lastWidth;

    public ProgressBar(PrintStream err) {
        this.err = err;
    }

    /** A bar when stdout is a terminal or {@code forced}; otherwise nothing ({@code json}: not unless forced). */
    public static Progress forTerminal(boolean forced, boolean json) {
        boolean terminal = System.console() != null && System.console().isTerminal();
        return forced || (terminal && !json) ? new ProgressBar(System.err) : Progress.NONE;
    }

    @Override
    public void start(String what, long total) {
        this.what = what;
        this.total = total;
        this.done = 0;
        this.start = System.nanoTime();
        this.lastDraw = 0;
        draw(true);
    }

    @Override
    public void advance(long n) {
        done += n;
        long now = System.nanoTime();
        if (now - lastDraw >= REDRAW_NANOS) {
            lastDraw = now;
            draw(false);
        }
    }

    @Override
    public void done() {
        draw(true);
        err.println();
        err.flush();
    }

    private void draw(boolean force) {
        double secs = Math.max(1e-9, (System.nanoTime() - start) / 1e9);
        double rate = done / secs;
        StringBuilder b = new StringBuilder("\r").append(what).append(' ');
        if (total > 0) {
            int width = 24;
            double f = Math.min(1.0, done / (double) total);
            int filled = (int) Math.round(f * width);
            b.append('[').append("#".repeat(filled)).append(".".repeat(width - filled)).append("] ");
            b.append(String.format(Locale.ROOT, "%3.0f%%  %,d/%,d", f * 100, done, total));
            if (done > 0 && done < total) {
                b.append(String.format(Locale.ROOT, "  %,.0f/s  ETA %.0fs", rate, (total - done) / Math.max(rate, 1e-9)));
            } else {
                b.append(String.format(Locale.ROOT, "  %.1fs", secs));
            }
        } else {
            b.append(String.format(Locale.ROOT, "%,d  %.1fs", done, secs));
        }
        int len = b.length();
        if (len < lastWidth) {
            b.append(" ".repeat(lastWidth - len));
        }
        lastWidth = len;
        err.print(b);
        if (force) {
            err.flush();
        }
    }
}
