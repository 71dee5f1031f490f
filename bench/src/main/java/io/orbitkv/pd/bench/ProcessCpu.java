package io.orbitkv.pd.bench;

import io.orbitkv.pd.harness.Pipeline;
import java.util.LinkedHashMap;
import java.util.Map;

/** CPU time of a pipeline's processes, read from the OS (/proc through {@link ProcessHandle}), for CPU-per-request tables. */
final class ProcessCpu {

    private ProcessCpu() {
    }

    /** CPU time (ms) each process of the pipeline, the broker and this load generator have used so far. */
    static Map<String, Long> millis(Pipeline pipeline) {
        Map<String, Long> m = new LinkedHashMap<>();
        pipeline.brokerProcess().flatMap(h -> h.info().totalCpuDuration()).ifPresent(d -> m.put("broker", d.toMillis()));
        for (Pipeline.Child c : pipeline.children()) {
            c.process().info().totalCpuDuration().ifPresent(d -> m.put(c.name(), d.toMillis()));
        }
        ProcessHandle.current().info().totalCpuDuration().ifPresent(d -> m.put("load generator (this JVM)", d.toMillis()));
        return m;
    }

    /** CPU ms per request of each process between two readings of {@link #millis}. */
    static Map<String, Double> perRequest(Map<String, Long> before, Map<String, Long> after, int n) {
        Map<String, Double> out = new LinkedHashMap<>();
        before.forEach((name, b) -> {
            Long a = after.get(name);
            if (a != null && n > 0) {
                out.put(name, (a - b) / (double) n);
            }
        });
        return out;
    }
}
