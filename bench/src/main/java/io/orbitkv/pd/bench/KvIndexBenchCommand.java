package io.orbitkv.pd.bench;

import io.orbitkv.pd.events.BlockRemoved;
import io.orbitkv.pd.events.BlockStored;
import io.orbitkv.pd.events.KvCacheEvent;
import io.orbitkv.pd.proxy.routing.KvIndex;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import java.util.Set;
import java.util.concurrent.Callable;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code orbitkv-pd bench kv-index}: the KV index a router rebuilds from {@code orbitkv.kv-events} (docs/routing.md) —
 * events absorbed per second, bytes per (engine, block) entry, and a prompt's lookup over every engine — against the
 * obvious index (a {@code HashSet} of hash byte buffers per engine) built from the same events in the same run.
 */
@Command(name = "kv-index", mixinStandardHelpOptions = true,
        header = "The router's KV index: events/s absorbed, bytes per entry and lookup time, against a plain hash-set index.",
        description = {"Builds the KV index (proxy routing.KvIndex) from a generated log of KV cache events (BlockStored runs of",
                "prompt blocks, some BlockRemoved) over --engines engines up to --entries (engine, block) entries, then looks up",
                "prompts; the same with a HashSet<ByteBuffer> per engine as the baseline, in the same run."})
public final class KvIndexBenchCommand implements Callable<Integer> {

    @Option(names = "--engines", defaultValue = "8", description = "Engines (default: ${DEFAULT-VALUE}).")
    int engines;

    @Option(names = "--entries", defaultValue = "1000000", description = "(engine, block) entries to build up to (default: ${DEFAULT-VALUE}).")
    int entries;

    @Option(names = "--lookups", defaultValue = "100000", description = "Prompt lookups timed (default: ${DEFAULT-VALUE}).")
    int lookups;

    @Option(names = "--out", defaultValue = "docs/bench/kv-index.md", description = "Markdown result file (default: ${DEFAULT-VALUE}).")
    Path out;

    @Option(names = "--json", defaultValue = "bench/results/kv-index.json", description = "Machine-readable results (default: ${DEFAULT-VALUE}).")
    Path json;

    /** Blocks a stored event carries: a ~1,000-token prompt's 64 blocks of 16. */
    static final int RUN = 64;

    /** The obvious index: per engine a set of hash buffers. */
    static final class Plain {
        final Map<String, Set<ByteBuffer>> byEngine = new HashMap<>();

        void apply(KvCacheEvent e) {
            Set<ByteBuffer> s = byEngine.computeIfAbsent(e.getEngineId(), k -> new HashSet<>());
            switch (e.getPayload()) {
                case BlockStored st -> s.addAll(st.getBlockHashes());
                case BlockRemoved r -> r.getBlockHashes().forEach(s::remove);
                default -> s.clear();
            }
        }

        int matches(String engine, List<ByteBuffer> prompt) {
            Set<ByteBuffer> s = byEngine.get(engine);
            int n = 0;
            while (n < prompt.size() && s != null && s.contains(prompt.get(n))) {
                n++;
            }
            return n;
        }
    }

    record Result(String index, double eventsPerSec, double blocksPerSec, double bytesPerEntry, double lookupP50Us, double lookupP99Us) { }

