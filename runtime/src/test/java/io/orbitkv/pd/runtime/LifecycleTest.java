package io.orbitkv.pd.runtime;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;

class LifecycleTest {

    @Test
    void goesThroughItsStatesOnce() throws Exception {
        Lifecycle l = new Lifecycle("worker decode-0");
        assertThat(l.state()).isEqualTo(Lifecycle.State.NEW);
        l.starting();
        assertThat(l.running()).isTrue();
        assertThat(l.isRunning()).isTrue();
        assertThatThrownBy(l::starting).isInstanceOf(IllegalStateException.class).hasMessage("worker decode-0: cannot start, it is running");
        assertThat(l.stopping()).isTrue();
        assertThat(l.isStopping()).isTrue();
        assertThat(l.stopping()).as("a second close").isFalse();
        assertThat(l.awaitStopped(Duration.ZERO)).isFalse();
        l.stopped();
        assertThat(l.awaitStopped(Duration.ZERO)).isTrue();
        assertThat(l.state().label()).isEqualTo("stopped");
        assertThatThrownBy(l::starting).hasMessage("worker decode-0: cannot start, it is stopped");
    }

    @Test
    void aStopDuringTheStartWins() {
        Lifecycle l = new Lifecycle("proxy");
        l.starting();
        assertThat(l.stopping()).isTrue();
        assertThat(l.running()).as("the start finishing after the stop began").isFalse();
        assertThat(l.state()).isEqualTo(Lifecycle.State.STOPPING);
    }

    @Test
    void aFailedStartKeepsItsCauseAndCanStillBeClosed() {
        Lifecycle l = new Lifecycle("decider");
        l.starting();
        IllegalStateException cause = new IllegalStateException("no broker");
        l.failed(cause);
        assertThat(l.state()).isEqualTo(Lifecycle.State.FAILED);
        assertThat(l.failure()).isSameAs(cause);
        assertThat(l.stopping()).isTrue();
    }

    @Test
    void onlyOneOfManyConcurrentClosersCloses() throws Exception {
        Lifecycle l = new Lifecycle("engine");
        l.starting();
        l.running();
        AtomicInteger closers = new AtomicInteger();
        CountDownLatch go = new CountDownLatch(1);
        Thread[] ts = new Thread[8];
        for (int i = 0; i < ts.length; i++) {
            ts[i] = Thread.ofPlatform().start(() -> {
                try {
                    go.await();
                } catch (InterruptedException e) {
                    return;
                }
                if (l.stopping()) {
                    closers.incrementAndGet();
                }
            });
        }
        go.countDown();
        for (Thread t : ts) {
            t.join();
        }
        assertThat(closers).hasValue(1);
    }
}
