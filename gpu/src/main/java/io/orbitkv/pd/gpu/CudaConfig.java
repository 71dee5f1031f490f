package io.orbitkv.pd.gpu;

import java.util.LinkedHashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Set;

/**
 * Settings of the {@code cuda} transport ({@code transfer.cuda.*}); validated here, an error names the setting.
 *
 * @param nodeId     the node this worker runs on: the endpoint address; cuda reaches only engines served on this node
 *                   by this worker process ({@code node-id}, default: {@code $HOSTNAME}, else {@code localhost})
 * @param device     the GPU ordinal that runs the copies ({@code device}, default 0)
 * @param mode       {@code kernel} (one gather/scatter launch per order, default), {@code batch} (one
 *                   {@code cuMemcpyBatchAsync} per order) or {@code per-copy} (one copy call per run; a baseline)
 * @param kernel     the kernel variant ({@code kernel}, default {@link CopyKernel#DEFAULT})
 * @param grid       {@code per-chunk} (one block per chunk, default) or {@code persistent}
 * @param chunkBytes largest piece of a run one thread block copies ({@code chunk-bytes}, default 64 KiB)
 * @param maxBatch   most copies per {@code cuMemcpyBatchAsync} call ({@code max-batch}, default 65,536)
 */
public record CudaConfig(String nodeId, int device, CudaCopyEngine.Mode mode, CopyKernel kernel, CudaCopyEngine.Grid grid, long chunkBytes,
                         int maxBatch) {

    public static final String PREFIX = "transfer.cuda.";
    public static final long DEFAULT_CHUNK_BYTES = 64 * 1024;
    public static final int DEFAULT_MAX_BATCH = 65_536;
    private static final Set<String> KEYS = Set.of("node-id", "device", "mode", "kernel", "grid", "chunk-bytes", "max-batch");

    public CudaConfig {
        if (nodeId == null || nodeId.isBlank()) {
            throw new IllegalArgumentException(PREFIX + "node-id: must not be blank");
        }
        if (device < 0) {
            throw new IllegalArgumentException(PREFIX + "device: must be >= 0, got " + device);
        }
        if (mode == null || kernel == null || grid == null) {
            throw new IllegalArgumentException(PREFIX + "mode, kernel and grid are required");
        }
        if (chunkBytes < 16 || chunkBytes > RunTable.MAX_CHUNK || chunkBytes % 16 != 0) {
            throw new IllegalArgumentException(PREFIX + "chunk-bytes: must be a multiple of 16 in 16.." + RunTable.MAX_CHUNK + ", got " + chunkBytes);
        }
        if (maxBatch < 1) {
            throw new IllegalArgumentException(PREFIX + "max-batch: must be >= 1, got " + maxBatch);
        }
    }

    /** Every setting at its default. */
    public static CudaConfig defaults() {
        return parse(Map.of());
    }

    /** The node id a worker uses when {@code node-id} is not set. */
    public static String defaultNodeId() {
        String h = System.getenv("HOSTNAME");
        return h == null || h.isBlank() ? "localhost" : h;
    }

    /** From settings without the {@value #PREFIX} prefix; unknown keys are refused. */
    public static CudaConfig parse(Map<String, String> settings) {
        for (String k : settings.keySet()) {
            if (!KEYS.contains(k)) {
                throw new IllegalArgumentException(PREFIX + k + ": unknown setting; known: " + KEYS.stream().sorted().toList());
            }
        }
        return new CudaConfig(settings.getOrDefault("node-id", defaultNodeId()), integer(settings, "device", 0),
                mode(settings.getOrDefault("mode", "kernel")),
                CopyKernel.byShortName(PREFIX + "kernel", settings.getOrDefault("kernel", CopyKernel.DEFAULT.shortName())),
                grid(settings.getOrDefault("grid", "per-chunk")), longValue(settings, "chunk-bytes", DEFAULT_CHUNK_BYTES),
                integer(settings, "max-batch", DEFAULT_MAX_BATCH));
    }

    /** The settings that reproduce this config (without the prefix). */
    public Map<String, String> toSettings() {
        Map<String, String> m = new LinkedHashMap<>();
        m.put("node-id", nodeId);
        m.put("device", Integer.toString(device));
        m.put("mode", mode.name().toLowerCase(Locale.ROOT).replace('_', '-'));
        m.put("kernel", kernel.shortName());
        m.put("grid", grid.name().toLowerCase(Locale.ROOT).replace('_', '-'));
        m.put("chunk-bytes", Long.toString(chunkBytes));
        m.put("max-batch", Integer.toString(maxBatch));
        return m;
    }

    public CudaConfig withMode(CudaCopyEngine.Mode m) {
        return new CudaConfig(nodeId, device, m, kernel, grid, chunkBytes, maxBatch);
    }

    public CudaConfig withKernel(CopyKernel k, CudaCopyEngine.Grid g, long chunk) {
        return new CudaConfig(nodeId, device, mode, k, g, chunk, maxBatch);
    }

    private static CudaCopyEngine.Mode mode(String v) {
        return switch (v) {
            case "kernel" -> CudaCopyEngine.Mode.KERNEL;
            case "batch" -> CudaCopyEngine.Mode.BATCH;
            case "per-copy" -> CudaCopyEngine.Mode.PER_COPY;
            default -> throw new IllegalArgumentException(PREFIX + "mode: must be kernel, batch or per-copy, got '" + v + "'");
        };
    }

    private static CudaCopyEngine.Grid grid(String v) {
        return switch (v) {
            case "per-chunk" -> CudaCopyEngine.Grid.PER_CHUNK;
            case "persistent" -> CudaCopyEngine.Grid.PERSISTENT;
            default -> throw new IllegalArgumentException(PREFIX + "grid: must be per-chunk or persistent, got '" + v + "'");
        };
    }

    private static int integer(Map<String, String> s, String key, int dflt) {
        return Math.toIntExact(longValue(s, key, dflt));
    }

    private static long longValue(Map<String, String> s, String key, long dflt) {
        String v = s.get(key);
        if (v == null) {
            return dflt;
        }
        try {
            return Long.parseLong(v.strip());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(PREFIX + key + ": not a number: '" + v + "'");
        }
    }
}
