package io.orbitkv.pd.gpu;

import static org.assertj.core.api.Assertions.assertThat;

import org.junit.jupiter.api.Test;

/** How the copy engine cuts a table into chunks: never below the configured chunk, a bounded number of entries for a large order. */
class CudaCopyEngineChunkTest {

    private static final long KIB = 1024;
    private static final long MIB = 1024 * KIB;

    @Test
    void smallOrdersKeepTheConfiguredChunk() {
        assertThat(CudaCopyEngine.chunkFor(16 * MIB, 64 * KIB, 1056)).isEqualTo(64 * KIB);
        assertThat(CudaCopyEngine.chunkFor(64 * KIB * 1056, 64 * KIB, 1056)).isEqualTo(64 * KIB);
        assertThat(CudaCopyEngine.chunkFor(0, 64 * KIB, 1056)).isEqualTo(64 * KIB);
    }

    @Test
    void aLargeOrderIsCutIntoAboutTheAskedNumberOfEqualChunks() {
        long gib = 1024 * MIB;
        long chunk = CudaCopyEngine.chunkFor(gib, 64 * KIB, 1056);
        assertThat(chunk % (64 * KIB)).isZero();
        assertThat(gib / chunk).isBetween(1000L, 1056L);
        assertThat(CudaCopyEngine.chunkFor(4 * gib, 64 * KIB, 1056) / chunk).isBetween(3L, 5L);
        assertThat(CudaCopyEngine.chunkFor(Long.MAX_VALUE / 2, 64 * KIB, 1)).isEqualTo(RunTable.MAX_CHUNK);
    }
}
