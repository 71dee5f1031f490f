package io.orbitkv.pd.worker.internal;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.engine.client.api.ApiProtocol.PrefillProgress;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvTestData;
import org.junit.jupiter.api.Test;

/** What of a prefill's KV may go: pieces of a layer in prompt order, chunk by chunk; reports only ever add. */
class PrefillReadinessTest {

    private final KvGeometry g = KvTestData.small(4, 64);
    private final long page = g.pageBytes();
    /** 6 prompt blocks (90 tokens: the last block partial) in pages 10, 11, 12, 40, 41, 42. */
    private final int[] blocks = {10, 11, 12, 40, 41, 42};

    private static PrefillProgress p(int done, int chunkEnd, int layers) {
        return new PrefillProgress("r", null, 90, done, chunkEnd, layers);
    }

    @Test
    void aPieceIsReadyUpToItsFirstPageNotComputedInItsLayer() throws Exception {
        PrefillReadiness r = new PrefillReadiness(g, blocks, p(0, 48, 1)); // chunk [0, 48): blocks 0..2, layer 0 done
        int layer0 = g.region(0, 1);
        int layer1 = g.region(1, 0);
        assertThat(r.readyBytes(layer0, 10 * page, 3 * page)).isEqualTo(3 * page);
        assertThat(r.readyBytes(layer1, 10 * page, 3 * page)).isZero();
        assertThat(r.readyBytes(layer0, 40 * page, 3 * page)).as("the next chunk's blocks").isZero();
        assertThat(r.readyBytes(layer0, 11 * page + 100, 3 * page)).as("from inside a page to the chunk's last page").isEqualTo(2 * page - 100);
        long v = r.version();
        r.advance(p(48, 90, 2)); // chunk 1 done in every layer; chunk 2 (blocks 3..5) in layers 0, 1
        assertThat(r.version()).isGreaterThan(v);
        assertThat(r.readyBytes(g.region(3, 1), 10 * page, 3 * page)).isEqualTo(3 * page);
        assertThat(r.readyBytes(layer1, 40 * page, 3 * page)).as("the partial last block counts to the prompt's end").isEqualTo(3 * page);
        assertThat(r.readyBytes(g.region(2, 0), 40 * page, 3 * page)).isZero();
        assertThat(r.awaitChange(r.version(), 10)).isFalse();
        assertThat(r.complete()).isFalse();
        r.complete(7);
        assertThat(r.readyBytes(g.region(3, 1), 40 * page, 3 * page)).isEqualTo(3 * page);
        assertThat(r.firstToken()).isEqualTo(7);
        assertThat(r.awaitComplete(1)).isTrue();
    }

    @Test
    void anOlderOrNarrowerReportChangesNothing() {
        PrefillReadiness r = new PrefillReadiness(g, blocks, p(48, 90, 2));
        long v = r.version();
        r.advance(p(0, 48, 4)); // late: chunk 1 in every layer is already known
        r.advance(p(48, 90, 1));
        assertThat(r.version()).isEqualTo(v);
        r.advance(p(48, 90, 3));
        assertThat(r.version()).isEqualTo(v + 1);
        assertThat(p(90, 90, 0).advances(p(48, 90, 3))).isTrue();
        assertThat(p(0, 90, 2).advances(p(48, 90, 1))).isFalse();
        assertThat(p(48, 90, 3).advances(p(48, 90, 3))).as("the same again").isFalse();
    }

    @Test
    void aFailureWakesTheWaitersAndStaysTheAnswer() throws Exception {
        PrefillReadiness r = new PrefillReadiness(g, blocks, p(0, 90, 0));
        long v = r.version();
        r.fail("the engine's prefill failed mid-way: out of memory");
        assertThat(r.awaitChange(v, 1000)).isTrue();
        assertThat(r.failure()).contains("out of memory");
        assertThat(r.awaitComplete(1)).isFalse();
        r.complete(1);
        assertThat(r.complete()).as("too late: it failed").isFalse();
        assertThat(r.failure()).isNotNull();
    }
}
