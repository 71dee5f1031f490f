package io.orbitkv.pd.bench.chaos;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.orbitkv.pd.bench.Pacer;
import io.orbitkv.pd.harness.LoadClient;
import io.orbitkv.pd.harness.NetnsHosts;
import io.orbitkv.pd.harness.Pipeline;
import java.io.IOException;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;

/**
 * One fault at a time against a live pipeline under a steady open-loop load through the proxy: a few seconds of
 * load, the fault, the component back (restarted from its config, or let go on), a few more seconds of load, then
 * the load stops and the run waits for every answer and for every engine's pages to come back. What each request
 * got is kept per fault; whether the log gave every admitted request exactly one outcome is judged afterwards from
 * the log itself ({@link ChaosLedger}).
 */
public final class ChaosRun {

    private static final ObjectMapper JSON = new ObjectMapper();

    /** What is done to the target. */
    public enum Kind {
        /** {@code kill -9}, then started again from its config after the fault's duration. */
        KILL,
        /** {@code kill -STOP} for the fault's duration, then {@code kill -CONT}: a process that hangs, sockets open. */
        HANG,
        /** The hostile-input corpus at every door ({@link ChaosHostile}); the target is {@code doors}. */
        HOSTILE,
        /**
         * That many streaming requests sent at once and abandoned 5 ms later (the target is the count): their pages must
         * come back fast enough that the good traffic running alongside is not refused for want of KV blocks.
         */
        ABANDON,
        /** Every connection through the data-plane relay closed at once, mid-push (the target is {@code relay}). */
        CUT,
        /** The data-plane relay holds every byte back for the fault's duration, connections open (target {@code relay}). */
        STALL,
        /**
         * A silent partition on the hosts rig ({@code --hosts netns}) for the fault's duration: packets between the two
         * sides vanish (blackhole routes). The target is {@code A/B}: hosts ({@code prefill-0}, {@code decider}), {@code
         * brokers} (every broker host) or {@code *} (every other host).
         */
        DROP,
        /** As {@link #DROP}, but refused at once ({@code prohibit} routes: the sender gets an error). */
        REFUSE,
        /**
         * A bridge (Jepsen's): every host but the target split into two halves (alternating within each kind: broker-1 and
         * broker-3, decider and decider-2, ...) that cannot reach each other, the target host seeing both, silently.
         */
        BRIDGE,
        /**
         * No load for the fault's duration (past twice the longest keepalive / idle timeout of the data plane), then load
         * again: every pooled connection idle that long; no push may ride a dead one (the target is {@code connections}).
         */
        IDLE,
        /** An engine node (the target: {@code decode-0}, its engine and worker) killed -9 and started again as a new instance at the same address. */
        RESTART,
        /** As {@link #RESTART}, but on a new host at a new address (the old host removed): a machine replaced. */
        REPLACE
    }

    /** One fault of the schedule: {@code kind} done to the child {@code target} for {@code duration}. */
    public record Fault(Kind kind, String target, Duration duration) {
        public String label() {
            if (kind == Kind.HOSTILE) {
                return "hostile input on every door";
            }
            if (kind == Kind.ABANDON) {
                return target + " streams abandoned at once";
            }
            if (kind == Kind.CUT) {
                return "data plane to decode-0 cut";
            }
            if (kind == Kind.STALL) {
                return "data plane to decode-0 stalled " + duration.toSeconds() + " s";
            }
            if (kind == Kind.BRIDGE) {
                return "bridge: two halves cut apart " + duration.toSeconds() + " s, " + target + " seeing both";
            }
            if (kind == Kind.IDLE) {
                return "every connection idle " + duration.toSeconds() + " s, then load";
            }
            if (kind == Kind.RESTART || kind == Kind.REPLACE) {
                return "node " + target + (kind == Kind.RESTART ? " restarted at the same address" : " replaced at a new address")
                        + " as a new instance";
            }
            if (kind == Kind.DROP || kind == Kind.REFUSE) {
                String[] ab = target.split("/", 2);
                return ab[0] + " cut from " + ("*".equals(ab[1]) ? "every other host" : ab[1]) + " " + duration.toSeconds() + " s, "
                        + (kind == Kind.DROP ? "silently (dropped)" : "loudly (refused)");
            }
            return (kind == Kind.KILL ? "kill -9 " : "hang ") + target + (kind == Kind.HANG ? " " + duration.toSeconds() + " s" : "");
        }

