package io.orbitkv.pd.bench;

import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.events.BlockStored;
import io.orbitkv.pd.events.KvCacheEvent;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.TopicAdmin;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.Callable;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code orbitkv-pd bench kv-burst}: does a burst of KV cache events delay the decider's handoff decisions? The decider's
 * decision latency (the low-latency mode of {@code bench decider}) at a fixed handoff rate, without a burst, with engines'
 * KV cache events written to {@code orbitkv.kv-events} on the same broker as fast as asked for the whole window, and
 * without again — one run, one broker, the same cores.
 */
@Command(name = "kv-burst", mixinStandardHelpOptions = true,
        header = "The decider's decision latency with and without a burst of KV cache events on the same broker.",
        description = {"Runs bench decider's low-latency mode at --rate handoffs/s three times on one embedded broker: alone, while a",
                "producer writes --events KV cache events/s (BlockStored, --blocks hashes each) to the kv-events topic, and alone again;",
                "prints decision p50/p99 of each. Writes docs/bench/kv-burst.md and bench/results/kv-burst.json."})
public final class KvBurstBenchCommand implements Callable<Integer> {

    @Option(names = "--rate", defaultValue = "200", description = "Handoffs per second (default: ${DEFAULT-VALUE}).")
    int rate;

    @Option(names = "--events", defaultValue = "5000", description = "KV cache events per second in the burst (default: ${DEFAULT-VALUE}).")
    int events;

    @Option(names = "--blocks", defaultValue = "64", description = "Block hashes per event (a ~1,000-token prompt) (default: ${DEFAULT-VALUE}).")
    int blocks;

    @Option(names = "--warmup", defaultValue = "10", description = "Warm-up seconds per run (default: ${DEFAULT-VALUE}).")
    int warmup;

    @Option(names = "--measure", defaultValue = "20", description = "Measured seconds per run (default: ${DEFAULT-VALUE}).")
    int measure;

    @Option(names = "--out", defaultValue = "docs/bench/kv-burst.md", description = "Markdown result file (default: ${DEFAULT-VALUE}).")
    Path out;

    /** One run's decision latency, and the burst beside it (0 events: none). */
    record Row(String label, double p50, double p99, double eventsPerSecond, double mbPerSecond) { }

