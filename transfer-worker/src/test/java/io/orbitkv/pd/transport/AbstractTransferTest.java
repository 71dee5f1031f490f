package io.orbitkv.pd.transport;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

class AbstractTransferTest {

    /** A transfer whose push the test plays by hand. */
    private static final class Manual extends AbstractTransfer {
        void stopOwn(String why) {
            stop(why);
        }

        String stopWhy() {
            return stopReason();
        }

        String cancelWhy() {
            return cancelReason();
        }

        TransferException stopCause() {
            return stopped();
        }

        void done(long bytes) {
            succeed(new TransferResult(bytes, 1, "manual", 1));
        }

        void crash(RuntimeException e) {
            failUnexpected("manual push", e);
        }
    }

    @Test
    void theFirstOutcomeWins() {
        Manual t = new Manual();
        t.fail(new TransferException(TransferError.CONNECTION_LOST, "peer gone"));
        t.done(10);
        assertThat(t.result()).isCompletedExceptionally();
        assertThat(t.result().exceptionNow()).isInstanceOf(TransferException.class).hasMessage("peer gone");

        Manual ok = new Manual();
        ok.done(10);
        ok.fail(new TransferException(TransferError.CONNECTION_LOST, "too late"));
        assertThat(ok.result().join().bytes()).isEqualTo(10);
    }

    @Test
    void theFirstReasonToStopStays() {
        Manual t = new Manual();
        assertThat(t.stopWhy()).isNull();
        assertThat(t.stopCause()).isNull();

        t.stopOwn("another stripe failed: TIMEOUT: slow");
        t.cancel("order aborted");
        t.cancel("closing");
        assertThat(t.stopWhy()).isEqualTo("another stripe failed: TIMEOUT: slow");
        assertThat(t.cancelWhy()).isEqualTo("order aborted");
        assertThat(t.stopCause().kind()).isEqualTo(TransferError.ABORTED);
        assertThat(t.stopCause()).hasMessage("aborted: another stripe failed: TIMEOUT: slow");

        Manual c = new Manual();
        c.cancel(null);
        assertThat(c.stopWhy()).isEqualTo("cancelled");
        assertThat(c.cancelWhy()).isEqualTo("cancelled");
    }

    @Test
    void anUnexpectedFailureIsInternalButATransferFailureKeepsItsKind() {
        Manual bug = new Manual();
        bug.crash(new IllegalStateException("boom"));
        TransferException e = (TransferException) bug.result().exceptionNow();
        assertThat(e.kind()).isEqualTo(TransferError.INTERNAL);
        assertThat(e).hasMessage("manual push failed: java.lang.IllegalStateException: boom");

        Manual refused = new Manual();
        refused.crash(new TransferException(TransferError.STALE_EPOCH, "refused by decode-0"));
        TransferException kept = (TransferException) refused.result().exceptionNow();
        assertThat(kept.kind()).isEqualTo(TransferError.STALE_EPOCH);
        assertThat(kept).hasMessage("refused by decode-0");
    }
}
