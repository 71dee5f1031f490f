package io.orbitkv.pd.mooncake;

import static io.orbitkv.pd.kv.BlockRuns.run;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.kv.KvTestData;
import io.orbitkv.pd.mooncake.te.TransferEngine;
import io.orbitkv.pd.transport.Pushes;
import io.orbitkv.pd.transport.Transfer;
import io.orbitkv.pd.transport.TransferError;
import io.orbitkv.pd.transport.TransferException;
import java.time.Duration;
import java.util.List;
import org.junit.jupiter.api.Test;

/**
 * The mooncake transport's protocol with real admission sockets and an in-process engine (no Mooncake library
 * needed, so this runs everywhere): the shared scenarios, plus what only a scripted engine can provoke.
 */
class MooncakeAdmissionIT extends TransportScenarios {

    @Override
    TransferEngine newEngine() {
        return new InProcessEngine();
    }

    @Override
    void slowWrites(MooncakeTransport sender) {
        ((InProcessEngine) sender.engine()).writeDelayNanos = 200_000;
    }

    private InProcessEngine senderEngine() {
        return (InProcessEngine) sender.engine();
    }

    @Test
    void aFailedWriteFailsThePushRetriablyAfterTheOthersFinishedAndFreesEveryBatch() {
        InProcessEngine e = senderEngine();
        long badTarget = gate.pool().baseAddress(3) + 5L * g.pageBytes();
        e.failTarget = a -> a == badTarget;
        List<BlockRun> to = everyOther(40);
        Transfer t = start(Pushes.signed("req-x", 1, "lease-x", 1, "decode-0", 5, to), List.of(run(0, 40)));
        TransferException f = failure(t);
        assertThat(f.kind()).isEqualTo(TransferError.CONNECTION_LOST);
        assertThat(f.retriable()).isTrue();
        assertThat(f.getMessage()).startsWith("Mooncake reports FAILED for a write of 32768 bytes to 0x" + Long.toHexString(badTarget));
        assertThat(e.openBatches()).as("every batch was polled to its end and freed").isZero();
        await().atMost(Duration.ofSeconds(5)).until(() -> gate.openSessions() == 0);
        assertThat(gate.bytesWritten()).as("an aborted push is not counted as written").isZero();
        e.failTarget = a -> false;
        push(Pushes.signed("req-x", 2, "lease-x", 2, "decode-0", 5, to), List.of(run(0, 40)));
        assertThat(KvTestData.verify(src, dst, plan(List.of(run(0, 40)), to), SENTINEL)).isNull();
    }

    @Test
    void refusedPushesSubmitNothingAndTheSegmentIsOpenedOncePerIncarnation() {
        InProcessEngine e = senderEngine();
        List<BlockRun> to = List.of(run(10, 2));
        failure(start(Pushes.forged(Pushes.signed("req-a", 1, "lease-a", 1, "decode-0", 5, to)), List.of(run(0, 2))));
        assertThat(e.submits.get()).isZero();
        push(Pushes.signed("req-b", 1, "lease-b", 1, "decode-0", 5, to), List.of(run(0, 2)));
        push(Pushes.signed("req-c", 1, "lease-c", 1, "decode-0", 5, List.of(run(20, 2))), List.of(run(0, 2)));
        assertThat(e.segmentOpensFresh).containsExactly(false);
        sender.forgetPeer("decode-0");
        push(Pushes.signed("req-d", 1, "lease-d", 1, "decode-0", 5, List.of(run(30, 2))), List.of(run(0, 2)));
        assertThat(e.segmentOpensFresh).as("after forgetPeer the descriptor is fetched again").containsExactly(false, true);
    }

    @Test
    void notificationsReachThePeerEngine() {
        InProcessEngine e = senderEngine();
        int seg = e.openSegment(receiver.engine().segmentName(), false);
        e.notify(seg, "worker-prefill-0", "req-1/a1 done");
        assertThat(receiver.engine().notifications()).containsExactly(new TransferEngine.Notification("worker-prefill-0", "req-1/a1 done"));
        assertThat(receiver.engine().notifications()).isEmpty();
    }
}
