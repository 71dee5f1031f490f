package io.orbitkv.pd.gpu;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.events.MemoryRegion;
import io.orbitkv.pd.kv.KvGeometry;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** What a worker refuses to map: registrations whose regions do not describe the layout's device regions with IPC handles. */
class ImportedKvPoolTest {

    private final KvGeometry g = new KvGeometry(2, KvSplit.SEPARATE, 16, 8, 128, Dtype.BF16, 32 * 1024, 8);

    private List<MemoryRegion> regions() {
        List<MemoryRegion> out = new ArrayList<>();
        for (int r = 0; r < g.regionCount(); r++) {
            out.add(MemoryRegion.newBuilder().setLayer(g.layerOf(r)).setPart(g.partName(r)).setBaseAddress(0x7000_0000_0000L + r * g.regionBytes())
                    .setLengthBytes(g.regionBytes()).setLocation("cuda:1").setIpcHandle(ByteBuffer.wrap(new byte[64])).build());
        }
        return out;
    }

    @Test
    void aCompleteRegistrationIsAccepted() {
        assertThat(ImportedKvPool.validate("p0", g, regions())).isEqualTo("cuda:1");
    }

    @Test
    void everyFlawIsNamedWithItsRegion() {
        assertThatThrownBy(() -> ImportedKvPool.validate("p0", g, regions().subList(0, 3)))
                .hasMessage("engine p0 registration: regions: 4 expected (2 layers × 2 parts), got 3");
        List<MemoryRegion> r = regions();
        r.set(2, MemoryRegion.newBuilder(r.get(2)).setIpcHandle(null).build());
        assertThatThrownBy(() -> ImportedKvPool.validate("p0", g, r)).hasMessageStartingWith("engine p0 registration: regions[2].ipc_handle: missing");
        List<MemoryRegion> host = regions();
        host.set(1, MemoryRegion.newBuilder(host.get(1)).setLocation("host").build());
        assertThatThrownBy(() -> ImportedKvPool.validate("p0", g, host)).hasMessageContaining("regions[1].location: 'host' is not device memory");
        List<MemoryRegion> swapped = regions();
        swapped.set(0, regions().get(1));
        assertThatThrownBy(() -> ImportedKvPool.validate("p0", g, swapped)).hasMessageContaining("regions[0]: expected layer 0 K, got layer 0 V");
        List<MemoryRegion> small = regions();
        small.set(3, MemoryRegion.newBuilder(small.get(3)).setLengthBytes(100).build());
        assertThatThrownBy(() -> ImportedKvPool.validate("p0", g, small)).hasMessageContaining("regions[3].length_bytes: 100 is less than");
    }
}