        /** {@code kill:decider}, {@code hang:engine-decode-0:5s}: the command line's way of naming a fault. */
        public static Fault parse(String s, Duration defaultDuration) {
            String[] p = s.split(":");
            if (p.length < 2 || p.length > 3) {
                throw new IllegalArgumentException("--fault: expected kind:target[:duration], e.g. kill:decider or hang:engine-decode-0:5s, got " + s);
            }
            Kind k;
            try {
                k = Kind.valueOf(p[0].toUpperCase(java.util.Locale.ROOT));
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("--fault: kind must be kill, hang, hostile, abandon, cut, stall, drop, refuse, bridge, idle,"
                        + " restart or replace, got " + p[0]
                        + " in " + s);
            }
            Duration d = p.length == 3 ? io.orbitkv.pd.schemas.config.ConfigProps.empty().with("d", p[2]).duration("d", defaultDuration)
                    : defaultDuration;
            if ((k == Kind.DROP || k == Kind.REFUSE) && !p[1].matches("[A-Za-z0-9-]+/([A-Za-z0-9-]+|\\*)")) {
                throw new IllegalArgumentException("--fault " + p[0] + ":A/B[:duration]: two hosts (or brokers, or * for every other), got " + p[1]);
            }
            if ((k == Kind.RESTART || k == Kind.REPLACE) && !p[1].matches("(prefill|decode)-\\d+")) {
                throw new IllegalArgumentException("--fault " + p[0] + ":NODE[:down]: an engine node such as decode-0, got " + p[1]);
            }
            return new Fault(k, p[1], d);
        }
    }

    /** One request sent during a fault's window and what the client got. */
    public record Sent(String id, long sentNanos, LoadClient.Result result) { }

    /**
     * What one fault did, as the clients saw it.
     *
     * @param readySeconds    from the restart (or the CONT) until the target answered its health check
     * @param recoverySeconds from the fault until the first request sent after which every request succeeded (0: no error)
     * @param leakedPages     blocks still held on the engines once the load stopped and the leases ran out
     * @param hung            requests with no answer within the client's read timeout
     * @param unroutable      engines the proxy did not route to (missing from its engine list) 15 s after the window: a
     *                        component back from a fault must be served again
     */
    public record Window(Fault fault, long faultNanos, long faultDoneNanos, long healNanos, List<Sent> sent, double readySeconds, double recoverySeconds,
                         long leakedPages, double pagesBackSeconds, int hung, List<ChaosHostile.Door> doors, List<String> unroutable) {
        /**
         * Requests caught in the fault: sent before it was healed (or the target back) and not answered before it began.
         * The longest of them from the fault (or its sending, if later) to its answer, whatever the answer (s): how long
         * the fault held a request before it had its outcome.
         */
        public double caughtSeconds() {
            return sent.stream().filter(s -> s.sentNanos() < healNanos && s.sentNanos() + s.result().totalNanos() > faultNanos)
                    .mapToLong(s -> s.sentNanos() + s.result().totalNanos() - Math.max(s.sentNanos(), faultNanos)).max().orElse(0) / 1e9;
        }

        /** From the heal (or the target back) to the first request sent after which every request succeeded (0: none failed after it). */
        public double servedAfterHealSeconds() {
            return Math.max(0, recoverySeconds - (healNanos - faultNanos) / 1e9);
        }

        /** The ids that served this window's answers decoded on transferred KV (for the acknowledged-write check). */
        public List<String> answeredOnTransferredKv() {
            return sent.stream().filter(s -> s.result().ok() && "decode".equals(s.result().mode()) && s.result().requestId() != null)
                    .map(s -> s.result().requestId()).toList();
        }

        /**
         * Requests on their way when the fault struck: sent before it had taken effect (a killed process gone, a hung
         * one stopped) and not answered before it began. The most a fault should cost the clients: one sent in the
         * milliseconds a SIGKILL takes reaches the dying process and is lost with it.
         */
        public long inFlightAtFault() {
            return sent.stream().filter(s -> s.sentNanos() < faultDoneNanos && s.sentNanos() + s.result().totalNanos() > faultNanos).count();
        }

        /** The slowest answer of the window (s): how long the fault held requests up (a decider's failover: decisions paused). */
        public double worstSeconds() {
            return sent.stream().filter(s -> s.result().ok()).mapToLong(s -> s.result().totalNanos()).max().orElse(0) / 1e9;
        }

        public long errors() {
            return sent.stream().filter(s -> !s.result().ok()).count();
        }

        /** Up to {@code n} distinct client-visible errors, status and message (ids and numbers blanked so alike ones count once). */
        public List<String> errorSamples(int n) {
            return sent.stream().filter(s -> !s.result().ok()).map(s -> s.result().status() + " " + String.valueOf(s.result().error())
                    .replaceAll("chaos-[0-9]+-[0-9]+(\\.r[0-9]+)?", "<id>").replaceAll("[0-9]+", "N")).distinct().limit(n).toList();
        }

        /** Client-visible errors by HTTP status (0: no response). */
        public Map<Integer, Long> errorsByStatus() {
            Map<Integer, Long> m = new TreeMap<>();
            sent.stream().filter(s -> !s.result().ok()).forEach(s -> m.merge(s.result().status(), 1L, Long::sum));
            return m;
        }
    }

