package io.orbitkv.pd.metrics;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.time.Duration;
import org.junit.jupiter.api.Test;

class ComponentMetricsTest {

    @Test
    void histogramsAreExposedAsPrometheusBucketsWithTheCommonTags() {
        try (ComponentMetrics m = ComponentMetrics.create("worker", "prefill-0")) {
            m.latency(MetricNames.TRANSFER_DURATION, "one transfer", "transport", "tcp", "side", "push").record(Duration.ofMillis(3));
            m.bytes(MetricNames.TRANSFER_SIZE, "bytes of one transfer", "transport", "tcp").record(1 << 20);
            m.registry().counter(MetricNames.OUTCOMES, "kind", "COMPLETED").increment();
            String text = m.scrape();
            assertThat(text)
                    .contains("orbitkv_transfer_duration_seconds_bucket{component=\"worker\",instance=\"prefill-0\",side=\"push\",transport=\"tcp\",le=\"0.005\"} 1")
                    .contains("orbitkv_transfer_duration_seconds_bucket{component=\"worker\",instance=\"prefill-0\",side=\"push\",transport=\"tcp\",le=\"0.0025\"} 0")
                    .contains("orbitkv_transfer_duration_seconds_count{component=\"worker\",instance=\"prefill-0\",side=\"push\",transport=\"tcp\"} 1")
                    .contains("orbitkv_transfer_size_bytes_bucket{component=\"worker\",instance=\"prefill-0\",transport=\"tcp\",le=\"2097152.0\"} 1")
                    .contains("orbitkv_outcomes_total{component=\"worker\",instance=\"prefill-0\",kind=\"COMPLETED\"} 1")
                    .contains("jvm_memory_used_bytes");
        }
    }

    @Test
    void bucketLayoutsAreIncreasing() {
        for (int i = 1; i < ComponentMetrics.LATENCY_BUCKETS.length; i++) {
            assertThat(ComponentMetrics.LATENCY_BUCKETS[i]).isGreaterThan(ComponentMetrics.LATENCY_BUCKETS[i - 1]);
        }
        for (int i = 1; i < ComponentMetrics.BYTE_BUCKETS.length; i++) {
            assertThat(ComponentMetrics.BYTE_BUCKETS[i]).isGreaterThan(ComponentMetrics.BYTE_BUCKETS[i - 1]);
        }
    }

    @Test
    void componentNameIsValidated() {
        assertThatThrownBy(() -> ComponentMetrics.create("Bad Name", "x")).hasMessageContaining("metrics component");
    }
}