    @Override
    public Integer call() throws Exception {
        System.out.printf("generating a log of KV cache events: %d engines, up to %,d (engine, block) entries ...%n", engines, entries);
        List<KvCacheEvent> log = new ArrayList<>();
        List<List<ByteBuffer>> prompts = new ArrayList<>();
        generate(log, prompts);
        long blocks = log.stream().mapToLong(e -> e.getPayload() instanceof BlockStored s ? s.getBlockHashes().size()
                : ((BlockRemoved) e.getPayload()).getBlockHashes().size()).sum();
        // the records as the proxy's feed reads them from Kafka: Avro with the embedded serde's fingerprint
        io.orbitkv.pd.schemas.EventSerdes serdes = io.orbitkv.pd.schemas.EventSerdes.embedded();
        List<byte[]> encoded = log.stream().map(e -> serdes.kvCacheEvent().serializer().serialize("orbitkv.kv-events", e)).toList();
        List<Result> rows = new ArrayList<>();
        for (int round = 0; round < 3; round++) { // the first rounds warm the JIT up; the last is reported
            rows.clear();
            rows.add(measureKvIndex(log, blocks, prompts));
            var full = serdes.kvCacheEvent().deserializer();
            rows.add(measureDecoding("KvIndex, each record decoded in full first (the serde's deserializer)", log, encoded,
                    b -> full.deserialize("orbitkv.kv-events", b), blocks, prompts));
            io.orbitkv.pd.proxy.routing.KvEventDecoder feed = new io.orbitkv.pd.proxy.routing.KvEventDecoder(serdes.kvCacheEvent());
            rows.add(measureDecoding("KvIndex, each record decoded without its token ids first (the proxy's feed, KvEventDecoder)", log, encoded,
                    b -> feed.decode("orbitkv.kv-events", b), blocks, prompts));
            rows.add(measurePlain(log, blocks, prompts));
        }
        StringBuilder t = new StringBuilder("| index | events/s | blocks/s | bytes per (engine, block) entry | lookup p50 | lookup p99 |\n"
                + "| --- | ---: | ---: | ---: | ---: | ---: |\n");
        for (Result r : rows) {
            t.append(String.format(Locale.ROOT, "| %s | %,.0f | %,.0f | %.1f | %.1f µs | %.1f µs |%n", r.index(), r.eventsPerSec(), r.blocksPerSec(),
                    r.bytesPerEntry(), r.lookupP50Us(), r.lookupP99Us()));
        }
        System.out.println();
        System.out.print(t);
        String md = "# The router's KV index\n\nMeasured " + LocalDate.now() + " by `./orbitkv-pd bench kv-index --engines " + engines + " --entries "
                + entries + "` on " + MachineInfo.cpuModel() + " (load average before " + MachineInfo.loadAverage() + "), one thread. The log: "
                + log.size() + " events (BlockStored runs of " + RUN + " blocks, every fifth a BlockRemoved of 16), " + blocks
                + " block hashes, up to " + entries + " (engine, block) entries over " + engines + " engines; lookups: " + lookups
                + " prompts of " + RUN + " blocks against every engine (the longest cached prefix per engine). Bytes per entry: the"
                + " heap the index holds after a full collection, over its entries. Baseline: a HashSet<ByteBuffer> per engine, the"
                + " same events, the same run (it keeps the log's own ByteBuffer objects, so its bytes per entry leave out the hashes"
                + " themselves: a consumer decoding its own would hold ~100 bytes more per entry). The second and third rows decode each record from"
                + " its Avro bytes before applying it: in full, and as the proxy's feed does after a poll (KvEventDecoder: one pass over"
                + " the bytes that checks each length as it reads and skips the token ids, for records in this build's layout);"
                + " Kafka's own fetch is not included. Token ids are"
                + " random below 128,000, as a real vocabulary's.\n\n" + t
                + "\nTargets (issue 33): >= 100,000 block events/s absorbed on 2 cores, <= 64 bytes per (engine, block) entry, lookup p50"
                + " <= 0.3 ms at the proxy (this is the index alone; the proxy adds tokenizing and hashing the prompt).\n";
        Files.createDirectories(out.toAbsolutePath().getParent());
        Files.writeString(out, md);
        Files.createDirectories(json.toAbsolutePath().getParent());
        StringBuilder j = new StringBuilder("{\"date\":\"" + LocalDate.now() + "\",\"engines\":" + engines + ",\"entries\":" + entries + ",\"rows\":[");
        for (int i = 0; i < rows.size(); i++) {
            Result r = rows.get(i);
            j.append(i == 0 ? "" : ",").append(String.format(Locale.ROOT, "{\"index\":\"%s\",\"events_per_s\":%.0f,\"blocks_per_s\":%.0f,"
                    + "\"bytes_per_entry\":%.2f,\"lookup_p50_us\":%.2f,\"lookup_p99_us\":%.2f}", r.index(), r.eventsPerSec(), r.blocksPerSec(),
                    r.bytesPerEntry(), r.lookupP50Us(), r.lookupP99Us()));
        }
        Files.writeString(json, j.append("]}\n").toString());
        System.out.println("Wrote " + out + " and " + json);
        return 0;
    }

    private void generate(List<KvCacheEvent> log, List<List<ByteBuffer>> prompts) throws Exception {
        Random rnd = new Random(42);
        MessageDigest sha = MessageDigest.getInstance("SHA-256");
        long[] seq = new long[engines];
        long held = 0;
        int p = 0;
        while (held < entries) {
            int e = rnd.nextInt(engines);
            List<ByteBuffer> run = new ArrayList<>(RUN);
            for (int b = 0; b < RUN; b++) {
                run.add(ByteBuffer.wrap(sha.digest((p + "/" + b).getBytes(java.nio.charset.StandardCharsets.UTF_8))));
            }
            if (prompts.size() < 1000) {
                prompts.add(run);
            }
            p++;
            int[] tokens = new int[RUN * 16];
            for (int t = 0; t < tokens.length; t++) {
                tokens[t] = rnd.nextInt(128_000); // a real vocabulary's ids: 2-3 bytes each on the wire, as in engines' events
            }
            log.add(KvCacheEvent.newBuilder().setEngineId("engine-" + e).setInstanceEpoch(1).setSeq(++seq[e]).setEventTimeMs(0)
                    .setPayload(BlockStored.newBuilder().setBlockHashes(run).setTokenIds(Arrays.stream(tokens).boxed().toList()).setBlockSize(16).build())
                    .build());
            held += RUN;
            if (p % 5 == 0) {
                log.add(KvCacheEvent.newBuilder().setEngineId("engine-" + e).setInstanceEpoch(1).setSeq(++seq[e]).setEventTimeMs(0)
                        .setPayload(BlockRemoved.newBuilder().setBlockHashes(run.subList(RUN - 16, RUN)).build()).build());
                held -= 16;
            }
        }
    }