    private final Pipeline pipeline;
    private final List<LoadClient> clients;
    private final double perSecond;
    private final Duration before;
    private final Duration after;
    private final Duration pagesTimeout;
    private final Consumer<String> say;
    private final HttpClient http = HttpClient.newBuilder().connectTimeout(Duration.ofSeconds(1)).build();
    private final AtomicInteger seq = new AtomicInteger();
    private java.util.function.Supplier<ChaosHostile> hostile;

    /**
     * @param clients      one per proxy: requests go round-robin, as behind a load balancer
     * @param perSecond    requests per second through the proxy while a fault's window is open
     * @param before       load before the fault
     * @param after        load after the target is back
     * @param pagesTimeout how long to wait, once the load stopped, for every engine to hold no page
     */
    public ChaosRun(Pipeline pipeline, List<LoadClient> clients, double perSecond, Duration before, Duration after, Duration pagesTimeout,
                    Consumer<String> say) {
        this.pipeline = pipeline;
        this.clients = List.copyOf(clients);
        this.perSecond = perSecond;
        this.before = before;
        this.after = after;
        this.pagesTimeout = pagesTimeout;
        this.say = say;
    }

    /** How to make the hostile-input corpus for a {@link Kind#HOSTILE} fault. */
    ChaosRun withHostile(java.util.function.Supplier<ChaosHostile> corpus) {
        this.hostile = corpus;
        return this;
    }

    /** The ids this run's requests carry: {@code chaos-<window>-<n>}. */
    public static int windowOf(String requestId) {
        String[] p = requestId.split("-");
        return p.length >= 3 && p[0].equals("chaos") && p[1].matches("\\d{1,9}") ? Integer.parseInt(p[1]) : -1; // not chaos-hostile-*
    }

    /**
     * Load with no fault for {@code d}, not reported (ids {@code chaos-warm-N}): the first fault then meets a pipeline
     * whose JIT compilers and connection pools are warm, as a production one is, not one a few seconds old.
     */
    public void warmUp(Duration d) throws InterruptedException {
        Load warm = new Load(LoadClient.workload(999L, 64, 8, 40, 8, true), i -> "chaos-warm-" + i, s -> { });
        sleep(d);
        warm.stop();
    }

    /**
     * An open-loop load through the proxies at {@link #perSecond}: the i-th request (id {@code ids(i)}) is sent at
     * start + i/rate on a thread of its own, whatever the earlier ones take; what each got goes to {@code results}.
     */
    private final class Load {
        private final java.util.concurrent.atomic.AtomicBoolean on = new java.util.concurrent.atomic.AtomicBoolean(true);
        private final List<Thread> inFlight = java.util.Collections.synchronizedList(new ArrayList<>());
        private final Thread generator;

