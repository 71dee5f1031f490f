package io.orbitkv.pd.bench.chaos;

import io.orbitkv.pd.harness.HostsOption;
import io.orbitkv.pd.harness.LoadClient;
import io.orbitkv.pd.harness.Pipeline;
import io.orbitkv.pd.harness.PipelineSpec;
import io.orbitkv.pd.decider.DeciderConfig;
import io.orbitkv.pd.engine.sim.ModelPreset;
import io.orbitkv.pd.logtools.KafkaLogSource;
import io.orbitkv.pd.logtools.LogSource;
import io.orbitkv.pd.logtools.Progress;
import io.orbitkv.pd.logtools.TopicRole;
import io.orbitkv.pd.logtools.audit.AuditReport;
import io.orbitkv.pd.logtools.audit.Auditor;
import io.orbitkv.pd.logtools.replay.ReplayReport;
import io.orbitkv.pd.logtools.replay.Replayer;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.EnumSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.Callable;
import java.util.stream.Collectors;
import picocli.CommandLine.Command;
import picocli.CommandLine.Option;

/**
 * {@code orbitkv-pd chaos}: a fault schedule against a pipeline of its own under a steady load through the proxy,
 * then the log judged: one outcome per request the log knows, pages back on every engine, the audit clean, the
 * replay identical. One row per fault; exit 1 on any loss, double outcome, leak, hang or log violation.
 */
@Command(name = "chaos", mixinStandardHelpOptions = true,
        header = "Kills, hangs and partitions the components of a pipeline of its own under load, then judges the log.",
        description = {"Kills and hangs every component kind of a pipeline of its own, one at a time, under a steady load through the",
                "proxy, and prints one row per fault: requests, client-visible errors by status, outcomes (exactly one per request",
                "the log knows), pages still held after the load stopped, how long the component took to be ready again and the",
                "clients to be served again. Then audits and replays the log. Exit 1 on any lost or doubled outcome, leaked page,",
                "hung request, audit violation or replay difference. See docs/chaos.md."})
public final class ChaosCommand implements Callable<Integer> {

    /** Every component kind killed, and the ones that can hang mid-handoff hung. */
    static final List<String> FULL = List.of("kill:decider", "hang:decider:5s", "kill:engine-prefill-0", "hang:engine-prefill-0:5s",
            "kill:engine-decode-0", "hang:engine-decode-0:5s", "kill:worker-prefill-0", "hang:worker-prefill-0:5s", "kill:worker-decode-0",
            "hang:worker-decode-0:5s", "kill:proxy", "hang:proxy:5s", "hostile:doors", "abandon:200", "cut:relay", "stall:relay:5s",
            "stall:relay:12s");
    /** A broker node of a 3-node KRaft cluster killed and hung (needs --brokers 3; the schedule sets it). */
    static final List<String> BROKERS = List.of("kill:broker-2", "hang:broker-3:5s");
    /**
     * Partitions on separate hosts (needs --hosts netns; the schedule sets it, with 3 broker nodes): the data plane between
     * a prefill and a decode node cut silently and loudly, a decode node cut from the brokers for less and for more than a
     * lease (30 s), a decider host isolated from the brokers, the proxy cut from a decode node mid-stream, a prefill node
     * cut from every other host for 40 s, one broker (a minority) isolated; the broker leading most request-events partitions
     * cut from the other brokers (clients reach both sides: Jepsen's isolated leader) and a bridge over broker-2 (two halves
     * of the hosts apart, broker-2 seeing both), each checked for acknowledged facts missing from the log after the heal;
     * every connection idle 65 s (past twice the 30 s pool idle limit), then load; an engine node restarted at the same
     * address as a new instance, and one replaced at a new address.
     */
    static final List<String> PARTITIONS = List.of("drop:prefill-0/decode-0:5s", "refuse:prefill-0/decode-0:5s", "drop:decode-0/brokers:8s",
            "drop:decode-1/brokers:35s", "drop:decider/brokers:8s", "drop:proxy/decode-0:5s", "drop:prefill-1/*:40s", "drop:broker-3/*:10s",
            "drop:leader/brokers:10s", "bridge:broker-2:8s", "idle:connections:65s", "restart:decode-0:3s", "replace:prefill-0:3s");
    /** The short schedule CI runs. */
    static final List<String> CI = List.of("kill:decider", "kill:engine-decode-0", "kill:worker-decode-0");

