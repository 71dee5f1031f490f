package io.orbitkv.pd.gpu;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

/** The warm-up of a cuda push's host path admits and completes every synthetic push it makes, on a gate of its own. */
class HostPathWarmUpTest {

    @Test
    void everyPushOfTheWarmUpIsAdmittedAndCompleted() {
        assertThat(HostPathWarmUp.run(200)).isEqualTo(200);
    }
}
