package io.orbitkv.pd.testsupport.kafka;

import java.lang.annotation.Documented;
import java.lang.annotation.ElementType;
import java.lang.annotation.Inherited;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;

import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Starts one real KRaft cluster (child JVMs from the Maven Central jars) for the annotated test class, shared by
 * all its tests (and its {@code @Nested} classes), and injects it as a {@link io.orbitkv.pd.broker.KraftCluster}
 * parameter into constructors, {@code @BeforeAll}/{@code @BeforeEach} methods and test methods. Data and logs
 * live under {@code target/kafka/<TestClass>/}; data is wiped when the cluster starts and deleted after the
 * class, the node logs ({@code logs/node-<id>.log}) are kept for post-mortems. Tests sharing a cluster must
 * isolate themselves by topic names and group/application ids.
 */
@Target(ElementType.TYPE)
@Retention(RetentionPolicy.RUNTIME)
@Documented
@Inherited
@ExtendWith(KafkaClusterExtension.class)
public @interface WithKafka {

    /** Number of combined broker+controller nodes: 1 for most tests, 3 for fault tests. */
    int nodes() default 1;

    /**
     * Extra broker settings as {@code key=value}, e.g. {@code "log.retention.ms=60000"}. Node identity,
     * listeners and storage are managed by the cluster and cannot be set here.
     */
    String[] brokerProperties() default {};
}
