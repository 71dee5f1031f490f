package io.orbitkv.pd.bench;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.engine.client.EngineFacts;
import io.orbitkv.pd.engine.client.api.ApiException;
import io.orbitkv.pd.engine.client.api.ApiProtocol;
import io.orbitkv.pd.engine.client.api.EngineApiClient;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.worker.EngineApiServer;
import java.lang.foreign.Arena;
import java.lang.foreign.MemorySegment;
import java.lang.foreign.ValueLayout;
import java.lang.invoke.VarHandle;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.time.Duration;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.Callable;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.locks.LockSupport;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code orbitkv-pd bench progress-signal}: what one layer-progress report costs the engine and its worker, as a frame on
 * the engine API (what is built: {@code prefill_progress}) against a progress word in memory both share (the other design
 * issue 34 named: the engine stores the count of finished layers, the worker polls it), in one JVM, the same run.
 *
 * <p>Each report is timed from the engine's call to the moment a thread waiting for it (as a push waits for its next
 * layer) wakes; CPU is the process's, per report, over paced reports (one in flight at a time, {@code --gap-us} apart, as a
 * prefill's layers come); the shared word's poller also costs CPU while no layer finishes, measured over an idle second.
 */
@Command(name = "progress-signal", mixinStandardHelpOptions = true,
        header = "A layer-progress report as an engine API frame vs a shared progress word: latency and CPU per report, same run.",
        description = {"Frame: the Java EngineApiClient's prefill_progress through a real EngineApiServer on a Unix socket (the worker's",
                "code: read, parse, check against the layout, hand to the host). Word: a long in a /dev/shm mapping, stored with",
                "release semantics by the engine, polled by the worker at --poll-us intervals. Each: --reports paced reports, one at a",
                "time, the latency to a waiting thread's wake-up, the process CPU per report; the poller's idle CPU per second.",
                "Writes docs/bench/progress-signal.md and bench/results/progress-signal.json."})
public final class ProgressSignalBenchCommand implements Callable<Integer> {

    @Option(names = "--reports", defaultValue = "20000", description = "Reports per variant, after as many discarded (default: ${DEFAULT-VALUE}).")
    int reports;

    @Option(names = "--gap-us", defaultValue = "200", description = "Pause between reports, µs (a prefill's layer every ~0.2–2 ms) (default: ${DEFAULT-VALUE}).")
    long gapMicros;

    @Option(names = "--poll-us", defaultValue = "20,100,1000", split = ",", description = "The word's polling intervals, µs (default: ${DEFAULT-VALUE}).")
    List<Long> pollMicros;

    @Option(names = "--out", defaultValue = "docs/bench/progress-signal.md", description = "Markdown result file (default: ${DEFAULT-VALUE}).")
    Path out;

    private static final KvGeometry G = new KvGeometry(32, io.orbitkv.pd.events.KvSplit.SEPARATE, 16, 8, 128, io.orbitkv.pd.events.Dtype.BF16, 32 * 1024, 16);

    /** What a waiting push sees: the newest layer count, and a monitor it waits on. */
    private static final class Seen {
        private long layers;

        synchronized void set(long v) {
            if (v > layers) {
                layers = v;
                notifyAll();
            }
        }

        synchronized void awaitAtLeast(long v) throws InterruptedException {
            while (layers < v) {
                wait();
            }
        }
    }

    record Row(String variant, double p50Micros, double p99Micros, double cpuMicrosPerReport, double idleCpuMsPerSecond) { }

    /** The JVM's own CPU per second with nothing of either variant running (JIT, GC, timers): what idle figures are net of. */
    private double baseline;

