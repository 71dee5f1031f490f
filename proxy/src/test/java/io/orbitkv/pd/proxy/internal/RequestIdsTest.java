package io.orbitkv.pd.proxy.internal;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

class RequestIdsTest {

    @Test
    void anIdIsTakenOnceAndTheOldestAreForgottenPastCapacity() {
        RequestIds ids = new RequestIds(2);
        assertThat(ids.claim("a", 1)).isEqualTo(-1);
        assertThat(ids.claim("a", 2)).as("reused: when it was taken").isEqualTo(1);
        assertThat(ids.claim("b", 3)).isEqualTo(-1);
        assertThat(ids.claim("c", 4)).isEqualTo(-1);
        assertThat(ids.claim("a", 5)).as("forgotten past capacity").isEqualTo(-1);
    }
}
