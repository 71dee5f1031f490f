package io.orbitkv.pd.bench;

import io.orbitkv.pd.mooncake.MooncakeConfig;
import io.orbitkv.pd.mooncake.te.MooncakeEngine;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/** {@code orbitkv-pd bench mooncake}: our tcp transport against the mooncake transport (Mooncake's TCP protocol), same run. */
@Command(name = "mooncake", mixinStandardHelpOptions = true,
        header = "Loopback bandwidth of the tcp and mooncake transports.",
        description = {"Loopback bandwidth of our tcp transport and of the mooncake transport over the Mooncake Transfer Engine's",
                "TCP protocol, moving --mib MiB of KV at each --pages size (source and destination pages fully scattered),",
                "interleaved in the same run. Needs libtransfer_engine.so (--library or ORBITKV_MOONCAKE_LIB; docs/mooncake.md).",
                "Prints a table and writes --out and bench/results/mooncake.json."})
public final class MooncakeBenchCommand implements Callable<Integer> {
    @Option(names = "--library", description = "libtransfer_engine.so (default: $ORBITKV_MOONCAKE_LIB).")
    String library;
    @Option(names = "--mib", defaultValue = "256", description = "MiB per transfer (default: ${DEFAULT-VALUE}).")
    int mib;
    @Option(names = "--pages", defaultValue = "32768,262144,4194304", split = ",",
            description = "Page sizes in bytes (default: 32 KiB, 256 KiB, 4 MiB).")
    List<Integer> pages;
    @Option(names = "--warmup", defaultValue = "2", description = "Discarded passes per page size (default: ${DEFAULT-VALUE}).")
    int warmup;
    @Option(names = "--repeat", defaultValue = "5", description = "Measured passes per page size; the median is reported (default: ${DEFAULT-VALUE}).")
    int repeat;
    @Option(names = "--connections", defaultValue = "1,2", split = ",",
            description = "transfer.tcp.connections values, one tcp column each; the first is compared with mooncake (default: ${DEFAULT-VALUE}).")
    List<Integer> connections;
    @Option(names = "--mooncake", paramLabel = "KEY=VALUE", description = "A transfer.mooncake.* setting without its prefix (repeatable),"
            + " e.g. --mooncake max-inflight-requests=2048; recorded with the results. The protocol is always tcp here.")
    Map<String, String> mooncake = new LinkedHashMap<>();
    @Option(names = "--out", defaultValue = "docs/bench/mooncake.md", description = "Markdown result file (default: ${DEFAULT-VALUE}).")
    Path outFile;
    @Option(names = "--note", description = "A line about where and how this run was made, written into the result file.")
    String note;

    @Override
    public Integer call() throws Exception {
        MooncakeEngine.Availability lib = MooncakeEngine.load(library);
        if (!lib.available()) {
            System.err.println("bench mooncake: the Mooncake Transfer Engine is unavailable: " + lib.reason());
            return 2;
        }
        Map<String, String> settings = new LinkedHashMap<>(mooncake);
        settings.put("protocol", "tcp");
        MooncakeConfig config = MooncakeConfig.parse(settings);
        String loadBefore = MachineInfo.loadAverage();
        long bytes = (long) mib << 20;
        for (int p : pages) {
            if (p < 4096 || bytes % p != 0 || bytes / p > 1 << 20) {
                throw new IllegalArgumentException("--pages: " + p + " must be >= 4096 and divide " + bytes + " bytes into at most 1,048,576 pages");
            }
        }
        MooncakeBench bench = new MooncakeBench(new MooncakeBench.Options(bytes, pages, warmup, repeat, connections, config), lib.orElseThrow());
        List<MooncakeBench.Result> results = new ArrayList<>();
        for (int p : pages) {
            System.out.printf("%s pages (%d of them): tcp transport and mooncake transport, %d+%d passes each ...%n", size(p), bytes / p, warmup, repeat);
            MooncakeBench.Result r = bench.run(p);
            results.add(r);
            System.out.printf(Locale.ROOT, "  tcp %s GB/s (connections %s)  mooncake %.2f GB/s  (tcp %.1f× mooncake)%n", BenchFiles.slashed(r.tcp()), connections,
                    r.mooncake(), r.ratio());
        }
        String table = table(results);
        System.out.println();
        System.out.println(table);
        write(table, results, config, lib.orElseThrow().library(), loadBefore);
        return 0;
    }

    private static String size(int p) {
        return p >= 1 << 20 ? (p >> 20) + " MiB" : p >= 1024 ? (p >> 10) + " KiB" : p + " B";
    }

    private String table(List<MooncakeBench.Result> results) {
        StringBuilder b = new StringBuilder("| page size | pages |");
        for (int c : connections) {
            b.append(" tcp transport, ").append(c).append(c == 1 ? " connection" : " connections").append(" GB/s |");
        }
        b.append(" mooncake transport (Mooncake TCP) GB/s | tcp (").append(connections.get(0)).append(") / mooncake | best tcp / mooncake |\n|");
        b.append(" --- |".repeat(5 + connections.size())).append('\n');
        for (MooncakeBench.Result r : results) {
            b.append(String.format(Locale.ROOT, "| %s | %d |", size(r.pageBytes()), r.pages()));
            for (double t : r.tcp()) {
                b.append(String.format(Locale.ROOT, " %.2f |", t));
            }
            b.append(String.format(Locale.ROOT, " %.2f | %.1f× | %.1f× |%n", r.mooncake(), r.ratio(), r.bestTcp() / r.mooncake()));
        }
        return b.toString();
    }