    @Override
    public Integer call() throws Exception {
        baseline = idle(2000);
        List<Row> rows = new ArrayList<>();
        rows.add(frame());
        for (long poll : pollMicros) {
            rows.add(word(poll));
        }
        String machine = Runtime.getRuntime().availableProcessors() + " cores (" + MachineInfo.cpuModel() + "), load average before "
                + MachineInfo.loadAverage();
        StringBuilder b = new StringBuilder("# A layer-progress report: engine API frame vs shared progress word\n\n");
        b.append("Measured ").append(LocalDate.now()).append(" on ").append(machine).append(" by `./orbitkv-pd bench progress-signal --reports ")
                .append(reports).append(" --gap-us ").append(gapMicros).append(" --poll-us ")
                .append(String.join(",", pollMicros.stream().map(String::valueOf).toList())).append("`: one JVM; ").append(reports)
                .append(" paced reports per variant (one at a time, ").append(gapMicros).append(" µs apart on average, ±50 %) after as many discarded. *latency*:"
                        + " the engine's call → a thread waiting for that layer (as a push waits) woke; *CPU per report*: the process's CPU over"
                        + " the reports, less the same wall time idle, per report; *idle CPU*: what the variant costs per second while no layer"
                        + " finishes (one prefill in flight), net of the JVM's own idle CPU measured first. Frame: the Java `EngineApiClient.prefillProgress` → a real `EngineApiServer`"
                        + " (Unix socket; read, parse, checked against the layout, handed to the worker). Word: a long in a `/dev/shm` mapping"
                        + " stored with release semantics, polled by a worker thread at the interval.\n\n");
        b.append("| variant | latency p50 µs | latency p99 µs | CPU per report µs | idle CPU ms/s |\n| --- | ---: | ---: | ---: | ---: |\n");
        for (Row r : rows) {
            b.append(String.format(Locale.ROOT, "| %s | %.1f | %.1f | %.1f | %.2f |%n", r.variant(), r.p50Micros(), r.p99Micros(), r.cpuMicrosPerReport(),
                    r.idleCpuMsPerSecond()));
        }
        b.append('\n').append(verdict(rows)).append('\n');
        System.out.print(b);
        Files.createDirectories(out.toAbsolutePath().getParent());
        Files.writeString(out, b.toString());
        Path json = BenchFiles.jsonFor(out);
        ObjectMapper m = new ObjectMapper();
        ObjectNode root = m.createObjectNode().put("date", LocalDate.now().toString()).put("reports", reports).put("gap_us", gapMicros);
        var a = root.putArray("rows");
        for (Row r : rows) {
            a.addObject().put("variant", r.variant()).put("latency_p50_us", r.p50Micros()).put("latency_p99_us", r.p99Micros())
                    .put("cpu_us_per_report", r.cpuMicrosPerReport()).put("idle_cpu_ms_per_s", r.idleCpuMsPerSecond());
        }
        Files.writeString(json, root.toPrettyString());
        System.out.println("Wrote " + out + " and " + json);
        return 0;
    }

    private static String verdict(List<Row> rows) {
        Row frame = rows.get(0);
        Row slow = rows.stream().skip(1).max((x, y) -> Double.compare(x.p50Micros(), y.p50Micros())).orElse(frame);
        Row fast = rows.stream().skip(1).min((x, y) -> Double.compare(x.idleCpuMsPerSecond(), y.idleCpuMsPerSecond()) * -1).orElse(frame);
        return String.format(Locale.ROOT, "Chosen: the frame. It costs %.1f µs of CPU a report (engine and worker together) and arrives in %.1f µs"
                        + " (p50), and nothing between reports. The slowest-polled word (%s) costs %.1f µs a report and %.2f ms/s while it waits,"
                        + " but a report waits for the poll (%.1f µs p50); polled fast enough to match the frame (%s) it burns %.1f ms of CPU a"
                        + " second for every prefill in flight, whatever the step's length. And a word is a new shared resource per in-flight"
                        + " prefill (a slot, its lifetime, its fencing against reuse) beside the API that already carries the engine's other"
                        + " events. The simulated engines keep reports at least `engine.layerwise.min-report-interval` (1 ms) apart, so the"
                        + " frame costs at most %.1f %% of a core per prefilling engine.", frame.cpuMicrosPerReport(), frame.p50Micros(),
                slow.variant(), slow.cpuMicrosPerReport(), slow.idleCpuMsPerSecond(), slow.p50Micros(), fast.variant(), fast.idleCpuMsPerSecond(),
                frame.cpuMicrosPerReport() / 10);
    }

    private static long cpuNanos() {
        return ProcessHandle.current().info().totalCpuDuration().map(Duration::toNanos).orElse(0L);
    }

    /** Paced reports: {@code send(i)} makes layer count {@code i} known; returns latencies (ns) and CPU per report net of idle. */
    private Row paced(String name, java.util.function.LongConsumer send, Seen seen, double idleCpuMsPerSecond) throws InterruptedException {
        long[] lat = new long[reports];
        java.util.SplittableRandom jitter = new java.util.SplittableRandom(7);
        long base = 0;
        for (int round = 0; round < 2; round++) { // the first round warms the path up
            long wall0 = System.nanoTime();
            long cpu0 = cpuNanos();
            for (int i = 0; i < reports; i++) {
                long v = base + i + 1;
                long t0 = System.nanoTime();
                send.accept(v);
                seen.awaitAtLeast(v);
                lat[i] = System.nanoTime() - t0;
                // the gap jittered ±50 %: a poller must not phase-lock with a perfectly regular engine
                LockSupport.parkNanos(gapMicros * 1000 / 2 + jitter.nextLong(gapMicros * 1000));
            }
            long cpu = cpuNanos() - cpu0;
            long wall = System.nanoTime() - wall0;
            base += reports;
            if (round == 1) {
                Arrays.sort(lat);
                // ns of CPU the JVM and the variant's idle path would have used in that wall time
                double idle = (baseline + idleCpuMsPerSecond) * 1e6 * wall / 1e9;
                return new Row(name, lat[reports / 2] / 1e3, lat[(int) (reports * 0.99)] / 1e3, Math.max(0, cpu - idle) / 1e3 / reports,
                        idleCpuMsPerSecond);
            }
        }
        throw new AssertionError();
    }

