package io.orbitkv.pd.schemas;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.events.BlockRun;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.junit.jupiter.api.Test;

/** A key rotation: a worker given the new key and the previous one accepts orders signed with either, and no other. */
class OrderTokensRotationTest {

    private static final byte[] OLD = "the-old-order-key-0123".getBytes(StandardCharsets.UTF_8);
    private static final byte[] NEW = "the-new-order-key-4567".getBytes(StandardCharsets.UTF_8);
    private static final List<BlockRun> RUNS = List.of(new BlockRun(3, 4));

    private static byte[] signed(byte[] key) {
        return new OrderTokens(key).sign("r/a1", 2, "decode-0", 7, RUNS);
    }

    @Test
    void duringTheWindowBothKeysAreAcceptedAfterItOnlyTheNewOne() {
        OrderTokens rotating = new OrderTokens(NEW, OLD);
        assertThat(rotating.verify("r/a1", 2, "decode-0", 7, RUNS, signed(OLD))).as("a decider still on the old key").isTrue();
        assertThat(rotating.verify("r/a1", 2, "decode-0", 7, RUNS, signed(NEW))).as("a decider already on the new key").isTrue();
        assertThat(rotating.verify("r/a1", 2, "decode-0", 7, RUNS, signed("some-other-key-890123".getBytes(StandardCharsets.UTF_8)))).isFalse();
        assertThat(rotating.verify("r/a1", 3, "decode-0", 7, RUNS, signed(OLD))).as("the old key still binds the order").isFalse();
        assertThat(rotating.sign("r/a1", 2, "decode-0", 7, RUNS)).as("signs with the new key").isEqualTo(signed(NEW));
        OrderTokens after = new OrderTokens(NEW);
        assertThat(after.verify("r/a1", 2, "decode-0", 7, RUNS, signed(OLD))).as("the window closed").isFalse();
    }
}