        Load(List<LoadClient.Request> prompts, java.util.function.IntFunction<String> ids, Consumer<Sent> results) {
            generator = Thread.ofPlatform().daemon().name("chaos-load").start(() -> {
                Pacer pacer = new Pacer(perSecond);
                for (int i = 0; ; i++) {
                    pacer.awaitNext();
                    if (!on.get()) {
                        return;
                    }
                    LoadClient.Request r = prompts.get(i % prompts.size());
                    String id = ids.apply(i);
                    inFlight.add(Thread.ofVirtual().start(() -> {
                        long t = System.nanoTime();
                        results.accept(new Sent(id, t, send(id, r)));
                    }));
                }
            });
        }

        /** Sends no more and waits for every answer. */
        void stop() throws InterruptedException {
            on.set(false);
            generator.join();
            for (Thread t : List.copyOf(inFlight)) {
                t.join();
            }
        }
    }

    /** Runs one fault's window (number {@code index}) and returns what the clients saw. */
    public Window run(int index, Fault fault) throws Exception {
        if (fault.kind() == Kind.ABANDON && !fault.target().matches("\\d{1,4}")) {
            throw new IllegalArgumentException("--fault abandon:N: N streams, 1..9999, got " + fault.target());
        }
        if ((fault.kind() == Kind.CUT || fault.kind() == Kind.STALL) && pipeline.relay() == null) {
            throw new IllegalArgumentException("--fault " + fault.kind().name().toLowerCase() + ":relay: the pipeline has no data-plane relay");
        }
        if ((fault.kind() == Kind.DROP || fault.kind() == Kind.REFUSE || fault.kind() == Kind.BRIDGE || fault.kind() == Kind.REPLACE)
                && pipeline.hosts().isEmpty()) {
            throw new IllegalArgumentException("--fault " + fault.kind().name().toLowerCase() + ": partitions need separate hosts (--hosts netns)");
        }
        if (fault.kind() == Kind.KILL || fault.kind() == Kind.HANG) {
            if (!fault.target().startsWith("broker-")) {
                pipeline.child(fault.target()); // fails early on an unknown target
            }
        }
        ConcurrentLinkedQueue<Sent> sent = new ConcurrentLinkedQueue<>();
        List<LoadClient.Request> prompts = LoadClient.workload(1000L + index, 64, 8, 40, 8, true);
        Load load = new Load(prompts, i -> "chaos-" + index + "-" + seq.incrementAndGet(), sent::add);
        sleep(before);
        long faultAt = System.nanoTime();
        say.accept("  " + fault.label());
        double ready;
        long faultDone = faultAt; // when the fault had taken effect (kill: the process gone; hang: stopped)
        ChaosHostile corpus = null;
        if (fault.kind() == Kind.HOSTILE) {
            corpus = hostile.get();
            corpus.fire();
            ready = Double.NaN;
        } else if (fault.kind() == Kind.ABANDON) {
            // Not in the window's client results (these walk away on purpose); in its log ledger: each must still end once.
            int n = Integer.parseInt(fault.target());
            List<LoadClient.Request> walk = LoadClient.workload(7000L + index, n, 20, 60, 64, true);
            List<Thread> walkers = new ArrayList<>();
            for (int i = 0; i < n; i++) {
                LoadClient.Request w = walk.get(i);
                LoadClient.Request away = new LoadClient.Request(w.index(), w.chat(), w.prompt(), w.maxTokens(), true, false,
                        LoadClient.Cancel.AFTER_DELAY, 5);
                String id = "chaos-" + index + "-a" + i;
                walkers.add(Thread.ofVirtual().start(() -> send(id, away)));
            }
            for (Thread t : walkers) {
                t.join();
            }
            ready = Double.NaN;
        } else if (fault.kind() == Kind.CUT) {
            int n = pipeline.relay().cut();
            say.accept("    cut " + n + " connection(s) through the relay");
            ready = Double.NaN;
        } else if (fault.kind() == Kind.STALL) {
            pipeline.relay().stall(fault.duration().toMillis());
            sleep(fault.duration());
            ready = Double.NaN;
        } else if (fault.kind() == Kind.IDLE) {
            load.stop(); // every answer in: nothing moves for the fault's duration
            faultDone = System.nanoTime();
            sleep(fault.duration());
            load = new Load(prompts, i -> "chaos-" + index + "-" + seq.incrementAndGet(), sent::add);
            ready = Double.NaN;
        } else if (fault.kind() == Kind.RESTART || fault.kind() == Kind.REPLACE) {
            pipeline.restartNode(fault.target(), fault.kind() == Kind.REPLACE, fault.duration());
            faultDone = faultAt;
            long back = System.nanoTime();
            if (fault.kind() == Kind.REPLACE) {
                say.accept("    " + fault.target() + " now on host " + pipeline.hostOf(fault.target()) + " at "
                        + pipeline.hosts().orElseThrow().address(pipeline.hostOf(fault.target())));
            }
            ready = awaitReady("engine-" + fault.target(), back);
        } else if (fault.kind() == Kind.DROP || fault.kind() == Kind.REFUSE || fault.kind() == Kind.BRIDGE) {
            List<String[]> pairs = fault.kind() == Kind.BRIDGE ? bridge(fault.target()) : partition(fault.target());
            NetnsHosts.Cut how = fault.kind() == Kind.REFUSE ? NetnsHosts.Cut.REFUSE : NetnsHosts.Cut.DROP;
            NetnsHosts rig = pipeline.hosts().orElseThrow();
            pairs.forEach(ab -> rig.cut(ab[0], ab[1], how));
            faultDone = System.nanoTime();
            sleep(fault.duration());
            pairs.forEach(ab -> rig.heal(ab[0], ab[1]));
            ready = Double.NaN; // nothing restarts: "served again after" says when service was whole again
        } else if (fault.kind() == Kind.KILL) {
            pipeline.kill(fault.target());
            faultDone = System.nanoTime();
            sleep(fault.duration());
            long back = System.nanoTime();
            pipeline.restart(fault.target());
            // a broker node's restart returns once the node is ready
            ready = fault.target().startsWith("broker-") ? (System.nanoTime() - back) / 1e9 : awaitReady(fault.target(), back);
        } else {
            pipeline.signal(fault.target(), "STOP");
            faultDone = System.nanoTime();
            sleep(fault.duration());
            long back = System.nanoTime();
            pipeline.signal(fault.target(), "CONT");
            ready = awaitReady(fault.target(), back);
        }
        long healAt = fault.kind() == Kind.HOSTILE || fault.kind() == Kind.ABANDON || fault.kind() == Kind.CUT ? faultAt : System.nanoTime();
        sleep(after);
        List<ChaosHostile.Door> doors = corpus == null ? List.of() : corpus.verify(); // the load runs on while the checks finish
        load.stop();
        List<Sent> all = new ArrayList<>(sent);
        all.sort(java.util.Comparator.comparingLong(Sent::sentNanos));
        int hung = (int) all.stream().filter(s -> s.result().status() == 0 && s.result().error() != null
                && s.result().error().contains("SocketTimeoutException")).count();
        double recovery = 0;
        for (int i = all.size() - 1; i >= 0; i--) {
            if (!all.get(i).result().ok()) {
                recovery = i + 1 < all.size() ? (all.get(i + 1).sentNanos() - faultAt) / 1e9 : Double.NaN;
                break;
            }
        }
        List<String> unroutable = awaitRoutable(System.nanoTime() + 15_000_000_000L);
        say.accept("    in flight after the window (decider/proxy), as the first proxy routes: " + routingLoad()
                + (unroutable.isEmpty() ? "" : "; NOT ROUTED TO: " + unroutable));
        long pagesFrom = System.nanoTime();
        long leaked = awaitPagesFree(pagesFrom + pagesTimeout.toNanos());
        double pagesBack = (System.nanoTime() - pagesFrom) / 1e9;
        return new Window(fault, faultAt, faultDone, healAt, all, ready, Math.max(0, recovery), leaked, pagesBack, hung, doors, unroutable);
    }

