package io.orbitkv.pd.gpu;

import static org.assertj.core.api.Assertions.assertThat;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import org.junit.jupiter.api.Test;

/** The committed PTX is in the jar, loadable as the driver wants it, for Hopper, and in step with the .cu source and the Java enum. */
class KernelImageTest {

    @Test
    void thePtxIsOnTheClassPathAsANulTerminatedImage() {
        byte[] image = KernelImage.ptxImage();
        assertThat(image.length).isGreaterThan(10_000);
        assertThat(image[image.length - 1]).isZero();
        for (int i = 0; i < image.length - 1; i++) {
            if (image[i] == 0) {
                throw new AssertionError("NUL inside the PTX at byte " + i);
            }
        }
        String ptx = KernelImage.ptxText();
        assertThat(ptx).contains(".version ").contains(".address_size 64");
        assertThat(KernelImage.target(ptx)).isEqualTo("sm_90");
    }

    @Test
    void everyKernelTheJavaSideNamesIsAnEntryPoint() {
        var entries = KernelImage.entryPoints(KernelImage.ptxText());
        assertThat(entries).containsAll(Arrays.stream(CopyKernel.values()).map(CopyKernel::entryName).toList());
        assertThat(entries).contains(KernelImage.FILL_RANDOM, KernelImage.COMPARE_RUNS);
        assertThat(entries).hasSize(CopyKernel.values().length + 2);
    }

    @Test
    void theSourceDefinesEveryVariantAndTheRunLayoutTheJavaSideWrites() throws IOException {
        String cu = Files.readString(Path.of("src/main/cuda/kv_copy.cu"));
        for (CopyKernel k : CopyKernel.values()) {
            assertThat(cu).contains("KV_COPY_KERNEL(" + k.threads() + ", " + k.unroll() + ", " + k.hints() + ")");
        }
        assertThat(cu).containsPattern("struct KvRun \\{\\s+unsigned long long src;[^}]*unsigned long long dst;[^}]*unsigned long long len;");
        assertThat(RunTable.ENTRY_BYTES).isEqualTo(3 * 8);
    }
}
