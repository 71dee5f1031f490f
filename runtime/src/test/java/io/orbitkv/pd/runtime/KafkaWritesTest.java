package io.orbitkv.pd.runtime;

import static org.assertj.core.api.Assertions.assertThat;

import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.orbitkv.pd.metrics.MetricNames;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import org.apache.kafka.common.errors.TimeoutException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.junit.jupiter.api.Test;

class KafkaWritesTest {

    @Test
    void aWriteTheAclsRefuseIsCountedAsDeniedAndSaidSo() {
        SimpleMeterRegistry r = new SimpleMeterRegistry();
        String why = KafkaWrites.failed(r, "t.decisions", new ExecutionException(new TopicAuthorizationException(Set.of("t.decisions"))));
        assertThat(why).startsWith("denied by the broker's ACLs: ").contains("t.decisions").endsWith("(see ./orbitkv-pd acls)");
        assertThat(r.get(MetricNames.KAFKA_WRITE_FAILURES).tags("topic", "t.decisions", "cause", "denied").counter().count()).isEqualTo(1.0);
    }

    @Test
    void anyOtherFailureIsCountedAsFailed() {
        SimpleMeterRegistry r = new SimpleMeterRegistry();
        assertThat(KafkaWrites.failed(r, "t.facts", new TimeoutException("expired"))).contains("expired");
        assertThat(r.get(MetricNames.KAFKA_WRITE_FAILURES).tags("topic", "t.facts", "cause", "failed").counter().count()).isEqualTo(1.0);
        assertThat(KafkaWrites.failed(null, "t.facts", new TimeoutException("x"))).as("no registry: said, not counted").contains("x");
    }
}