    @Override
    public Integer call() throws Exception {
        Path work = Files.createTempDirectory("orbitkv-bench-kvburst-");
        String machine = MachineInfo.cpuModel() + ", load average before " + MachineInfo.loadAverage();
        List<Row> rows = new ArrayList<>();
        try (KraftCluster cluster = KraftCluster.builder().nodes(1).dataDir(work.resolve("kafka")).logsDir(work.resolve("logs"))
                .jvmOptions(List.of("-Xmx768m", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=5")).build().start()) {
            String bs = cluster.bootstrapServers();
            Topics topics = new Topics(new TopicsConfig("kvburst.", TopicsConfig.DEFAULT_PARTITIONS, (short) 1, Duration.ofHours(1)),
                    EventSerdes.embedded());
            try (Admin admin = Admin.create(Map.of("bootstrap.servers", bs))) {
                TopicAdmin.ensureTopics(admin, topics);
            }
            DeciderBench.Options opts = new DeciderBench.Options(rate, Duration.ofSeconds(warmup), Duration.ofSeconds(measure), 1000, 4);
            DeciderBench bench = new DeciderBench(bs, opts, work, System.out::println);
            System.out.println("warm-up pass (discarded) ...");
            new DeciderBench(bs, new DeciderBench.Options(rate, Duration.ofSeconds(warmup), Duration.ofSeconds(5), 500, 4), work, System.out::println)
                    .run(DeciderBench.MODES.get(0), 99);
            rows.add(run(bench, 0, "alone", null, null));
            rows.add(run(bench, 1, "with " + events + " KV events/s", bs, topics));
            rows.add(run(bench, 2, "alone again", null, null));
        }
        String table = table(rows);
        System.out.println();
        System.out.println(table);
        Files.createDirectories(out.toAbsolutePath().getParent());
        Files.writeString(out, "# A burst of KV cache events against the decider's decisions\n\nMeasured " + LocalDate.now() + " by `./orbitkv-pd bench"
                + " kv-burst --rate " + rate + " --events " + events + " --blocks " + blocks + "` on " + machine + ". The decider (bench decider's"
                + " low-latency mode, " + warmup + " s warm-up, " + measure + " s measured) at " + rate + " handoffs/s on one embedded broker; in the"
                + " middle run a producer writes BlockStored events of " + blocks + " block hashes (and " + blocks * 16 + " token ids) to the"
                + " kv-events topic of the same broker for the whole run. The decider does not read that topic: what a burst can cost it is the"
                + " broker and the cores they share.\n\n" + table + "\n");
        Path json = BenchFiles.jsonFor(out);
        StringBuilder j = new StringBuilder("{\"date\":\"" + LocalDate.now() + "\",\"rate\":" + rate + ",\"blocks\":" + blocks + ",\"runs\":[");
        for (int i = 0; i < rows.size(); i++) {
            Row r = rows.get(i);
            j.append(i == 0 ? "" : ",").append(String.format(Locale.ROOT, "{\"label\":\"%s\",\"decision_p50_ms\":%.3f,\"decision_p99_ms\":%.3f,"
                    + "\"kv_events_per_s\":%.1f,\"kv_mb_per_s\":%.2f}", r.label(), r.p50(), r.p99(), r.eventsPerSecond(), r.mbPerSecond()));
        }
        Files.writeString(json, j.append("]}\n").toString());
        System.out.println("Wrote " + out + " and " + json);
        KraftCluster.deleteRecursively(work);
        return 0;
    }

    private Row run(DeciderBench bench, int index, String label, String bootstrap, Topics topics) throws Exception {
        System.out.println("run: " + label + " ...");
        Burst burst = bootstrap == null ? null : new Burst(bootstrap, topics, events, blocks);
        long t0 = System.nanoTime();
        DeciderBench.Result r;
        try {
            r = bench.run(DeciderBench.MODES.get(0), 10 + index);
        } finally {
            if (burst != null) {
                burst.stop();
            }
        }
        double seconds = (System.nanoTime() - t0) / 1e9;
        Row row = new Row(label, r.decision().p50ms(), r.decision().p99ms(), burst == null ? 0 : burst.sent.get() / seconds,
                burst == null ? 0 : burst.bytes.get() / seconds / 1e6);
        System.out.printf(Locale.ROOT, "  decision p50 %.2f ms  p99 %.2f ms%s%n", row.p50(), row.p99(),
                burst == null ? "" : String.format(Locale.ROOT, "  beside %.0f KV events/s (%.1f MB/s)", row.eventsPerSecond(), row.mbPerSecond()));
        return row;
    }

    private static String table(List<Row> rows) {
        StringBuilder b = new StringBuilder("| run | decision p50 (ms) | decision p99 (ms) | KV events/s written beside | KV MB/s |\n| --- | --- | --- | --- | --- |\n");
        for (Row r : rows) {
            b.append(String.format(Locale.ROOT, "| %s | %.2f | %.2f | %.0f | %.1f |%n", r.label(), r.p50(), r.p99(), r.eventsPerSecond(), r.mbPerSecond()));
        }
        return b.toString();
    }

    /** A producer writing KV cache events of 8 engines at a paced rate until stopped (what the engines' workers would write). */
    private static final class Burst {
        final AtomicLong sent = new AtomicLong();
        final AtomicLong bytes = new AtomicLong();
        private volatile boolean stop;
        private final Thread thread;

        Burst(String bootstrap, Topics topics, int perSecond, int blocks) {
            String topic = topics.kvEvents().name();
            List<byte[]> values = new ArrayList<>();
            Random rnd = new Random(7);
            for (int e = 0; e < 64; e++) {
                List<ByteBuffer> hashes = new ArrayList<>();
                List<Integer> tokens = new ArrayList<>();
                for (int b = 0; b < blocks; b++) {
                    byte[] h = new byte[32];
                    rnd.nextBytes(h);
                    hashes.add(ByteBuffer.wrap(h));
                    for (int t = 0; t < 16; t++) {
                        tokens.add(rnd.nextInt(32_000));
                    }
                }
                KvCacheEvent ev = KvCacheEvent.newBuilder().setEngineId("engine-" + e % 8).setInstanceEpoch(1).setSeq(e + 1).setEventTimeMs(0)
                        .setPayload(BlockStored.newBuilder().setBlockHashes(hashes).setTokenIds(tokens).setBlockSize(16).build()).build();
                values.add(topics.kvEvents().valueSerde().serializer().serialize(topic, ev));
            }
            KafkaProducer<String, byte[]> p = new KafkaProducer<>(Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap, ProducerConfig.ACKS_CONFIG, "all",
                    ProducerConfig.LINGER_MS_CONFIG, 5), new StringSerializer(), new ByteArraySerializer());
            thread = Thread.ofPlatform().daemon().name("kv-burst").start(() -> {
                try (p) {
                    long start = System.nanoTime();
                    long n = 0;
                    while (!stop) {
                        long due = start + (long) (n * 1e9 / perSecond);
                        long wait = due - System.nanoTime();
                        if (wait > 0) {
                            java.util.concurrent.locks.LockSupport.parkNanos(wait);
                        }
                        byte[] v = values.get((int) (n % values.size()));
                        p.send(new ProducerRecord<>(topic, "engine-" + n % 8, v));
                        sent.incrementAndGet();
                        bytes.addAndGet(v.length);
                        n++;
                    }
                }
            });
        }

        void stop() throws InterruptedException {
            stop = true;
            thread.join();
        }
    }
}
