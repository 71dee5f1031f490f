package io.orbitkv.pd.bench;

import io.orbitkv.pd.broker.KraftCluster;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.BitSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/** {@code orbitkv-pd bench decider|transport}: benchmarks, each with its baseline measured in the same run. */
@Command(name = "bench", mixinStandardHelpOptions = true, description = "Benchmarks (each prints a table and writes results under docs/bench and bench/results).",
        subcommands = {BenchCommand.Decider.class, TransportBenchCommand.class, E2eBenchCommand.class, LinksBenchCommand.class, ScaleBenchCommand.class, MooncakeBenchCommand.class,
                EngineApiBenchCommand.class, RealModelBenchCommand.class, KvIndexBenchCommand.class, RoutingBenchCommand.class, KvBurstBenchCommand.class,
                LayerwiseBenchCommand.class, ProgressSignalBenchCommand.class, KvBridgeBenchCommand.class, VllmConnectorBenchCommand.class,
                CudaHostPathBenchCommand.class})
public final class BenchCommand implements Runnable {

    @Override
    public void run() {
        System.out.println("usage: orbitkv-pd bench decider|transport|e2e|links|scale|mooncake|engine-api|real-model|kv-index|kv-burst|routing|layerwise|progress-signal|kv-bridge|vllm-connector|cuda-host-path [--help]");
    }

    @Command(name = "decider", mixinStandardHelpOptions = true,
            header = "Decision latency and throughput of the decider per processing mode, against plain Kafka clients.",
            description = {"Decision latency (last input fact produced -> decision consumed by its actor) at --rate handoffs/s after",
                    "--warmup, and full-state-machine throughput (a burst of --burst handoffs), per processing mode, next to one",
                    "raw Kafka produce->consume hop measured in the same run. Starts its own broker unless --bootstrap is given."})
    static final class Decider implements Callable<Integer> {
        @Option(names = "--bootstrap", description = "Use this cluster instead of starting an embedded broker.")
        String bootstrap;
        @Option(names = "--rate", defaultValue = "1000", description = "Handoffs per second in the latency phase (default: ${DEFAULT-VALUE}).")
        int rate;
        @Option(names = "--warmup", defaultValue = "15", description = "Warm-up seconds per phase (default: ${DEFAULT-VALUE}).")
        int warmup;
        @Option(names = "--measure", defaultValue = "20", description = "Measured seconds per phase (default: ${DEFAULT-VALUE}).")
        int measure;
        @Option(names = "--burst", defaultValue = "20000", description = "Handoffs in the throughput burst (default: ${DEFAULT-VALUE}).")
        int burst;
        @Option(names = "--modes", defaultValue = "0,1,2,3,4,5", split = ",", description = "Which modes (indexes into the table; default: all).")
        List<Integer> modes;
        @Option(names = "--out", defaultValue = "docs/bench/decider.md", description = "Markdown result file (default: ${DEFAULT-VALUE}).")
        Path outFile;

        @Option(names = "--kafka", paramLabel = "KEY=VALUE", description = "A Streams/client property for the decider under test "
                + "(repeatable), e.g. --kafka statestore.cache.max.bytes=33554432; recorded with the results.")
        Map<String, String> kafka = new java.util.LinkedHashMap<>();

        @Option(names = "--partitions", defaultValue = "" + io.orbitkv.pd.schemas.TopicsConfig.DEFAULT_PARTITIONS, description = "Partitions per decider topic (default: ${DEFAULT-VALUE}).")
        int partitions;

        @Option(names = "--store", defaultValue = "ROCKSDB", description = "The decider's request store: ${COMPLETION-CANDIDATES} (default: ${DEFAULT-VALUE}).")
        io.orbitkv.pd.decider.DeciderConfig.StoreKind store;

        @Option(names = "--write-behind", defaultValue = "100", paramLabel = "MS", description = "The decider's decider.store.write-behind "
                + "in milliseconds, 0: request states written only at commits (default: ${DEFAULT-VALUE}).")
        long writeBehindMs;

        @Option(names = "--broker", paramLabel = "KEY=VALUE", description = "A broker property for the embedded broker (repeatable), "
                + "e.g. --broker num.network.threads=1; recorded with the results.")
        Map<String, String> brokerProps = new java.util.LinkedHashMap<>();

        @Option(names = "--broker-cpus", paramLabel = "CPUS", description = "Pin the embedded broker's JVM to these CPUs (as taskset -c "
                + "takes them: 0, 0-1); default: not pinned. See docs/decider.md, Performance.")
        String brokerCpus;

