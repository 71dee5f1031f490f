package io.orbitkv.pd.testsupport.registry;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Starts one real Apicurio Registry (in-memory storage, loopback only) for the annotated test class, shared by its
 * tests, and injects it as an {@link ApicurioRegistry} parameter (in {@code @BeforeAll}, {@code @BeforeEach} and
 * test methods). The distribution comes from the system property {@value ApicurioRegistry#HOME_PROPERTY}; the log
 * goes to {@code target/apicurio-logs/<TestClass>-*.log}; the registry is stopped after the class, even when a
 * test fails.
 */
@Target(ElementType.TYPE)
@Retention(RetentionPolicy.RUNTIME)
@ExtendWith(ApicurioRegistryExtension.class)
public @interface WithApicurio {
    /** Seconds to wait for the registry's ccompat API to answer before failing the class. */
    int startTimeoutSeconds() default 60;
}