    /**
     * The host pairs a partition's target {@code A/B} cuts: {@code brokers} is every broker host, {@code *} every other
     * host, {@code leader} the broker host leading most partitions of {@code request-events} now.
     */
    private List<String[]> partition(String target) {
        String[] ab = target.split("/", 2);
        List<String> all = pipeline.hosts().orElseThrow().hosts().stream().map(NetnsHosts.Host::name).toList();
        if (ab[0].equals("leader") || ab[1].equals("leader")) {
            String leader = requestEventsLeader();
            say.accept("    the leader of most " + requestEventsTopic + " partitions: " + leader);
            ab[ab[0].equals("leader") ? 0 : 1] = leader;
        }
        java.util.function.Function<String, List<String>> side = x -> switch (x) {
            case "brokers" -> all.stream().filter(h -> h.startsWith("broker-") && !h.equals(ab[0])).toList();
            case "*" -> all.stream().filter(h -> !h.equals(ab[0])).toList();
            default -> {
                if (!all.contains(x)) {
                    throw new IllegalArgumentException("--fault: no host called " + x + "; have " + all);
                }
                yield List.of(x);
            }
        };
        List<String[]> out = new ArrayList<>();
        for (String a : side.apply(ab[0])) {
            for (String b : side.apply(ab[1])) {
                if (!a.equals(b)) {
                    out.add(new String[] {a, b});
                }
            }
        }
        return out;
    }