    @Option(names = "--schedule", defaultValue = "full", description = "full (every component kind), partitions (on separate hosts), brokers (a node of a 3-node KRaft cluster"
            + " killed and hung) or ci (a short one) (default: ${DEFAULT-VALUE}).")
    String schedule;

    @Option(names = "--fault", description = "A fault instead of the schedule (repeatable): kill:TARGET or hang:TARGET[:DURATION], TARGET one of"
            + " decider, proxy, engine-prefill-0, worker-decode-1, broker-2, ...; hostile:doors (the hostile-input corpus); abandon:N (N streams"
            + " walked away from at once); cut:relay, stall:relay[:DURATION] (the data plane to decode-0, through a fault relay); with --hosts netns:"
            + " drop:A/B[:DURATION], refuse:A/B[:DURATION] (A, B: a host, brokers, leader (of request-events) or *), bridge:HOST[:DURATION],"
            + " restart:NODE[:DOWN], replace:NODE[:DOWN] (an engine node: decode-0); idle:connections[:DURATION]")
    List<String> faults;

    @Option(names = "--hosts", description = {"loopback (every process on 127.0.0.1; the default) or netns (each component on a network",
            "namespace of its own: partitions become possible; the partitions schedule's default; needs root)."})
    String hosts;

    @Option(names = "--link", description = "With --hosts netns: every host's link limited to this rate (tc: 10gbit, 1gbit).")
    String link;

    @Option(names = "--rate", defaultValue = "5", description = "Requests per second through the proxy (default: ${DEFAULT-VALUE}).")
    double rate;

    @Option(names = "--engines", defaultValue = "2", description = "Engines per role, each with its worker (default: ${DEFAULT-VALUE}).")
    int engines;

    @Option(names = "--python-engines", defaultValue = "prefill-1,decode-1", split = ",", description = "Engines that run as the Python"
            + " simulated engine on their worker's engine API (the others are Java engines on Kafka); 'none' for none (default:"
            + " ${DEFAULT-VALUE}).")
    List<String> pythonEngines;

    @Option(names = "--proxies", defaultValue = "2", description = "Proxies, the load spread over them as by a load balancer (default: ${DEFAULT-VALUE}).")
    int proxies;

    @Option(names = "--brokers", description = "Nodes of the embedded KRaft cluster, topics replicated on up to 3 (default: 1; 3 for the brokers"
            + " schedule).")
    Integer brokers;

    private int brokerNodes = 1;

    @Option(names = "--deciders", defaultValue = "2", description = "Decider instances, each with a standby of the other's state (default:"
            + " ${DEFAULT-VALUE}).")
    int deciders;

    @Option(names = "--down", defaultValue = "3s", description = "How long a killed component stays down, and a hung one hangs (default: ${DEFAULT-VALUE}).")
    String down;

    @Option(names = "--before", defaultValue = "3s", description = "Load before each fault (default: ${DEFAULT-VALUE}).")
    String before;

    @Option(names = "--after", defaultValue = "6s", description = "Load after the component is back (default: ${DEFAULT-VALUE}).")
    String after;

    @Option(names = "--warmup", defaultValue = "20s", description = "Load with no fault before the first one, not reported (default:"
            + " ${DEFAULT-VALUE}; 0s: none).")
    String warmup;

    @Option(names = "--client-timeout", defaultValue = "30s", description = "A request silent this long counts as hung (default: ${DEFAULT-VALUE}).")
    String clientTimeout;

    @Option(names = "--decider", description = "Extra decider property key=value (repeatable).")
    Map<String, String> deciderProps = new LinkedHashMap<>();

    @Option(names = "--out", description = "Markdown result file (default: docs/bench/chaos.md for the full schedule, none otherwise).")
    Path out;

    @Option(names = "--json", description = "Machine-readable results (default: bench/results/chaos.json for the full schedule, none otherwise).")
    Path json;

