package io.orbitkv.pd.runtime;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.MeterRegistry;
import io.orbitkv.pd.metrics.MetricNames;
import org.apache.kafka.common.errors.AuthorizationException;

/**
 * A write the broker did not take, counted and said in words: never a silent drop. A write the ACLs refuse is
 * {@code denied} ({@link MetricNames#KAFKA_WRITE_FAILURES}, tag {@code cause=denied}), anything else {@code failed}.
 */
public final class KafkaWrites {

    private KafkaWrites() { }

    /**
     * Counts the failed write to {@code topic} in {@code registry} (when not null) and returns the reason to log.
     *
     * @return {@code denied by the broker's ACLs: <broker's words> (see ./orbitkv-pd acls)}, or the failure itself
     */
    public static String failed(MeterRegistry registry, String topic, Throwable e) {
        boolean denied = false;
        for (Throwable c = e; c != null && !denied; c = c.getCause() == c ? null : c.getCause()) {
            denied = c instanceof AuthorizationException;
        }
        if (registry != null) {
            Counter.builder(MetricNames.KAFKA_WRITE_FAILURES).description("Records a component could not write, by topic and cause")
                    .tag("topic", topic).tag("cause", denied ? "denied" : "failed").register(registry).increment();
        }
        return denied ? "denied by the broker's ACLs: " + e.getMessage() + " (see ./orbitkv-pd acls)" : String.valueOf(e);
    }
}