    /** An index as the benchmark drives it: fed the log, asked its size, and asked for one prompt's matches over every engine. */
    interface Measured {
        void apply(KvCacheEvent e);

        long entries();

        /** Looks prompt {@code k} up over every engine; returns something of the answer (kept, so the lookup is not optimised away). */
        long lookup(int k);
    }

    private Result measureKvIndex(List<KvCacheEvent> log, long blocks, List<List<ByteBuffer>> prompts) {
        KvIndex x = new KvIndex();
        List<List<byte[]>> asBytes = prompts.stream().map(r -> r.stream().map(KvIndexBenchCommand::bytes).toList()).toList();
        return measure("KvIndex (64-bit keys, open addressing)", log, blocks, new Measured() {
            public void apply(KvCacheEvent e) {
                x.apply(e);
            }

            public long entries() {
                return x.entries();
            }

            public long lookup(int k) {
                return x.matches(asBytes.get(k % asBytes.size())).size();
            }
        });
    }

    /** The index fed the records' bytes: each decoded (Avro) then applied, as the proxy's feed does after a poll. */
    private Result measureDecoding(String name, List<KvCacheEvent> log, List<byte[]> encoded, java.util.function.Function<byte[], KvCacheEvent> decode,
                                   long blocks, List<List<ByteBuffer>> prompts) {
        KvIndex x = new KvIndex();
        int[] next = {0};
        List<List<byte[]>> asBytes = prompts.stream().map(r -> r.stream().map(KvIndexBenchCommand::bytes).toList()).toList();
        return measure(name, log, blocks, new Measured() {
            public void apply(KvCacheEvent ignored) {
                x.apply(decode.apply(encoded.get(next[0]++)));
            }

            public long entries() {
                return x.entries();
            }

            public long lookup(int k) {
                return x.matches(asBytes.get(k % asBytes.size())).size();
            }
        });
    }

    private Result measurePlain(List<KvCacheEvent> log, long blocks, List<List<ByteBuffer>> prompts) {
        Plain x = new Plain();
        return measure("baseline: HashSet<ByteBuffer> per engine", log, blocks, new Measured() {
            public void apply(KvCacheEvent e) {
                x.apply(e);
            }

            public long entries() {
                return x.byEngine.values().stream().mapToLong(Set::size).sum();
            }

            public long lookup(int k) {
                long n = 0;
                for (String e : x.byEngine.keySet()) {
                    n += x.matches(e, prompts.get(k % prompts.size()));
                }
                return n;
            }
        });
    }

    /** What the index costs: the log applied (timed), the heap it then holds per entry, and --lookups lookups (each timed). */
    private Result measure(String name, List<KvCacheEvent> log, long blocks, Measured x) {
        long heap0 = usedHeap();
        long t0 = System.nanoTime();
        log.forEach(x::apply);
        double secs = (System.nanoTime() - t0) / 1e9;
        double bytes = (usedHeap() - heap0) / (double) x.entries();
        double[] us = new double[lookups];
        for (int i = 0; i < lookups; i++) {
            long s = System.nanoTime();
            kept += x.lookup(i);
            us[i] = (System.nanoTime() - s) / 1e3;
        }
        Arrays.sort(us);
        return new Result(name, log.size() / secs, blocks / secs, bytes, us[lookups / 2], us[(int) (lookups * 0.99)]);
    }

    /** The lookups' answers, summed where the JIT cannot see them unused. */
    static long kept;

    private static byte[] bytes(ByteBuffer b) {
        byte[] out = new byte[b.remaining()];
        b.duplicate().get(out);
        return out;
    }

    /** Used heap after a full collection (the log itself is held throughout, so deltas are the index's). */
    private static long usedHeap() {
        for (int i = 0; i < 3; i++) {
            System.gc();
        }
        Runtime r = Runtime.getRuntime();
        return r.totalMemory() - r.freeMemory();
    }
}