    private void write(String table, List<MooncakeBench.Result> results, MooncakeConfig config, Path lib, String loadBefore) throws Exception {
        Files.createDirectories(outFile.toAbsolutePath().getParent());
        StringBuilder extra = new StringBuilder();
        mooncake.forEach((k, v) -> extra.append(" --mooncake ").append(k).append('=').append(v));
        String cmd = "./orbitkv-pd bench mooncake --mib " + mib + " --warmup " + warmup + " --repeat " + repeat + " --connections "
                + String.join(",", connections.stream().map(String::valueOf).toList()) + extra;
        String mcEnv = String.join(", ", System.getenv().entrySet().stream().filter(e -> e.getKey().startsWith("MC_")).map(e -> e.getKey() + "="
                + e.getValue()).sorted().toList());
        StringBuilder targets = new StringBuilder("\n## Target\n\n");
        results.stream().filter(r -> r.pageBytes() == 32768).findFirst().ifPresent(r -> targets.append(String.format(Locale.ROOT,
                "- 32 KiB pages, our tcp transport ≥ 5× the Mooncake Transfer Engine's TCP transport, same run: **%.1f× with %d connection(s),"
                        + " %.1f× best** (%s)%n", r.ratio(), connections.get(0), r.bestTcp() / r.mooncake(), r.ratio() >= 5 ? "met" : "not met")));
        String settings = String.format(Locale.ROOT, "batch-requests %d, max-inflight-requests %d, max-request-bytes %d, poll-min %d µs, poll-max %d µs",
                config.batchRequests(), config.maxInflightRequests(), config.maxRequestBytes(), config.pollMin().toNanos() / 1000,
                config.pollMax().toNanos() / 1000);
        Files.writeString(outFile, "# Mooncake benchmark: our tcp transport against the mooncake transport\n\nMeasured " + LocalDate.now() + " on "
                + Runtime.getRuntime().availableProcessors() + " cores (" + MachineInfo.cpuModel() + "; 1-minute load average " + loadBefore + " before the run, "
                + MachineInfo.loadAverage() + " after) with `" + cmd + "`: one JVM, loopback, every sender and receiver on its own threads; library "
                + lib + (mcEnv.isEmpty() ? "" : " (environment: " + mcEnv + ")") + "." + (note == null ? "" : " " + note + ".") + " Each row moves "
                + mib + " MiB from one paged pool into another with source and destination pages both fully scattered (two random permutations:"
                + " no two pages coalesce, every page is its own run on both sides). Medians of " + repeat + " passes after " + warmup
                + " discarded ones; the transports' passes interleaved; every destination page verified after the last pass of each.\n\n"
                + "- **tcp transport**: our own (BEGIN with the order's token checked by the receiver's gate, gathering WRITE frames,"
                + " scattering reads straight into the pool, END/ACK).\n"
                + "- **mooncake transport**: the same order admitted by the same kind of gate over its admission connection, then every page"
                + " a one-sided WRITE request through the Mooncake Transfer Engine's TCP transport (P2P handshake metadata), " + settings
                + ", END/ACK after every request finished.\n\n" + table + targets);
        Path json = BenchFiles.jsonFor(outFile);
        StringBuilder j = new StringBuilder(String.format(Locale.ROOT, "{\"date\":\"%s\",\"note\":\"%s\",\"cpu\":\"%s\",\"cores\":%d,\"load_before\":\"%s\","
                + "\"load_after\":\"%s\",\"library\":\"%s\",\"mc_env\":\"%s\",\"bytes\":%d,\"warmup\":%d,\"repeat\":%d,\"tcp_connections\":%s,"
                + "\"mooncake_settings\":\"%s\",\"pages\":[", LocalDate.now(), note == null ? "" : note.replace("\"", "'"), MachineInfo.cpuModel().replace("\"", ""),
                Runtime.getRuntime().availableProcessors(), loadBefore, MachineInfo.loadAverage(), lib, mcEnv, (long) mib << 20, warmup, repeat, connections, settings));
        for (int i = 0; i < results.size(); i++) {
            MooncakeBench.Result r = results.get(i);
            j.append(i == 0 ? "" : ",").append(String.format(Locale.ROOT, "{\"page_bytes\":%d,\"pages\":%d,\"tcp_gbps\":%s,\"tcp_min_gbps\":%s,"
                    + "\"mooncake_gbps\":%.3f,\"mooncake_min_gbps\":%.3f,\"tcp_over_mooncake\":%.2f}", r.pageBytes(), r.pages(), BenchFiles.jsonNumbers(r.tcp()),
                    BenchFiles.jsonNumbers(r.tcpMin()), r.mooncake(), r.mooncakeMin(), r.ratio()));
        }
        Files.writeString(json, j.append("]}\n").toString());
        System.out.println("results written to " + outFile + " and " + json);
    }
}