    @Override
    public Integer call() throws Exception {
        ConfigProps d = ConfigProps.empty().with("down", down).with("before", before).with("after", after).with("timeout", clientTimeout)
                .with("warmup", warmup);
        Duration downFor = d.duration("down", Duration.ofSeconds(3));
        List<String> names = faults != null && !faults.isEmpty() ? faults : switch (schedule) {
            case "full" -> FULL;
            case "ci" -> CI;
            case "brokers" -> BROKERS;
            case "partitions" -> PARTITIONS;
            default -> throw new IllegalArgumentException("--schedule: full, brokers, partitions or ci, got " + schedule);
        };
        List<ChaosRun.Fault> plan = names.stream().map(f -> ChaosRun.Fault.parse(f, downFor)).toList();
        if (engines < 1 || engines > 4) {
            throw new IllegalArgumentException("--engines: 1..4 per role, got " + engines);
        }
        if (rate <= 0 || rate > 50) {
            throw new IllegalArgumentException("--rate: (0, 50] requests per second (the machine is shared with the pipeline), got " + rate);
        }
        String stem = schedule.equals("full") ? "chaos" : "chaos-" + schedule;
        Path outFile = out != null ? out : faults == null && !schedule.equals("ci") ? Path.of("docs/bench/" + stem + ".md") : null;
        Path jsonFile = json != null ? json : faults == null && !schedule.equals("ci") ? Path.of("bench/results/" + stem + ".json") : null;
        Path work = Files.createTempDirectory("orbitkv-chaos-");
        ModelPreset preset = ModelPreset.TINY;
        boolean netns = HostsOption.netns(faults == null && schedule.equals("partitions") && hosts == null ? "netns" : hosts, link);
        int nodes = brokers != null ? brokers : faults == null && (schedule.equals("brokers") || schedule.equals("partitions")) ? 3 : 1;
        brokerNodes = nodes;
        if (nodes < 1 || nodes > 3) {
            throw new IllegalArgumentException("--brokers: 1..3, got " + nodes);
        }
        if (deciders < 1 || deciders > 3) {
            throw new IllegalArgumentException("--deciders: 1..3, got " + deciders);
        }
        if (proxies < 1 || proxies > 4) {
            throw new IllegalArgumentException("--proxies: 1..4, got " + proxies);
        }
        PipelineSpec spec = PipelineSpec.defaults().withEngines(engines, engines).withProxies(proxies).withDeciders(deciders).withBrokers(nodes).withRelay(netns ? null : "decode-0").withNetns(netns).withLink(link)
                .withPythonEngines(pythonEngines.contains("none") ? java.util.Set.of() : java.util.Set.copyOf(pythonEngines)).withModel(preset, 256, 0.05, 2.0)
                .withExtra(deciderProps, Map.of(), Map.of(), Map.of());
        List<ChaosRun.Window> windows = new ArrayList<>();
        ChaosLedger ledger;
        Map<String, Double> stops;
        AuditReport audit;
        ReplayReport replay;
        java.io.ByteArrayOutputStream traces;
        List<LoadClient> clients = new ArrayList<>();
        EventSerdes serdes = null;
        try (Pipeline p = Pipeline.start(spec, work, s -> System.out.println("  " + s))) {
            for (String url : p.proxyUrls()) {
                clients.add(new LoadClient(url, "orbitkv-sim-" + preset.key(), null, d.duration("timeout", Duration.ofSeconds(30))));
            }
            // The pipeline's topics and wire format, as its decider reads them: for the hostile corpus and for reading the log.
            DeciderConfig dc = deciderConfig(p);
            serdes = EventSerdes.create(dc.serde());
            Topics topics = new Topics(dc.topics(), serdes);
            ChaosRun run = new ChaosRun(p, clients, rate, d.duration("before", Duration.ofSeconds(3)), d.duration("after", Duration.ofSeconds(6)),
                    dc.policy().leaseDuration().multipliedBy(2).plusSeconds(15), s -> System.out.println(s));
            run.withRequestEvents(topics.requestEvents().name());
            run.withHostile(() -> new ChaosHostile(p, topics, "orbitkv-sim-" + preset.key(), io.orbitkv.pd.transport.tcp.TcpConfig.defaults()
                    .ioTimeout(), Duration.ofSeconds(30)));
            System.out.printf(Locale.ROOT, "chaos: %d faults, %.0f requests/s through the proxy, %d + %d engines%n", plan.size(), rate, engines, engines);
            Duration warm = d.duration("warmup", Duration.ofSeconds(20));
            if (!warm.isZero()) {
                System.out.println("  warming up: " + warm.toSeconds() + " s of load, no fault (not reported)");
                run.warmUp(warm);
            }
            for (int i = 0; i < plan.size(); i++) {
                ChaosRun.Window w = run.run(i, plan.get(i));
                windows.add(w);
                System.out.printf(Locale.ROOT, "    %d requests, %d client errors %s, ready in %.1f s, served again after %.1f s, %d pages held after%n",
                        w.sent().size(), w.errors(), w.errorsByStatus(), w.readySeconds(), w.recoverySeconds(), w.leakedPages());
                w.errorSamples(3).forEach(e -> System.out.println("      e.g. " + (e.length() > 300 ? e.substring(0, 300) + "..." : e)));
            }
            // The log is read committed: the last requests' decisions may sit in the decider's open transaction (committed
            // every decider.commit.interval) while the engines, reading uncommitted, already acted on them. Read again
            // until every request the log knows has its outcome, 30 s at most (then what is missing is reported).
            long until = System.nanoTime() + 30_000_000_000L;
            while (true) {
                try (LogSource log = open(dc, topics, EnumSet.of(TopicRole.REQUEST_EVENTS, TopicRole.DECISIONS, TopicRole.DEAD_LETTERS))) {
                    ledger = ChaosLedger.read(log, topics);
                }
                if (ledger.unsettledCount() == 0 || System.nanoTime() > until) {
                    break;
                }
                Thread.sleep(1000);
            }
            try (LogSource log = open(dc, topics, EnumSet.of(TopicRole.REQUEST_EVENTS, TopicRole.DECISIONS, TopicRole.DEAD_LETTERS))) {
                audit = Auditor.audit(log, serdes, dc.policy(), 20, Progress.NONE);
            }
            try (LogSource log = open(dc, topics, EnumSet.of(TopicRole.REQUEST_EVENTS, TopicRole.DECISIONS))) {
                replay = Replayer.replay(log, dc.policy(), topics, 20, Progress.NONE);
            }
            // The log goes with the pipeline: keep the story of the first requests the audit flagged, for whoever reads why.
            traces = new java.io.ByteArrayOutputStream();
            for (String id : audit.violations().stream().map(io.orbitkv.pd.logtools.audit.Violation::requestId).distinct().limit(3)
                    .toList()) {
                try (LogSource log = open(dc, topics, EnumSet.of(TopicRole.ENGINES, TopicRole.REQUEST_EVENTS, TopicRole.DECISIONS,
                        TopicRole.DEAD_LETTERS, TopicRole.ANSWERS))) {
                    io.orbitkv.pd.logtools.trace.RequestTrace.collect(log, id, serdes, false, Progress.NONE)
                            .writeText(new java.io.PrintStream(traces, true, java.nio.charset.StandardCharsets.UTF_8), true, 160);
                }
            }
            System.out.println("stopping: the broker first (kill -9), then SIGTERM to every component ...");
            stops = stopAll(p);
        } finally {
            clients.forEach(LoadClient::close);
            if (serdes != null) {
                serdes.close();
            }
        }
        String table = table(windows, ledger) + "\n" + stopTable(stops) + doorsTable(windows);
        System.out.println();
        System.out.println(table);
        String verdict = verdict(windows, ledger, audit, replay);
        System.out.println(verdict);
        for (int i = 0; i < windows.size(); i++) {
            ledger.unsettled(i).entrySet().stream().limit(10).forEach(e -> System.out.println("  not exactly one outcome: " + e.getKey() + " "
                    + e.getValue()));
            ledger.acknowledgedMissing(windows.get(i).answeredOnTransferredKv()).entrySet().stream().limit(10).forEach(e -> System.out.println(
                    "  answered, but acknowledged facts missing from the log: " + e.getKey() + " " + e.getValue()));
        }
        if (!audit.clean()) {
            audit.writeText(System.out);
            System.out.println("the story of the first flagged requests, from the log:");
            System.out.println(traces.toString(java.nio.charset.StandardCharsets.UTF_8));
        }
        if (!replay.identical()) {
            replay.writeText(System.out);
        }
        if (outFile != null) {
            Files.createDirectories(outFile.toAbsolutePath().getParent());
            Files.writeString(outFile, markdown(table, verdict));
        }
        if (jsonFile != null) {
            Files.createDirectories(jsonFile.toAbsolutePath().getParent());
            Files.writeString(jsonFile, json(windows, ledger, audit, replay));
        }
        boolean slowStop = stops.values().stream().anyMatch(t -> Double.isNaN(t) || t > 10);
        return failed(windows, ledger, audit, replay) || slowStop ? 1 : 0;
    }