        @Option(names = "--bench-cpus", paramLabel = "CPUS", description = "Pin this JVM (decider under test, load, actors, probe) to these "
                + "CPUs, e.g. --broker-cpus 0 --bench-cpus 1; default: not pinned.")
        String benchCpus;

        @Option(names = "--decider-cpus", paramLabel = "CPUS", description = "Start the system under test (decider, floor, reference) with "
                + "its threads on these CPUs, the load and actors staying on --bench-cpus; default: where this JVM runs.")
        String deciderCpus;

        @picocli.CommandLine.Spec
        picocli.CommandLine.Model.CommandSpec spec;

        @Override
        public Integer call() throws Exception {
            cpus("--broker-cpus", brokerCpus);
            BitSet benchSet = cpus("--bench-cpus", benchCpus);
            BitSet deciderSet = cpus("--decider-cpus", deciderCpus);
            if (brokerCpus != null && bootstrap != null) {
                throw new picocli.CommandLine.ParameterException(spec.commandLine(), "--broker-cpus pins the embedded broker; with --bootstrap "
                        + "there is none (pin that cluster's brokers where they run)");
            }
            if (partitions < 1) {
                throw new picocli.CommandLine.ParameterException(spec.commandLine(), "--partitions: must be >= 1, got " + partitions);
            }
            if (rate < 1) {
                throw new picocli.CommandLine.ParameterException(spec.commandLine(), "--rate: must be >= 1 handoff/s, got " + rate);
            }
            if (warmup < 0) {
                throw new picocli.CommandLine.ParameterException(spec.commandLine(), "--warmup: must be >= 0 s, got " + warmup);
            }
            if (measure < 1) {
                throw new picocli.CommandLine.ParameterException(spec.commandLine(), "--measure: must be >= 1 s, got " + measure);
            }
            if (burst < 1) {
                throw new picocli.CommandLine.ParameterException(spec.commandLine(), "--burst: must be >= 1 handoff, got " + burst);
            }
            if (writeBehindMs < 0) {
                throw new picocli.CommandLine.ParameterException(spec.commandLine(), "--write-behind: must be 0 (at commits only) or more ms, got "
                        + writeBehindMs);
            }
            for (int m : modes) {
                if (m < 0 || m >= DeciderBench.MODES.size()) {
                    throw new picocli.CommandLine.ParameterException(spec.commandLine(),
                            "--modes: " + m + " is not a mode; use 0-" + (DeciderBench.MODES.size() - 1) + " (see docs/decider.md, Performance)");
                }
            }
            Path work = Files.createTempDirectory("orbitkv-bench-");
            loadBefore = loadAverage();
            DeciderBench.Options opts = new DeciderBench.Options(rate, Duration.ofSeconds(warmup), Duration.ofSeconds(measure), burst, 4,
                    Map.copyOf(kafka), partitions, store, Duration.ofMillis(writeBehindMs));
            KraftCluster cluster = null;
            try {
                String bs = bootstrap;
                if (bs == null) {
                    System.out.println("starting an embedded KRaft broker (child JVM) ...");
                    cluster = KraftCluster.builder().nodes(1).dataDir(work.resolve("kafka")).logsDir(work.resolve("logs"))
                            .jvmOptions(List.of("-Xmx768m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=5")).cpus(brokerCpus)
                            .brokerProperties(brokerProps).build().start();
                    bs = cluster.bootstrapServers();
                }
                if (benchSet != null) {
                    // After the broker started: a child process starts with the mask of the thread that forked it.
                    int n = CpuAffinity.pinProcess(benchSet);
                    System.out.println("pinned this JVM's " + n + " threads to CPUs " + benchCpus + (brokerCpus == null ? "" : ", the broker's to " + brokerCpus));
                }
                KraftCluster brokers = cluster;
                java.util.function.LongSupplier brokerCpu = () -> brokers == null ? 0L : brokers.nodeIds().stream()
                        .mapToLong(id -> brokers.processHandle(id).flatMap(h -> h.info().totalCpuDuration()).map(Duration::toNanos).orElse(0L))
                        .sum();
                DeciderBench bench = new DeciderBench(bs, opts, work, System.out::println).withBrokerCpu(brokerCpu)
                        .withDeciderCpus(deciderSet);
                // Cold JVMs on 2 cores measure the JIT, not the design: one discarded pass warms both JVMs first.
                System.out.println("warm-up pass (discarded) ...");
                new DeciderBench(bs, new DeciderBench.Options(rate, Duration.ofSeconds(warmup), Duration.ofSeconds(5), burst / 2, 4, Map.copyOf(kafka), partitions, store,
                        Duration.ofMillis(writeBehindMs)), work,
                        System.out::println).run(DeciderBench.MODES.get(0), 99);
                System.out.printf("raw produce->consume hop at %d/s (%ds warm-up, %ds measured) ...%n", rate, warmup, measure);
                LatencyStats raw = bench.rawHop("bench.raw-hop-" + System.nanoTime() % 100000);
                System.out.printf("  raw hop p50 %.2f ms  p99 %.2f ms%n", raw.p50ms(), raw.p99ms());
                List<DeciderBench.Result> results = new ArrayList<>();
                for (int m : modes) {
                    DeciderBench.Mode mode = DeciderBench.MODES.get(m);
                    System.out.println("mode " + mode.name() + " ...");
                    DeciderBench.Result r = bench.run(mode, m);
                    results.add(r);
                    System.out.printf("  decision p50 %.2f ms  p99 %.2f ms  throughput %.0f handoffs/s  CPU %.3f ms/handoff  %.2f cores busy at %d/s%n",
                            r.decision().p50ms(), r.decision().p99ms(), r.handoffsPerSecond(), r.cpuMsPerHandoff(), r.coresBusyAtRate(), rate);
                    System.out.printf("  hop in p50 %.2f ms, decider %.3f ms, hop out %.2f ms; raw hop beside the load %.2f ms%n",
                            r.breakdown().hopIn().p50ms(), r.breakdown().work().p50ms(), r.breakdown().hopOut().p50ms(), r.rawHopUnderLoad().p50ms());
                    System.out.println("  GC pauses in the measured window (benchmark JVM): " + pauses(r.gcPauses()));
                }
                loadAfter = loadAverage();
                String table = table(raw, results);
                System.out.println();
                System.out.println(table);
                write(table, raw, results);
                done = true;
                return 0;
            } finally {
                if (cluster != null) {
                    cluster.close();
                }
                // State directories and broker data are 100-200 MB per run and worthless after it; a failed run keeps
                // them (with the broker's logs) for a look.
                if (done) {
                    KraftCluster.deleteRecursively(work);
                } else {
                    System.err.println("bench decider failed; its state directories and broker logs are kept in " + work);
                }
            }
        }

