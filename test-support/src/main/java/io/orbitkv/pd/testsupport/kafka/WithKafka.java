package io.orbitkv.pd.testsupport.kafka;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Starts one real KRaft cluster (child JVMs from the Maven Central jars) for the annotated test class, shared by
 * its tests, and injects it as a {@link io.orbitkv.pd.broker.KraftCluster} parameter. Data and logs live under
 * {@code target/kafka/<TestClass>/}; the cluster is torn down after the class.
 */
@Target(ElementType.TYPE)
@Retention(RetentionPolicy.RUNTIME)
@ExtendWith(KafkaClusterExtension.class)
public @interface WithKafka {
    /** Number of combined broker+controller nodes: 1 for most tests, 3 for fault tests. */
    int nodes() default 1;
}