    /** Seconds to stop after SIGTERM beyond which a component is killed instead (and reported as not stopping). */
    private static final long STOP_WAIT_SECONDS = 20;

    /**
     * The hardest stop: the broker gone first (kill -9), then SIGTERM to every component at once; returns each one's
     * seconds until it exited (NaN: still running after {@link #STOP_WAIT_SECONDS}, then killed).
     */
    static Map<String, Double> stopAll(Pipeline p) throws InterruptedException {
        p.brokerProcess().ifPresent(b -> {
            b.destroyForcibly();
            b.onExit().join();
        });
        Map<String, Double> out = new java.util.concurrent.ConcurrentSkipListMap<>();
        List<java.util.concurrent.CompletableFuture<Void>> exits = new ArrayList<>();
        long t0 = System.nanoTime();
        for (Pipeline.Child c : p.children()) {
            c.process().destroy();
            exits.add(c.process().onExit().thenRun(() -> out.put(c.name(), (System.nanoTime() - t0) / 1e9)));
        }
        try {
            java.util.concurrent.CompletableFuture.allOf(exits.toArray(java.util.concurrent.CompletableFuture[]::new))
                    .get(STOP_WAIT_SECONDS, java.util.concurrent.TimeUnit.SECONDS);
        } catch (java.util.concurrent.ExecutionException | java.util.concurrent.TimeoutException e) {
            // some still running: NaN below
        }
        for (Pipeline.Child c : p.children()) {
            if (c.alive()) {
                out.put(c.name(), Double.NaN);
                c.process().destroyForcibly();
            }
        }
        return new java.util.TreeMap<>(out);
    }

