package io.orbitkv.pd.mooncake.te;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.transport.TransferError;
import java.util.EnumMap;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Every request state and every result code of the engine maps to one of our events, as docs/mooncake.md tabulates. */
class StatusMappingTest {

    @Test
    void everyTaskStatusHasItsCodeItsPhaseAndItsError() {
        Map<TaskStatus, Object[]> expected = new EnumMap<>(TaskStatus.class);
        // status -> {C value, in flight, finished, error}
        expected.put(TaskStatus.WAITING, new Object[] {0, true, false, null});
        expected.put(TaskStatus.PENDING, new Object[] {1, true, false, null});
        expected.put(TaskStatus.INVALID, new Object[] {2, false, true, TransferError.INTERNAL});
        expected.put(TaskStatus.CANCELED, new Object[] {3, false, true, TransferError.ABORTED});
        expected.put(TaskStatus.COMPLETED, new Object[] {4, false, true, null});
        expected.put(TaskStatus.TIMEOUT, new Object[] {5, true, false, TransferError.TIMEOUT});
        expected.put(TaskStatus.FAILED, new Object[] {6, false, true, TransferError.CONNECTION_LOST});
        expected.put(TaskStatus.UNKNOWN, new Object[] {-1, false, false, TransferError.INTERNAL});
        assertThat(expected.keySet()).containsExactlyInAnyOrder(TaskStatus.values());
        expected.forEach((s, e) -> {
            assertThat(s.code()).as("%s code", s).isEqualTo(e[0]);
            assertThat(s.inFlight()).as("%s in flight", s).isEqualTo(e[1]);
            assertThat(s.finished()).as("%s finished", s).isEqualTo(e[2]);
            assertThat(s.error()).as("%s error", s).isEqualTo(e[3]);
            if (s != TaskStatus.UNKNOWN) {
                assertThat(TaskStatus.of(s.code())).isEqualTo(s);
            }
        });
        assertThat(TaskStatus.of(7)).isEqualTo(TaskStatus.UNKNOWN);
        assertThat(TaskStatus.of(-1)).isEqualTo(TaskStatus.UNKNOWN);
        assertThat(TaskStatus.FAILED.error().retriable()).as("a failed write may succeed as a new attempt").isTrue();
        assertThat(TaskStatus.CANCELED.error().retriable()).isFalse();
    }

    @Test
    void bothFamiliesOfResultCodesMapToTheSameConditions() {
        assertThat(ResultCode.of(0)).isEqualTo(ResultCode.OK);
        assertThat(ResultCode.of(-102)).isEqualTo(ResultCode.SOCKET);
        assertThat(ResultCode.of(102)).isEqualTo(ResultCode.SOCKET);
        assertThat(ResultCode.of(-303)).isEqualTo(ResultCode.NOT_IMPLEMENTED);
        assertThat(ResultCode.of(999)).isEqualTo(ResultCode.NOT_IMPLEMENTED);
        assertThat(ResultCode.of(8)).isEqualTo(ResultCode.NOT_SUPPORTED_TRANSPORT);
        assertThat(ResultCode.of(-8)).isEqualTo(ResultCode.UNKNOWN);
        assertThat(ResultCode.of(Integer.MIN_VALUE)).isEqualTo(ResultCode.UNKNOWN);
        assertThat(ResultCode.of(12345)).isEqualTo(ResultCode.UNKNOWN);
        assertThat(ResultCode.describe(-102)).isEqualTo("ERR_SOCKET (-102)");
        assertThat(ResultCode.describe(4)).isEqualTo("Status::kBatchBusy (4)");
        assertThat(ResultCode.describe(2)).isEqualTo("Status::kTooManyRequests (2)");
        assertThat(ResultCode.describe(77)).isEqualTo("unknown result 77");
        for (ResultCode c : ResultCode.values()) {
            assertThat(c.kind() == null).as("%s", c).isEqualTo(c == ResultCode.OK);
        }
        assertThat(ResultCode.TOO_MANY_REQUESTS.kind()).isEqualTo(TransferError.BUSY);
        assertThat(ResultCode.ADDRESS_NOT_REGISTERED.kind()).isEqualTo(TransferError.OUT_OF_RANGE);
        assertThat(ResultCode.REJECT_HANDSHAKE.kind()).isEqualTo(TransferError.PEER_UNREACHABLE);
        assertThat(ResultCode.METADATA.kind().retriable()).isTrue();
        assertThat(ResultCode.NOT_SUPPORTED_TRANSPORT.kind()).isEqualTo(TransferError.NO_TRANSPORT);
    }

    @Test
    void exceptionsNameTheFunctionAndTheCode() {
        MooncakeException e = new MooncakeException("openSegment", -1, "segment 'x'");
        assertThat(e).hasMessage("openSegment failed: ERR_INVALID_ARGUMENT (-1) (segment 'x')");
        assertThat(e.kind()).isEqualTo(TransferError.INTERNAL);
        assertThat(new MooncakeException("createTransferEngine", "no engine").kind()).isEqualTo(TransferError.INTERNAL);
        assertThat(new MooncakeException("submitTransfer", 102, "").kind()).isEqualTo(TransferError.PEER_UNREACHABLE);
    }
}
