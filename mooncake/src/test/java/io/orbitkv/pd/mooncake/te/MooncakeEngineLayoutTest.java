package io.orbitkv.pd.mooncake.te;

import static java.lang.foreign.MemoryLayout.PathElement.groupElement;
import static org.assertj.core.api.Assertions.assertThat;

import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.StructLayout;
import org.junit.jupiter.api.Test;

/**
 * The C structs exactly as {@code transfer_engine_c.h} lays them out on LP64 (x86-64 and aarch64 Linux). The numbers
 * are what {@code offsetof}/{@code sizeof} print for the header compiled with gcc 12; a layout that drifted from them
 * would have the engine read sources as lengths.
 */
class MooncakeEngineLayoutTest {

    private static long off(StructLayout l, String field) {
        return l.byteOffset(groupElement(field));
    }

    @Test
    void transferRequestIsFortyBytesWithPaddingAfterTheInts() {
        StructLayout l = MooncakeEngine.TRANSFER_REQUEST;
        assertThat(l.byteSize()).isEqualTo(40);
        assertThat(l.byteAlignment()).isEqualTo(8);
        assertThat(off(l, "opcode")).isZero();
        assertThat(off(l, "source")).isEqualTo(8);
        assertThat(off(l, "target_id")).isEqualTo(16);
        assertThat(off(l, "target_offset")).isEqualTo(24);
        assertThat(off(l, "length")).isEqualTo(32);
    }

    @Test
    void statusNotifyAndBufferEntryLayouts() {
        assertThat(MooncakeEngine.TRANSFER_STATUS.byteSize()).isEqualTo(16);
        assertThat(off(MooncakeEngine.TRANSFER_STATUS, "status")).isZero();
        assertThat(off(MooncakeEngine.TRANSFER_STATUS, "transferred_bytes")).isEqualTo(8);
        assertThat(MooncakeEngine.NOTIFY_MSG.byteSize()).isEqualTo(16);
        assertThat(off(MooncakeEngine.NOTIFY_MSG, "name")).isZero();
        assertThat(off(MooncakeEngine.NOTIFY_MSG, "msg")).isEqualTo(8);
        assertThat(MooncakeEngine.BUFFER_ENTRY.byteSize()).isEqualTo(16);
        assertThat(off(MooncakeEngine.BUFFER_ENTRY, "addr")).isZero();
        assertThat(off(MooncakeEngine.BUFFER_ENTRY, "length")).isEqualTo(8);
        assertThat(MooncakeEngine.OPCODE_WRITE).isEqualTo(1);
        assertThat(MooncakeEngine.INVALID_BATCH).isEqualTo(-1L); // UINT64_MAX
    }

    @Test
    void requestArrayWritesTheFieldsWhereTheEngineReadsThem() {
        try (Arena a = Arena.ofConfined()) {
            RequestArray r = new RequestArray(a, 3);
            assertThat(r.segment().byteSize()).isEqualTo(120);
            r.write(1, 0x7f00_0000_1000L, 5, 0x7e00_0000_2000L, 32768);
            MemorySegment raw = r.segment().asSlice(40, 40);
            assertThat(raw.get(java.lang.foreign.ValueLayout.JAVA_INT, 0)).isEqualTo(1);
            assertThat(raw.get(java.lang.foreign.ValueLayout.JAVA_LONG, 8)).isEqualTo(0x7f00_0000_1000L);
            assertThat(raw.get(java.lang.foreign.ValueLayout.JAVA_INT, 16)).isEqualTo(5);
            assertThat(raw.get(java.lang.foreign.ValueLayout.JAVA_LONG, 24)).isEqualTo(0x7e00_0000_2000L);
            assertThat(raw.get(java.lang.foreign.ValueLayout.JAVA_LONG, 32)).isEqualTo(32768);
            assertThat(RequestArray.targetOffsetAt(r.segment(), 1)).isEqualTo(0x7e00_0000_2000L);
            assertThat(RequestArray.lengthAt(r.segment(), 1)).isEqualTo(32768);
            assertThat(RequestArray.sourceAt(r.segment(), 1)).isEqualTo(0x7f00_0000_1000L);
            assertThat(RequestArray.targetAt(r.segment(), 1)).isEqualTo(5);
            assertThat(RequestArray.opcodeAt(r.segment(), 0)).isZero();

            MemorySegment st = a.allocate(MooncakeEngine.TRANSFER_STATUS);
            RequestArray.putStatus(st, TaskStatus.FAILED, 4096);
            assertThat(st.get(java.lang.foreign.ValueLayout.JAVA_INT, 0)).isEqualTo(6);
            assertThat(RequestArray.statusOf(st)).isEqualTo(TaskStatus.FAILED);
            assertThat(RequestArray.transferredOf(st)).isEqualTo(4096);
        }
    }
}
