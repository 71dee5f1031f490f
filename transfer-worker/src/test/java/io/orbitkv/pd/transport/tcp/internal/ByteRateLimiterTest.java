package io.orbitkv.pd.transport.tcp.internal;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

class ByteRateLimiterTest {

    @Test
    void noLimitNeverWaits() {
        ByteRateLimiter unlimited = new ByteRateLimiter(0);
        long t0 = System.nanoTime();
        for (int i = 0; i < 1000; i++) {
            unlimited.acquire(1L << 30);
        }
        assertThat(System.nanoTime() - t0).isLessThan(1_000_000_000L);
    }

    @Test
    void sendsTogetherStayUnderTheRate() {
        // 10 MB/s: the first 1 MB goes at once, the next two wait for their slots (0.1 s each) at least
        ByteRateLimiter limiter = new ByteRateLimiter(10_000_000);
        long t0 = System.nanoTime();
        limiter.acquire(1_000_000);
        limiter.acquire(1_000_000);
        limiter.acquire(1_000_000);
        assertThat(System.nanoTime() - t0).isGreaterThanOrEqualTo(200_000_000L);
    }
}
