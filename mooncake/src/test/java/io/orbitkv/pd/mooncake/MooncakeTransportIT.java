package io.orbitkv.pd.mooncake;

import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.orbitkv.pd.mooncake.te.MooncakeEngine;
import io.orbitkv.pd.mooncake.te.NativeTransferEngine;
import io.orbitkv.pd.mooncake.te.RequestArray;
import io.orbitkv.pd.mooncake.te.TaskStatus;
import io.orbitkv.pd.mooncake.te.TransferEngine;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIfEnvironmentVariable;

/**
 * The shared scenarios on the real Mooncake Transfer Engine over its TCP transport (two engines in this JVM, P2P
 * handshake metadata), plus the binding's own calls: what one-sided writes can and cannot reach, and notifications.
 */
@EnabledIfEnvironmentVariable(named = MooncakeEngine.LIBRARY_ENV, matches = ".+",
        disabledReason = "skipped: ORBITKV_MOONCAKE_LIB is not set — see docs/mooncake.md")
class MooncakeTransportIT extends TransportScenarios {

    private static MooncakeEngine lib() {
        return MooncakeEngine.load((String) null).orElseThrow();
    }

    @Override
    TransferEngine newEngine() {
        return NativeTransferEngine.start(lib(), new NativeTransferEngine.Options("tcp", MooncakeEngine.P2P_HANDSHAKE, "127.0.0.1", null, "*"));
    }

    @Override
    void slowWrites(MooncakeTransport sender) {
        // 80 MiB over Mooncake's TCP transport takes long enough to act in the middle.
    }

    /**
     * The limit of admission, shown rather than claimed: an engine that skips it can write into the receiver's
     * registered pool (one-sided writes never pass the receiver's CPU), but nowhere outside the registered memory.
     */
    @Test
    void aRawEngineBypassesAdmissionInsideTheRegisteredPoolButCannotWriteOutsideIt() {
        try (TransferEngine raw = newEngine(); Arena a = Arena.ofConfined()) {
            MemorySegment source = a.allocate(4096, 4096);
            source.fill((byte) 0x42);
            raw.registerMemory(List.of(new TransferEngine.Range(source.address(), 4096)), false);
            MemorySegment outside = a.allocate(4096, 4096);
            outside.fill((byte) 0x11);
            int seg = raw.openSegment(receiver.engine().segmentName(), false);
            RequestArray r = new RequestArray(a, 2);
            long inside = gate.pool().baseAddress(0);
            r.write(0, source.address(), seg, inside, 4096);
            r.write(1, source.address(), seg, outside.address(), 4096);
            long batch = raw.allocateBatch(2);
            assertThat(raw.submit(batch, r.segment(), 2)).isZero();
            MemorySegment st = a.allocate(MooncakeEngine.TRANSFER_STATUS);
            TaskStatus[] end = new TaskStatus[2];
            await().atMost(Duration.ofSeconds(10)).pollInSameThread().until(() -> {
                for (int i = 0; i < 2; i++) {
                    assertThat(raw.status(batch, i, st)).isZero();
                    end[i] = RequestArray.statusOf(st);
                }
                return end[0].finished() && end[1].finished();
            });
            assertThat(end[0]).as("inside the registered pool: lands, no admission asked").isEqualTo(TaskStatus.COMPLETED);
            assertThat(dst.region(0).get(ValueLayout.JAVA_BYTE, 0)).isEqualTo((byte) 0x42);
            assertThat(end[1]).as("outside any registered buffer: refused by the receiver's engine").isEqualTo(TaskStatus.FAILED);
            assertThat(outside.get(ValueLayout.JAVA_BYTE, 0)).isEqualTo((byte) 0x11);
            assertThat(raw.freeBatch(batch)).isZero();
            assertThat(gate.acceptedPushes()).isZero();
        }
    }

    @Test
    void notificationsTravelBetweenEngines() {
        TransferEngine tx = sender.engine();
        int seg = tx.openSegment(receiver.engine().segmentName(), false);
        tx.notify(seg, "worker-prefill-0", "req-1/a1 done");
        List<TransferEngine.Notification> got = new java.util.ArrayList<>();
        await().atMost(Duration.ofSeconds(10)).until(() -> {
            got.addAll(receiver.engine().notifications());
            return !got.isEmpty();
        });
        assertThat(got).containsExactly(new TransferEngine.Notification("worker-prefill-0", "req-1/a1 done"));
    }
}