        private boolean done;
        /** The machine's cores, counted before --bench-cpus narrows what this JVM sees. */
        private final int cores = Runtime.getRuntime().availableProcessors();

        private static String orAny(String cpus) {
            return cpus == null ? "any" : cpus;
        }

        /** The CPUs of a CPU-list option this machine can pin to (null when not given), or a usage error naming the option. */
        private BitSet cpus(String option, String value) {
            try {
                return value == null ? null : CpuAffinity.pinnable(value);
            } catch (IllegalArgumentException | UnsupportedOperationException e) {
                throw new picocli.CommandLine.ParameterException(spec.commandLine(), option + ": " + e.getMessage());
            }
        }

        private String table(LatencyStats raw, List<DeciderBench.Result> results) {
            StringBuilder b = new StringBuilder();
            b.append("| mode | decision p50 ms | p90 ms | p99 ms | max ms | p50 / raw p50 | p99 / raw p99 | handoffs/s (burst of ")
                    .append(burst).append(") | CPU ms per handoff (bench JVM + broker) | cores busy at ").append(rate)
                    .append(" handoffs/s | duplicate decisions seen |\n");
            b.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
            b.append(String.format(Locale.ROOT, "| raw produce→consume hop (baseline, same run) | %.2f | %.2f | %.2f | %.2f | 1.00 | 1.00 | — | — | — | — |%n",
                    raw.p50ms(), raw.p90ms(), raw.p99ms(), raw.maxMs()));
            for (DeciderBench.Result r : results) {
                LatencyStats l = r.decision();
                b.append(String.format(Locale.ROOT, "| %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f | %.0f | %.3f | %.2f | %d |%n", r.mode().name(),
                        l.p50ms(), l.p90ms(), l.p99ms(), l.maxMs(), l.p50ms() / raw.p50ms(), l.p99ms() / raw.p99ms(), r.handoffsPerSecond(),
                        r.cpuMsPerHandoff(), r.coresBusyAtRate(), r.duplicateDecisions()));
            }
            b.append("\nWhere the time goes (the same measured decisions; p50 / p99 ms): hop in = last fact produced → the decider starts"
                    + " processing it; decider = its own work for that fact; hop out = decision handed to the producer → the actor has it;"
                    + " raw hop beside the load = the raw hop above, measured again (").append(DeciderBench.PROBE_RATE)
                    .append(" records/s, own topic) while the decider carries this load; GC pauses = the benchmark JVM's collector pauses"
                    + " (decider, actors and probe stop together) during the measured window, after a warm-up that ends with one full"
                    + " collection.\n\n");
            b.append("| mode | hop in | decider | hop out | raw hop beside the load | GC pauses in the window | records written per handoff"
                    + " | broker requests per handoff (sent by the clients, at the rate) |\n| --- | --- | --- | --- | --- | --- | --- | --- |\n");
            for (DeciderBench.Result r : results) {
                DeciderBench.Breakdown d = r.breakdown();
                StringBuilder recs = new StringBuilder();
                r.recordsPerHandoff().forEach((t, n) -> {
                    if (n >= 0.005) {
                        recs.append(recs.isEmpty() ? "" : ", ").append(t).append(' ').append(String.format(Locale.ROOT, "%.1f", n));
                    }
                });
                StringBuilder reqs = new StringBuilder();
                r.requestsPerHandoff().forEach((who, n) -> reqs.append(reqs.isEmpty() ? "" : ", ").append(who).append(' ')
                        .append(String.format(Locale.ROOT, "%.2f", n)));
                double total = r.requestsPerHandoff().values().stream().mapToDouble(Double::doubleValue).sum();
                b.append(String.format(Locale.ROOT, "| %s | %s | %s | %s | %s | %s | %s | %.1f (%s) |%n", r.mode().name(), pair(d.hopIn()), pair(d.work()),
                        pair(d.hopOut()), pair(r.rawHopUnderLoad()), pauses(r.gcPauses()), recs, total, reqs));
            }
            return b.toString();
        }