    /** CPU ms per second of the process over {@code ms} of wall time with nothing sent. */
    private static double idle(long ms) {
        long c0 = cpuNanos();
        long w0 = System.nanoTime();
        LockSupport.parkNanos(ms * 1_000_000);
        return (cpuNanos() - c0) / 1e6 / ((System.nanoTime() - w0) / 1e9);
    }

    private Row frame() throws Exception {
        Path dir = Files.createTempDirectory("orbitkv-progress-");
        Path socket = dir.resolve("api.sock");
        Path poolFile = Path.of("/dev/shm", "orbitkv-progress-" + ProcessHandle.current().pid() + ".kv");
        Seen seen = new Seen();
        EngineApiServer.Host host = new EngineApiServer.Host() {
            @Override
            public ObjectNode attach(ApiProtocol.Hello hello, boolean newInstance) {
                return new ObjectMapper().createObjectNode();
            }

            @Override
            public CompletableFuture<String> report(ApiProtocol.FactRequest fact) {
                return CompletableFuture.completedFuture("-");
            }

            @Override
            public CompletableFuture<String> reportKv(long instanceEpoch, ApiProtocol.KvEventsRequest events) {
                return CompletableFuture.completedFuture("-");
            }

            @Override
            public void progress(long instanceEpoch, ApiProtocol.PrefillProgress p, long receivedMicros) {
                seen.set(p.doneTokens()); // the benchmark's counter rides in done_tokens (layers stop at the model's count)
            }

            @Override
            public void detach(long instanceEpoch) {
            }

            @Override
            public String engineId() {
                return "prefill-0";
            }

            @Override
            public long knownEpoch() {
                return 0;
            }

            @Override
            public EngineFacts facts() {
                return null;
            }
        };
        try (HostKvPool pool = HostKvPool.mapFile(G, poolFile)) {
            EngineApiServer server = new EngineApiServer(socket, 1 << 20, 1024, Duration.ofSeconds(10), host).start();
            try (EngineApiClient c = EngineApiClient.connect(socket, new EngineApiClient.Registration("prefill-0", 1, EngineRole.PREFILL, "bench", "",
                    G.toLayout(0, 1), new ApiProtocol.PoolSpec(ApiProtocol.PoolSpec.SHM, poolFile.toString(), 0, List.of()), null), null,
                    Duration.ofSeconds(10))) {
                double idle = Math.max(0, idle(2000) - baseline);
                return paced("frame (engine API `prefill_progress`)", v -> c.prefillProgress("req-1", null, Integer.MAX_VALUE, (int) v,
                        Integer.MAX_VALUE, 1), seen, idle);
            } finally {
                server.close();
            }
        } catch (ApiException e) {
            throw new IllegalStateException("the engine API refused the benchmark's engine: " + e.getMessage(), e);
        } finally {
            Files.deleteIfExists(poolFile);
            Files.deleteIfExists(socket);
            Files.deleteIfExists(dir);
        }
    }

    private Row word(long pollMicros) throws Exception {
        Path file = Path.of("/dev/shm", "orbitkv-progress-word-" + ProcessHandle.current().pid());
        Seen seen = new Seen();
        VarHandle longs = ValueLayout.JAVA_LONG.varHandle();
        try (Arena arena = Arena.ofShared(); FileChannel ch = FileChannel.open(file, StandardOpenOption.CREATE, StandardOpenOption.READ,
                StandardOpenOption.WRITE)) {
            MemorySegment engineSide = ch.map(FileChannel.MapMode.READ_WRITE, 0, 4096, arena); // the engine's mapping
            MemorySegment workerSide = ch.map(FileChannel.MapMode.READ_WRITE, 0, 4096, arena); // the worker's own
            var running = new java.util.concurrent.atomic.AtomicBoolean(true);
            Thread poller = Thread.ofPlatform().daemon().name("progress-word-poller").start(() -> {
                long last = 0;
                while (running.get()) {
                    long v = (long) longs.getAcquire(workerSide, 0L);
                    if (v != last) {
                        last = v;
                        seen.set(v);
                    } else {
                        LockSupport.parkNanos(pollMicros * 1000);
                    }
                }
            });
            try {
                double idle = Math.max(0, idle(2000) - baseline);
                return paced("shared word, polled every " + pollMicros + " µs", v -> longs.setRelease(engineSide, 0L, v), seen, idle);
            } finally {
                running.set(false);
                poller.join();
            }
        } finally {
            Files.deleteIfExists(file);
        }
    }
}