    static String doorsTable(List<ChaosRun.Window> windows) {
        List<ChaosHostile.Door> doors = windows.stream().flatMap(w -> w.doors().stream()).toList();
        if (doors.isEmpty()) {
            return "";
        }
        StringBuilder b = new StringBuilder("\n| door | hostile input | expected | what happened | ok |\n| --- | --- | --- | --- | --- |\n");
        for (ChaosHostile.Door d : doors) {
            b.append("| ").append(d.door()).append(" | ").append(d.input()).append(" | ").append(d.expected()).append(" | ")
                    .append(d.got().replace("|", "\\|")).append(" | ").append(d.ok() ? "yes" : "**NO**").append(" |\n");
        }
        return b.toString();
    }

    static String stopTable(Map<String, Double> stops) {
        StringBuilder b = new StringBuilder("| SIGTERM with the broker already gone | " + String.join(" | ", stops.keySet()) + " |\n| --- |");
        b.append(" ---: |".repeat(stops.size())).append("\n| seconds to exit |");
        stops.values().forEach(t -> b.append(Double.isNaN(t) ? " > " + STOP_WAIT_SECONDS + " (killed) |" : String.format(Locale.ROOT, " %.1f |", t)));
        return b.append("\n").toString();
    }


    private static LogSource open(DeciderConfig dc, Topics topics, java.util.Set<TopicRole> roles) {
        return KafkaLogSource.open(new KafkaLogSource.Options(dc.bootstrapServers(), dc.kafkaOverrides(), topics,
                dc.serde().mode().name().toLowerCase(Locale.ROOT), roles, null, null, Duration.ofSeconds(30)));
    }

    private static DeciderConfig deciderConfig(Pipeline p) {
        return DeciderConfig.from(ConfigProps.loadOrEmpty(p.child("decider").config()));
    }

    static boolean failed(List<ChaosRun.Window> windows, ChaosLedger ledger, AuditReport audit, ReplayReport replay) {
        for (int i = 0; i < windows.size(); i++) {
            ChaosLedger.Counts c = ledger.window(i);
            ChaosRun.Window w = windows.get(i);
            if (c.lost() > 0 || c.doubled() > 0 || w.leakedPages() > 0 || w.hung() > 0 || w.readySeconds() < 0
                    || !ledger.acknowledgedMissing(w.answeredOnTransferredKv()).isEmpty()
                    || w.doors().stream().anyMatch(x -> !x.ok()) || !w.unroutable().isEmpty()) {
                return true;
            }
        }
        return !audit.clean() || !replay.identical();
    }