    /**
     * A bridge over host {@code middle}: every other host in one of two halves (the i-th host of each kind — broker,
     * decider, prefill, decode, proxy — in half i mod 2), every pair across the halves cut; {@code middle} reaches both.
     */
    private List<String[]> bridge(String middle) {
        List<String> all = pipeline.hosts().orElseThrow().hosts().stream().map(NetnsHosts.Host::name).toList();
        if (!all.contains(middle)) {
            throw new IllegalArgumentException("--fault bridge: no host called " + middle + "; have " + all);
        }
        Map<String, Integer> seen = new TreeMap<>();
        List<String> a = new ArrayList<>();
        List<String> b = new ArrayList<>();
        for (String h : all) {
            if (h.equals(middle)) {
                continue;
            }
            int i = seen.merge(h.split("-")[0], 1, Integer::sum) - 1;
            (i % 2 == 0 ? a : b).add(h);
        }
        say.accept("    halves " + a + " | " + b + ", " + middle + " between");
        List<String[]> out = new ArrayList<>();
        for (String x : a) {
            for (String y : b) {
                out.add(new String[] {x, y});
            }
        }
        return out;
    }

    private String requestEventsTopic = "orbitkv.request-events";

    /** The request-events topic's name (for {@code leader}). */
    ChaosRun withRequestEvents(String topic) {
        this.requestEventsTopic = topic;
        return this;
    }

    /** The broker host ({@code broker-N}) leading most partitions of the request-events topic now. */
    private String requestEventsLeader() {
        try (org.apache.kafka.clients.admin.Admin admin = org.apache.kafka.clients.admin.Admin.create(Map.of(
                org.apache.kafka.clients.admin.AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, pipeline.bootstrapServers()))) {
            Map<Integer, Integer> led = new TreeMap<>();
            admin.describeTopics(List.of(requestEventsTopic)).allTopicNames().get(30, java.util.concurrent.TimeUnit.SECONDS)
                    .get(requestEventsTopic).partitions().forEach(p -> {
                        if (p.leader() != null) {
                            led.merge(p.leader().id(), 1, Integer::sum);
                        }
                    });
            int node = led.entrySet().stream().max(Map.Entry.comparingByValue()).orElseThrow(
                    () -> new IllegalStateException(requestEventsTopic + " has no partition leader")).getKey();
            return "broker-" + node;
        } catch (Exception e) {
            throw new IllegalStateException("cannot find the leader of " + requestEventsTopic + ": " + e, e);
        }
    }