        private static String pauses(GcPauses.Summary g) {
            return g.count() == 0 ? "none" : String.format(Locale.ROOT, "%d, mean %.1f ms, max %.0f ms", g.count(), g.meanMs(), g.maxMs());
        }

        private static String pair(LatencyStats l) {
            return String.format(Locale.ROOT, "%.2f / %.2f", l.p50ms(), l.p99ms());
        }

        private void write(String table, LatencyStats raw, List<DeciderBench.Result> results) throws Exception {
            Path md = outFile;
            Files.createDirectories(md.toAbsolutePath().getParent());
            StringBuilder extra = new StringBuilder();
            if (store != io.orbitkv.pd.decider.DeciderConfig.StoreKind.ROCKSDB) {
                extra.append(" --store ").append(store);
            }
            if (partitions != io.orbitkv.pd.schemas.TopicsConfig.DEFAULT_PARTITIONS) {
                extra.append(" --partitions ").append(partitions);
            }
            if (writeBehindMs != io.orbitkv.pd.decider.DeciderConfig.DEFAULT_STORE_WRITE_BEHIND.toMillis()) {
                extra.append(" --write-behind ").append(writeBehindMs);
            }
            kafka.forEach((k, v) -> extra.append(" --kafka ").append(k).append('=').append(v));
            brokerProps.forEach((k, v) -> extra.append(" --broker ").append(k).append('=').append(v));
            if (brokerCpus != null) {
                extra.append(" --broker-cpus ").append(brokerCpus);
            }
            if (benchCpus != null) {
                extra.append(" --bench-cpus ").append(benchCpus);
            }
            if (deciderCpus != null) {
                extra.append(" --decider-cpus ").append(deciderCpus);
            }
            // The diagnostic switch back to Streams' flush per task (DeciderApp.clientSupplier) shows in the command.
            String cmd = (Boolean.getBoolean("orbitkv.decider.flushPerTask") ? "ORBITKV_JAVA_OPTS=\"... -Dorbitkv.decider.flushPerTask=true\" " : "")
                    + String.format(Locale.ROOT, "./orbitkv-pd bench decider --rate %d --warmup %d --measure %d --burst %d", rate, warmup, measure, burst)
                    + extra;
            Files.writeString(md, "# Decider benchmark\n\nMeasured " + LocalDate.now() + " on " + cores
                    + " cores with `" + cmd + "` (broker in a child JVM " + (brokerCpus == null && benchCpus == null && deciderCpus == null
                    ? "on the same cores" : "pinned to CPUs " + orAny(brokerCpus) + ", the benchmark JVM to " + orAny(benchCpus)
                    + (deciderCpus == null ? "" : ", the system under test inside it to " + deciderCpus))
                    + "; decider, load generator and actors in the benchmark JVM). Decision latency = last input fact produced → decision consumed by its actor, at " + rate
                    + " handoffs/s after " + warmup + " s of warm-up; throughput = a burst of " + burst
                    + " full handoffs (admitted, decode ready, prefill completed, order, transfer completed, KV ready, decode completed,"
                    + " releases, outcome). System load average (1 min) at the start " + loadBefore + ", at the end " + loadAfter
                    + " (the benchmark itself keeps about 2 busy; much more means other work shared the cores). 'Cores busy' is the CPU"
                    + " time of the benchmark JVM and the broker during the measured window divided by its length (2 = the machine is"
                    + " full). Records written per handoff count offsets, so under exactly-once they include transaction markers. The floor"
                    + " and the reference are not deciders (docs/decider.md, Performance); the reference's \"handoff\" is one pair: two"
                    + " halves in, the pair out, its latency second half produced → pair consumed.\n\n" + table);
            // The committed results sit in bench/results; a run written elsewhere (--out) keeps its JSON beside its markdown.
            Path json = BenchFiles.jsonFor(md);
            StringBuilder j = new StringBuilder("{\"date\":\"" + LocalDate.now() + "\",\"rate\":" + rate + ",\"load_average_start\":" + loadBefore
                    + ",\"load_average_end\":" + loadAfter + ",\"raw_hop\":" + stats(raw) + ",\"modes\":[");
            for (int i = 0; i < results.size(); i++) {
                DeciderBench.Result r = results.get(i);
                j.append(i == 0 ? "" : ",").append("{\"mode\":\"").append(r.mode().name()).append("\",\"decision\":").append(stats(r.decision()))
                        .append(",\"handoffs_per_s\":").append(String.format(Locale.ROOT, "%.1f", r.handoffsPerSecond()))
                        .append(",\"cpu_ms_per_handoff\":").append(String.format(Locale.ROOT, "%.4f", r.cpuMsPerHandoff()))
                        .append(",\"raw_hop_beside_load\":").append(stats(r.rawHopUnderLoad()))
                        .append(",\"cores_busy_at_rate\":").append(String.format(Locale.ROOT, "%.2f", r.coresBusyAtRate()))
                        .append(",\"hop_in\":").append(stats(r.breakdown().hopIn())).append(",\"decider_work\":").append(stats(r.breakdown().work()))
                        .append(",\"hop_out\":").append(stats(r.breakdown().hopOut()))
                        .append(String.format(Locale.ROOT, ",\"gc_pauses\":{\"count\":%d,\"mean_ms\":%.2f,\"max_ms\":%.0f}", r.gcPauses().count(),
                                r.gcPauses().meanMs(), r.gcPauses().maxMs()))
                        .append(",\"records_per_handoff\":{");
                StringBuilder recs = new StringBuilder();
                r.recordsPerHandoff().forEach((t, n) -> recs.append(recs.isEmpty() ? "" : ",").append('"').append(t).append("\":")
                        .append(String.format(Locale.ROOT, "%.3f", n)));
                StringBuilder reqs = new StringBuilder();
                r.requestsPerHandoff().forEach((who, n) -> reqs.append(reqs.isEmpty() ? "" : ",").append('"').append(who).append("\":")
                        .append(String.format(Locale.ROOT, "%.3f", n)));
                j.append(recs).append("},\"requests_per_handoff\":{").append(reqs).append("}}");
            }
            Files.writeString(json, j.append("]}\n").toString());
            System.out.println("results written to " + md + " and " + json);
        }

        private String loadBefore = "n/a";
        private String loadAfter = "n/a";

        private static String loadAverage() {
            double l = java.lang.management.ManagementFactory.getOperatingSystemMXBean().getSystemLoadAverage();
            return l < 0 ? "\"n/a\"" : String.format(Locale.ROOT, "%.2f", l);
        }

        private static String stats(LatencyStats l) {
            return String.format(Locale.ROOT, "{\"count\":%d,\"p50_ms\":%.3f,\"p90_ms\":%.3f,\"p99_ms\":%.3f,\"max_ms\":%.3f}", l.count(), l.p50ms(),
                    l.p90ms(), l.p99ms(), l.maxMs());
        }
    }
}
