package io.orbitkv.pd.schemas;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.events.KvLayout;
import io.orbitkv.pd.events.KvSplit;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The rules a registration must pass before it replaces the one a reader of the engines table has. */
class EngineRegistrationsTest {

    static EngineRegistration reg(String id, long epoch, int numBlocks) {
        return EngineRegistration.newBuilder().setEngineId(id).setRole(EngineRole.DECODE).setInstanceEpoch(epoch).setModel("m")
                .setHttpUrl("http://x").setEndpoints(List.of()).setRegions(List.of()).setRegisteredAtMs(0).setDeregistered(false)
                .setLayout(KvLayout.newBuilder().setNumLayers(4).setKvSplit(KvSplit.SEPARATE).setBlockSizeTokens(16).setNumKvHeads(8)
                        .setHeadDim(128).setDtype(Dtype.BF16).setTpRank(0).setTpSize(1).setPageBytes(32768).setNumBlocks(numBlocks).build())
                .build();
    }

    @Test
    void aValidNewerOrSameEpochRegistrationReplacesTheCurrentOne() {
        assertThat(EngineRegistrations.check("decode-0", reg("decode-0", 5, 64), null)).isNull();
        assertThat(EngineRegistrations.check("decode-0", reg("decode-0", 5, 64), reg("decode-0", 5, 64))).isNull();
        assertThat(EngineRegistrations.check("decode-0", reg("decode-0", 6, 64), reg("decode-0", 5, 64))).isNull();
    }

    @Test
    void anOlderEpochNeverReplacesANewerOne() {
        EngineRegistrations.Refusal r = EngineRegistrations.check("decode-0", reg("decode-0", -1, 64), reg("decode-0", 5, 64));
        assertThat(r.errorType()).isEqualTo("STALE_EPOCH");
        assertThat(r.reason()).contains("instance epoch -1 is older than the one taken (5)");
    }

    @Test
    void aRecordKeyedByAnotherEngineOrWithAnInvalidLayoutIsRefused() {
        assertThat(EngineRegistrations.check("decode-1", reg("decode-0", 5, 64), null).errorType()).isEqualTo("KEY_MISMATCH");
        assertThat(EngineRegistrations.check(null, reg("decode-0", 5, 64), null).errorType()).isEqualTo("KEY_MISMATCH");
        EngineRegistrations.Refusal r = EngineRegistrations.check("decode-0", reg("decode-0", 5, -3), null);
        assertThat(r.errorType()).isEqualTo("OUT_OF_BOUNDS");
        assertThat(r.reason()).contains("num_blocks");
    }
}
