package io.orbitkv.pd.broker.internal;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.broker.ChildClasspath;
import org.junit.jupiter.api.Test;

class ChildLoggingTest {

    @Test
    void childLoggingPinsLogbackWhenItIsTheOnlySlf4jBinding() {
        // The test class path has logback (root pom) and log4j-core (Kafka) but no log4j-slf4j2-impl.
        assertThat(ChildLogging.chooseProvider(ChildClasspath.current()))
                .contains(ChildLogging.LOGBACK_PROVIDER);
    }
}
