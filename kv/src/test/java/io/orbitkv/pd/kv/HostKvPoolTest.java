package io.orbitkv.pd.kv;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.events.MemoryRegion;
import java.lang.foreign.ValueLayout;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

class HostKvPoolTest {

    @TempDir
    Path tmp;

    @Test
    void anonymousPoolIsZeroedAlignedAndRegistersItsRegions() {
        KvGeometry g = KvTestData.small(2, 8);
        try (HostKvPool pool = HostKvPool.allocate(g)) {
            assertThat(pool.region(3).byteSize()).isEqualTo(g.regionBytes());
            assertThat(pool.page(3, 7).get(ValueLayout.JAVA_LONG, 32 * 1024 - 8)).isZero();
            List<MemoryRegion> regions = pool.memoryRegions();
            assertThat(regions).hasSize(4);
            assertThat(regions.get(1).getPart()).isEqualTo("V");
            assertThat(regions.get(2).getLayer()).isEqualTo(1);
            assertThat(regions.get(2).getBaseAddress()).isEqualTo(pool.region(2).address()).isNotZero();
            assertThat(regions.get(2).getBaseAddress() % HostKvPool.ALIGNMENT).isZero();
            assertThat(regions.get(2).getLengthBytes()).isEqualTo(g.regionBytes());
            assertThat(regions.get(2).getLocation()).isEqualTo("host");
            assertThatThrownBy(() -> pool.page(0, 8)).isInstanceOf(IndexOutOfBoundsException.class);
        }
    }

    @Test
    void twoMappingsOfOneFileSeeTheSamePages() throws Exception {
        KvGeometry g = KvTestData.pages(4096 + 100, 5, 3); // region size not a multiple of 4 KiB: strides are padded
        Path f = tmp.resolve("pool.kv");
        try (HostKvPool a = HostKvPool.mapFile(g, f); HostKvPool b = HostKvPool.mapFile(g, f)) {
            assertThat(Files.size(f)).isEqualTo(HostKvPool.fileBytes(g)).isEqualTo(3 * 24576L);
            KvTestData.fillPage(a.page(2, 4), 1, 2, 4);
            assertThat(b.page(2, 4).mismatch(a.page(2, 4))).isEqualTo(-1);
            assertThat(b.page(2, 4).get(ValueLayout.JAVA_LONG_UNALIGNED, 0)).isNotZero();
        }
    }

    @Test
    void refusesAFileOfAnotherLayout() throws Exception {
        Path f = tmp.resolve("other.kv");
        Files.write(f, new byte[12345]);
        assertThatThrownBy(() -> HostKvPool.mapFile(KvTestData.small(1, 2), f))
                .hasMessageContaining("worker.pool.path: " + f + " is 12345 bytes but this layout needs " + (2 * 65536));
    }

    @Test
    void closeIsIdempotentAndFreesTheMemory() {
        HostKvPool pool = HostKvPool.allocate(KvTestData.small(1, 1));
        pool.close();
        pool.close();
        assertThatThrownBy(() -> pool.page(0, 0).get(ValueLayout.JAVA_BYTE, 0)).isInstanceOf(IllegalStateException.class);
    }
}