    /**
     * Round-robin over the proxies; a proxy that refuses the connection gets the request's next proxy, as a load
     * balancer's health check would (nothing reached the refusing one, so the same id is safe to send again).
     */
    private LoadClient.Result send(String id, LoadClient.Request r) {
        int first = Math.floorMod(id.hashCode(), clients.size());
        LoadClient.Result res = null;
        for (int k = 0; k < clients.size(); k++) {
            res = clients.get((first + k) % clients.size()).sendAs(id, r);
            if (!(res.status() == 0 && res.error() != null && res.error().contains("ConnectException"))) {
                return res;
            }
        }
        return res;
    }

    /** Seconds from {@code since} until the target's health check answers ready (NaN: no health check; -1: not within 2 min). */
    private double awaitReady(String target, long since) throws InterruptedException {
        String url = pipeline.readyUrl(target);
        if (url == null) {
            return Double.NaN;
        }
        long deadline = since + Duration.ofMinutes(2).toNanos();
        while (System.nanoTime() < deadline) {
            try {
                HttpResponse<String> r = http.send(HttpRequest.newBuilder(URI.create(url)).timeout(Duration.ofSeconds(1)).build(),
                        HttpResponse.BodyHandlers.ofString());
                if (r.statusCode() == 200 && (!target.startsWith("decider") || r.body().contains("RUNNING"))) {
                    return (System.nanoTime() - since) / 1e9;
                }
            } catch (IOException e) {
                // not up yet
            }
            Thread.sleep(20);
        }
        return -1;
    }

    /** Waits until no engine holds a page (or the deadline); returns the pages still held then. */
    private long awaitPagesFree(long deadline) throws InterruptedException {
        while (true) {
            long held = 0;
            for (Pipeline.Engine e : pipeline.engines()) {
                held += blocksUsed(e);
            }
            if (held == 0 || System.nanoTime() > deadline) {
                return held;
            }
            Thread.sleep(200);
        }
    }

    /** Waits until every proxy lists every engine as routable; returns the engines some proxy still does not list then. */
    private List<String> awaitRoutable(long deadline) throws InterruptedException {
        while (true) {
            java.util.Set<String> missing = new java.util.TreeSet<>();
            for (String url : pipeline.proxyUrls()) {
                try {
                    JsonNode stats = getJson(url + "/stats");
                    JsonNode listed = stats.path("engines");
                    JsonNode down = stats.path("engines_down");
                    for (Pipeline.Engine e : pipeline.engines()) {
                        if (!listed.has(e.id()) || down.has(e.id())) {
                            missing.add(e.id());
                        }
                    }
                } catch (IOException e) {
                    missing.add("(proxy " + url + " not answering)");
                }
            }
            if (missing.isEmpty() || System.nanoTime() > deadline) {
                return List.copyOf(missing);
            }
            Thread.sleep(200);
        }
    }

    /** Per engine, the in-flight counts the first proxy routes on (the decider's and its own): both 0 once the load stopped. */
    private String routingLoad() {
        try {
            StringBuilder b = new StringBuilder();
            getJson(pipeline.proxyUrl() + "/stats").path("engines").properties().forEach(e -> b.append(e.getKey()).append(' ')
                    .append(e.getValue().path("decider_in_flight").asLong()).append('/').append(e.getValue().path("proxy_in_flight").asLong())
                    .append("  "));
            return b.toString().strip();
        } catch (IOException e) {
            return "(proxy not answering: " + e.getMessage() + ")";
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return "(interrupted)";
        }
    }

    private long blocksUsed(Pipeline.Engine e) {
        try {
            return getJson(e.url() + "/stats").path("blocks_used").asLong(0);
        } catch (IOException ex) {
            return 0; // an engine not answering holds nothing this run can see; its restart frees its pool
        } catch (InterruptedException ex) {
            Thread.currentThread().interrupt();
            return 0;
        }
    }

    /** A component's JSON answer (its {@code /stats}), 2 s at most. */
    private JsonNode getJson(String url) throws IOException, InterruptedException {
        return JSON.readTree(http.send(HttpRequest.newBuilder(URI.create(url)).timeout(Duration.ofSeconds(2)).build(),
                HttpResponse.BodyHandlers.ofString()).body());
    }

    private static void sleep(Duration d) throws InterruptedException {
        Thread.sleep(d.toMillis());
    }
}
