package io.orbitkv.pd.runtime;

import java.time.Duration;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.LockSupport;
import org.apache.kafka.streams.KafkaStreams;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Runs one Kafka Streams app (the decider, the dashboard) the same way: its state changes logged, a wait for
 * RUNNING that gives up as soon as Streams has failed, and a close bounded by the SIGTERM budget.
 */
public final class StreamsRunner {

    private static final Logger LOG = LoggerFactory.getLogger(StreamsRunner.class);
    private static final long POLL_NANOS = TimeUnit.MILLISECONDS.toNanos(20);

    private final String component;
    private final KafkaStreams streams;

    /** @param component how logs name the app, e.g. {@code decider} */
    public StreamsRunner(String component, KafkaStreams streams) {
        this.component = component;
        this.streams = streams;
    }

    public KafkaStreams streams() {
        return streams;
    }

    /** Starts Streams with its state changes logged ({@code <component> state from=… to=…}). */
    public void start() {
        streams.setStateListener((now, old) -> LOG.atInfo().addKeyValue("from", old).addKeyValue("to", now).log(component + " state"));
        streams.start();
    }

    /**
     * Waits until Streams is RUNNING.
     *
     * @return true when RUNNING; false on timeout, or at once when Streams is in ERROR or NOT_RUNNING (it will not recover)
     */
    public boolean awaitRunning(Duration timeout) throws InterruptedException {
        long deadline = System.nanoTime() + timeout.toNanos();
        while (System.nanoTime() < deadline) {
            KafkaStreams.State s = streams.state();
            if (s == KafkaStreams.State.RUNNING) {
                return true;
            }
            if (s == KafkaStreams.State.ERROR || s == KafkaStreams.State.NOT_RUNNING) {
                return false;
            }
            LockSupport.parkNanos(POLL_NANOS);
            if (Thread.interrupted()) {
                throw new InterruptedException(component + ": interrupted waiting for RUNNING");
            }
        }
        return false;
    }

    /** Closes Streams, waiting at most {@code timeout} for its threads (a last commit; an open transaction is aborted). */
    public void close(Duration timeout) {
        streams.close(timeout);
    }
}
