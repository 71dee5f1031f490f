package io.orbitkv.pd.gpu;

import java.io.IOException;
import java.io.InputStream;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * The committed PTX of the copy kernels, a class-path resource. {@code gpu/build-ptx.sh} makes it from
 * {@code gpu/src/main/cuda/kv_copy.cu}; the driver JIT-compiles it for the GPU at module load.
 */
public final class KernelImage {

    /** Where the PTX lives on the class path. */
    public static final String RESOURCE = "/io/orbitkv/pd/gpu/kv_copy.ptx";
    /** Helper kernels for tests and the benchmark. */
    public static final String FILL_RANDOM = "kv_fill_random";
    public static final String COMPARE_RUNS = "kv_compare_runs";

    private static final Pattern ENTRY = Pattern.compile("^\\.visible \\.entry (\\w+)\\(", Pattern.MULTILINE);
    private static final Pattern TARGET = Pattern.compile("^\\.target (\\S+)", Pattern.MULTILINE);

    private KernelImage() { }

    /**
     * The PTX text as {@code cuModuleLoadData} wants it: the resource's bytes followed by one NUL.
     *
     * @throws IllegalStateException when the resource is missing from the class path (a broken build)
     */
    public static byte[] ptxImage() {
        try (InputStream in = KernelImage.class.getResourceAsStream(RESOURCE)) {
            if (in == null) {
                throw new IllegalStateException("kernel image " + RESOURCE + " is not on the class path (run gpu/build-ptx.sh and rebuild)");
            }
            byte[] text = in.readAllBytes();
            byte[] out = new byte[text.length + 1];
            System.arraycopy(text, 0, out, 0, text.length);
            return out;
        } catch (IOException e) {
            throw new UncheckedIOException("cannot read " + RESOURCE, e);
        }
    }

    /** The PTX text (without the NUL). */
    public static String ptxText() {
        byte[] b = ptxImage();
        return new String(b, 0, b.length - 1, StandardCharsets.US_ASCII);
    }

    /** The kernels' entry points in the PTX, in file order. */
    public static List<String> entryPoints(String ptx) {
        List<String> out = new ArrayList<>();
        Matcher m = ENTRY.matcher(ptx);
        while (m.find()) {
            out.add(m.group(1));
        }
        return out;
    }

    /** The PTX's {@code .target}, e.g. {@code sm_90}. */
    public static String target(String ptx) {
        Matcher m = TARGET.matcher(ptx);
        return m.find() ? m.group(1) : "";
    }
}
