package io.orbitkv.pd.logtools;

/**
 * Progress of a long read, reported by the tools and drawn by the CLI (a bar on a terminal's stderr). Calls come
 * from the reading thread; implementations must be cheap, as {@link #advance} is called per record.
 */
public interface Progress {

    /** Nothing is shown. */
    Progress NONE = new Progress() {
        @Override
        public void start(String what, long total) { }

        @Override
        public void advance(long n) { }

        @Override
        public void done() { }
    };

    /** A phase begins; {@code total} is the expected count of units, or -1 when unknown. */
    void start(String what, long total);

    /** {@code n} more units are done. */
    void advance(long n);

    /** The phase ended. */
    void done();
}