    static String table(List<ChaosRun.Window> windows, ChaosLedger ledger) {
        StringBuilder b = new StringBuilder();
        b.append("| fault | requests | client errors (by status) | in flight at the fault | in the log | one outcome | lost | doubled "
                + "| acknowledged facts missing | push failures | pages held after | hung | not routed to after | ready again (s) | caught requests answered within (s) "
                + "| served again after (s) | after the heal (s) | slowest answer (s) |\n");
        b.append("| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |\n");
        for (int i = 0; i < windows.size(); i++) {
            ChaosRun.Window w = windows.get(i);
            ChaosLedger.Counts c = ledger.window(i);
            String errs = w.errors() == 0 ? "0" : w.errors() + " (" + w.errorsByStatus().entrySet().stream()
                    .map(e -> (e.getKey() == 0 ? "no answer" : e.getKey().toString()) + ": " + e.getValue()).collect(Collectors.joining(", ")) + ")";
            b.append(String.format(Locale.ROOT, "| %s | %d | %s | %d | %d | %d | %d | %d | %d of %d | %d | %d | %d | %s | %s | %.1f | %.1f | %.1f | %.2f |%n",
                    w.fault().label(), w.sent().size(), errs, w.inFlightAtFault(), c.known(), c.oneOutcome(), c.lost(), c.doubled(),
                    ledger.acknowledgedMissing(w.answeredOnTransferredKv()).size(), w.answeredOnTransferredKv().size(), c.pushFailed(),
                    w.leakedPages(), w.hung(), w.unroutable().isEmpty() ? "—" : String.join(", ", w.unroutable()),
                    Double.isNaN(w.readySeconds()) ? "—" : String.format(Locale.ROOT, "%.1f", w.readySeconds()), w.caughtSeconds(),
                    w.recoverySeconds(), w.servedAfterHealSeconds(), w.worstSeconds()));
        }
        return b.toString();
    }

    static String verdict(List<ChaosRun.Window> windows, ChaosLedger ledger, AuditReport audit, ReplayReport replay) {
        int lost = 0;
        int doubled = 0;
        long leaked = 0;
        int hung = 0;
        long requests = 0;
        long errors = 0;
        for (int i = 0; i < windows.size(); i++) {
            ChaosLedger.Counts c = ledger.window(i);
            lost += c.lost();
            doubled += c.doubled();
            leaked += windows.get(i).leakedPages();
            hung += windows.get(i).hung();
            requests += windows.get(i).sent().size();
            errors += windows.get(i).errors();
        }
        return String.format(Locale.ROOT, "%d requests, %d client errors; %d lost, %d doubled, %d pages leaked, %d hung; audit %s (%d records, %d"
                        + " violations), replay %s", requests, errors, lost, doubled, leaked, hung, audit.clean() ? "clean" : "NOT CLEAN",
                audit.recordCount(), audit.violationCount(), replay.identical() ? "identical" : "DIFFERENT");
    }

    private String markdown(String table, String verdict) {
        return "# Chaos: components killed and hung under load\n\nMeasured " + LocalDate.now() + " with `./orbitkv-pd chaos"
                + (this.faults != null ? " --fault ..." : schedule.equals("full") ? "" : " --schedule " + schedule) + "` on this machine ("
                + Runtime.getRuntime().availableProcessors() + " cores): " + engines + " prefill + " + engines + " decode engines (simulated, tiny"
                + " preset; " + (pythonEngines.contains("none") ? "all Java" : String.join(", ", pythonEngines) + " the Python engine on its worker's"
                + " engine API, the others Java") + ") with their tcp workers, " + deciders + " decider instance(s)" + (deciders > 1 ? " (2 s sessions, a standby replica each,"
                + " 3 s transaction timeout: docs/decider.md, \"Restart and failover\")" : "") + ", " + proxies + " proxies (the load spread over"
                + " them round-robin; a refused connection goes to the next, as a load balancer does), " + (brokerNodes == 1 ? "one embedded broker"
                : "an embedded KRaft cluster of " + brokerNodes + " nodes, topics replicated on " + Math.min(3, brokerNodes)) + "; " + rate + " requests/s through the proxies (streaming, 8 tokens each); each fault: " + before + " of load, the"
                + " fault (a killed component restarted from its config after " + down + ", a hung one let go on after " + down + "), " + after
                +  " more load, then the load stops and the run waits for every answer and for every engine to hold no page. Before the"
                + " first fault, " + warmup + " of load with no fault (not reported): the faults meet a warm pipeline.\n\n"
                + "Columns: *in flight at the fault* are the requests sent before the fault and not yet answered then; *in the log* are the"
                + " requests the log knows of (any fact), each of which must end in exactly one outcome; *pages held after* are blocks"
                + " still held on the engines once the load stopped and twice the lease plus 15 s passed (a release waits up to twice the lease for an unreported attempt); *not routed to after* are engines"
                + " some proxy still did not route to 15 s after the window (missing from its engine list or marked down); *ready again* is from the restart (or"
                + " `kill -CONT`) to the component's health check answering ready; *served again after* is from the fault (*after the heal*: from"
                + " the heal, or the component back) to the first request after which every request was answered; *caught requests answered"
                + " within* is the longest any request caught in the fault (sent before the heal, not answered before the fault) waited from"
                + " the fault (or its sending) to its answer, whatever it was; *acknowledged facts missing* counts, of the answers decoded on"
                + " transferred KV, those whose admission, prefill report or decode-ready fact (each acknowledged to its writer and read by the"
                + " decider) is not in the log after the run (Jepsen's lost-write check); *push failures* are requests with a `TransferFailed`"
                + " fact (a push tried again or given up).\n\n" + table + "\n" + verdict + "\n";
    }

    private static String esc(String s) {
        return s.replace("\\", "\\\\").replace("\"", "\\\"").replaceAll("[\\x00-\\x1f]", " ");
    }

    private static String json(List<ChaosRun.Window> windows, ChaosLedger ledger, AuditReport audit, ReplayReport replay) {
        StringBuilder j = new StringBuilder("{\"faults\":[");
        for (int i = 0; i < windows.size(); i++) {
            ChaosRun.Window w = windows.get(i);
            ChaosLedger.Counts c = ledger.window(i);
            if (i > 0) {
                j.append(',');
            }
            j.append(String.format(Locale.ROOT, "{\"fault\":\"%s\",\"requests\":%d,\"client_errors\":%d,\"errors_by_status\":{%s},"
                            + "\"in_flight_at_fault\":%d,\"known\":%d,\"admitted\":%d,\"one_outcome\":%d,\"lost\":%d,\"doubled\":%d,\"pages_held_after\":%d,"
                            + "\"hung\":%d,\"not_routed_to\":%d,\"ready_s\":%s,\"served_again_after_s\":%.2f,\"served_again_after_heal_s\":%.2f,"
                            + "\"caught_answered_within_s\":%.2f,\"acknowledged_missing\":%d,\"answered_on_transferred_kv\":%d,\"push_failed\":%d,"
                            + "\"slowest_answer_s\":%.3f}", w.fault().label(), w.sent().size(), w.errors(),
                    w.errorsByStatus().entrySet().stream().map(e -> "\"" + e.getKey() + "\":" + e.getValue()).collect(Collectors.joining(",")),
                    w.inFlightAtFault(), c.known(), c.admitted(), c.oneOutcome(), c.lost(), c.doubled(), w.leakedPages(), w.hung(), w.unroutable().size(),
                    Double.isNaN(w.readySeconds()) ? "null" : String.format(Locale.ROOT, "%.2f", w.readySeconds()), w.recoverySeconds(),
                    w.servedAfterHealSeconds(), w.caughtSeconds(), ledger.acknowledgedMissing(w.answeredOnTransferredKv()).size(),
                    w.answeredOnTransferredKv().size(), c.pushFailed(), w.worstSeconds()));
        }
        j.append("],\"hostile\":[");
        List<ChaosHostile.Door> doors = windows.stream().flatMap(w -> w.doors().stream()).toList();
        for (int i = 0; i < doors.size(); i++) {
            ChaosHostile.Door d = doors.get(i);
            j.append(i > 0 ? "," : "").append("{\"door\":\"").append(esc(d.door())).append("\",\"input\":\"").append(esc(d.input()))
                    .append("\",\"expected\":\"").append(esc(d.expected())).append("\",\"got\":\"").append(esc(d.got())).append("\",\"ok\":")
                    .append(d.ok()).append('}');
        }
        j.append(String.format(Locale.ROOT, "],\"audit_clean\":%b,\"audit_violations\":%d,\"replay_identical\":%b,\"failed\":%b}%n", audit.clean(),
                audit.violationCount(), replay.identical(), failed(windows, ledger, audit, replay)));
        return j.toString();
    }
}
