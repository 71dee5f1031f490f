package io.orbitkv.pd.logtools.replay;

import java.io.PrintStream;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.PriorityQueue;
import java.util.TreeMap;

/**
 * What-if routing from a recorded log ({@code replay --routing POLICY}, docs/routing.md): the recorded requests — each
 * with its prompt's block keys, tokens, arrival and duration from its routing decision and answer — replayed through one
 * prefix cache per engine of the engine's recorded size (an LRU of block keys, what the simulated engines keep), once
 * with the engines the log recorded and once with the engines {@code policy} picks; per engine the prompt tokens found
 * cached, computed and the KV bytes moved. Deterministic: a request holds its engines from its arrival for its recorded
 * duration (load), ties go to the first engine in id order, no clock and no randomness.
 */
public final class RoutingWhatIf {

    /** An engine as registered: its role, prefix cache size (its pool's blocks) and KV bytes per token. */
    public record Engine(String id, String role, int cacheBlocks, long bytesPerToken) {
        boolean prefills() {
            return role.equals("PREFILL") || role.equals("BOTH");
        }

        boolean decodes() {
            return role.equals("DECODE") || role.equals("BOTH");
        }
    }

    /**
     * A recorded request: its prompt's full blocks (keys), tokens and block size, when it arrived and how long it took, and
     * where the log says it went (prefill null: colocated or prefilled on its decode engine).
     */
    public record Request(String id, long arrivalMs, long durationMs, int promptTokens, int blockSize, long[] keys, String prefill, String decode) { }

    /** The rules of conditional disaggregation ({@code proxy.routing.local-prefill.*}); null: P/D always. */
    public record Local(int maxUncachedTokens, double minCachedShare) { }

    /** Per engine: prompt tokens looked up, found cached, computed; KV bytes received (decode side). */
    public static final class Tally {
        long lookedUp;
        long hits;
        long computed;
        long kvBytes;
        long requests;

        public double hitRate() {
            return lookedUp == 0 ? 0 : (double) hits / lookedUp;
        }
    }

    /** One replay's numbers per engine, and how many requests were prefilled on their decode engine. */
    public record Outcome(String label, Map<String, Tally> engines, long localPrefills) {
        Tally total() {
            Tally t = new Tally();
            engines.values().forEach(e -> {
                t.lookedUp += e.lookedUp;
                t.hits += e.hits;
                t.computed += e.computed;
                t.kvBytes += e.kvBytes;
                t.requests += e.requests;
            });
            return t;
        }
    }

    private RoutingWhatIf() { }

    /** What a log holds for a what-if: its routed requests and its engines. */
    public record Recorded(List<Request> requests, List<Engine> engines, long unrouted) { }

    /**
     * Reads the answers that carry a routing decision ({@code RequestAnswered.routing}) and the engines' latest
     * registrations; answers without one (colocated, or the index was off) are counted in {@code unrouted}.
     */
    public static Recorded read(io.orbitkv.pd.logtools.LogSource source, io.orbitkv.pd.schemas.EventSerdes serdes,
                                io.orbitkv.pd.logtools.Progress progress) {
        List<Request> requests = new ArrayList<>();
        Map<String, Engine> engines = new TreeMap<>();
        long[] unrouted = new long[1];
        source.read(new io.orbitkv.pd.logtools.LogSource.RecordFilter() {
            @Override
            public boolean wantsPartition(io.orbitkv.pd.logtools.TopicRole role, int partition) {
                return role == io.orbitkv.pd.logtools.TopicRole.ANSWERS || role == io.orbitkv.pd.logtools.TopicRole.ENGINES;
            }

            @Override
            public boolean wants(io.orbitkv.pd.logtools.LogRecord r) {
                return !r.streamTimeMark() && r.value() != null;
            }
        }, r -> {
            try {
                if (r.role() == io.orbitkv.pd.logtools.TopicRole.ENGINES) {
                    io.orbitkv.pd.events.EngineRegistration reg = serdes.engineRegistration().deserializer().deserialize(r.topic(), r.value());
                    if (reg != null && reg.getLayout() != null && reg.getRole() != null) {
                        io.orbitkv.pd.events.KvLayout l = reg.getLayout();
                        long perBlock = (long) l.getPageBytes() * l.getNumLayers() * (l.getKvSplit() == io.orbitkv.pd.events.KvSplit.SEPARATE ? 2 : 1);
                        engines.put(reg.getEngineId(), new Engine(reg.getEngineId(), reg.getRole().name(), l.getNumBlocks(),
                                perBlock / Math.max(1, l.getBlockSizeTokens())));
                    }
                } else {
                    io.orbitkv.pd.events.RequestAnswered a = serdes.requestAnswered().deserializer().deserialize(r.topic(), r.value());
                    if (a == null || a.getRouting() == null) {
                        unrouted[0]++;
                        return;
                    }
                    io.orbitkv.pd.events.RoutingDecision d = a.getRouting();
                    long[] keys = new long[d.getBlockKeys().size()];
                    for (int i = 0; i < keys.length; i++) {
                        keys[i] = d.getBlockKeys().get(i);
                    }
                    long took = a.getTotalUs() / 1000;
                    requests.add(new Request(a.getRequestId(), a.getAnsweredAtMs() - took, took, d.getPromptTokens(), d.getBlockSize(), keys,
                            a.getPrefillEngineId(), a.getDecodeEngineId()));
                }
            } catch (io.orbitkv.pd.schemas.EventDecodingException bad) {
                unrouted[0]++; // not a routing record this tool can read: counted, not guessed at
            }
        }, progress);
        return new Recorded(requests, List.copyOf(engines.values()), unrouted[0]);
    }

    /** An LRU of block keys of a fixed size: what one engine's prefix cache holds. */
    private static final class Cache {
        private final int capacity;
        private final LinkedHashMap<Long, Boolean> keys;

        Cache(int capacity) {
            this.capacity = Math.max(1, capacity);
            this.keys = new LinkedHashMap<>(16, 0.75f, true);
        }

        int match(long[] prompt) {
            int n = 0;
            while (n < prompt.length && keys.containsKey(prompt[n])) {
                n++;
            }
            return n;
        }

        /** The prompt computed or received here: all its blocks cached, most recent last (evicting the least recent). */
        void cache(long[] prompt) {
            for (long k : prompt) {
                keys.put(k, Boolean.TRUE);
            }
            while (keys.size() > capacity) {
                Long eldest = keys.keySet().iterator().next();
                keys.remove(eldest);
            }
        }
    }

    /** Replays {@code requests} (any order: sorted by arrival here) with the recorded engines. */
    public static Outcome recorded(List<Request> requests, List<Engine> engines) {
        return run("recorded", requests, engines, null, null);
    }

    /**
     * Replays {@code requests} with the engines {@code policy} ({@code round_robin}, {@code least_in_flight},
     * {@code prefix_aware}) picks, prefilling on the decode engine when {@code local}'s rules say (null: P/D always).
     */
    public static Outcome whatIf(String policy, Local local, List<Request> requests, List<Engine> engines) {
        if (!List.of("round_robin", "least_in_flight", "prefix_aware").contains(policy)) {
            throw new IllegalArgumentException("--routing: must be round_robin, least_in_flight or prefix_aware, got '" + policy + "'");
        }
        return run(policy + (local == null ? "" : " + local prefill"), requests, engines, policy, local);
    }

    private static Outcome run(String label, List<Request> requests, List<Engine> engines, String policy, Local local) {
        List<Request> inOrder = new ArrayList<>(requests);
        inOrder.sort(Comparator.comparingLong(Request::arrivalMs).thenComparing(Request::id));
        Map<String, Engine> byId = new TreeMap<>();
        engines.forEach(e -> byId.put(e.id(), e));
        Map<String, Cache> caches = new TreeMap<>();
        Map<String, Tally> tallies = new TreeMap<>();
        byId.values().forEach(e -> {
            caches.put(e.id(), new Cache(e.cacheBlocks()));
            tallies.put(e.id(), new Tally());
        });
        Map<String, Integer> load = new TreeMap<>();
        PriorityQueue<End> ends = new PriorityQueue<>(Comparator.comparingLong(End::atMs));
        List<Engine> prefills = byId.values().stream().filter(Engine::prefills).toList();
        List<Engine> decodes = byId.values().stream().filter(Engine::decodes).toList();
        long locals = 0;
        int rr = 0;
        for (Request r : inOrder) {
            while (!ends.isEmpty() && ends.peek().atMs() <= r.arrivalMs()) {
                ends.poll().engines().forEach(e -> load.merge(e, -1, Integer::sum));
            }
            String prefill;
            String decode;
            if (policy == null) {
                prefill = r.prefill();
                decode = r.decode();
            } else {
                boolean cacheAware = policy.equals("prefix_aware");
                decode = pick(decodes, caches, load, r, policy, local != null && cacheAware, rr);
                if (local != null && decode != null && localRule(local, r, caches.get(decode).match(r.keys()))) {
                    prefill = null;
                } else {
                    prefill = pick(prefills, caches, load, r, policy, cacheAware, rr);
                }
                rr++;
            }
            String computeOn = prefill != null ? prefill : decode;
            if (computeOn == null || !caches.containsKey(computeOn)) {
                continue; // an engine the log never registered: nothing to account it to
            }
            Cache c = caches.get(computeOn);
            long hit = Math.min((long) c.match(r.keys()) * r.blockSize(), Math.max(0, r.promptTokens() - 1));
            Tally t = tallies.get(computeOn);
            t.requests++;
            t.lookedUp += r.promptTokens();
            t.hits += hit;
            t.computed += r.promptTokens() - hit;
            c.cache(r.keys());
            if (prefill == null) {
                locals++;
            } else if (decode != null && caches.containsKey(decode)) {
                // P/D: the decode engine receives the prompt's KV (all of it: the order moves every block) and caches it
                tallies.get(decode).kvBytes += r.promptTokens() * byId.get(decode).bytesPerToken();
                caches.get(decode).cache(r.keys());
            }
            List<String> held = new ArrayList<>(2);
            for (String e : new String[] {prefill, decode}) {
                if (e != null) {
                    load.merge(e, 1, Integer::sum);
                    held.add(e);
                }
            }
            ends.add(new End(r.arrivalMs() + Math.max(0, r.durationMs()), held));
        }
        return new Outcome(label, tallies, locals);
    }

    /** When a request stops holding its engines (its load on them). */
    private record End(long atMs, List<String> engines) { }

    private static boolean localRule(Local l, Request r, int decodeCached) {
        if (r.keys().length == 0) {
            return false;
        }
        return r.promptTokens() - decodeCached * r.blockSize() <= l.maxUncachedTokens() || (double) decodeCached / r.keys().length >= l.minCachedShare();
    }

    /** The engine of {@code side} the policy picks (as the proxy does: {@code PrefixScore}, weights 1 and 1, ties to the less loaded). */
    private static String pick(List<Engine> side, Map<String, Cache> caches, Map<String, Integer> load, Request r, String policy, boolean cacheAware,
                               int rr) {
        if (side.isEmpty()) {
            return null;
        }
        if (policy.equals("round_robin")) {
            return side.get(Math.floorMod(rr, side.size())).id();
        }
        int maxLoad = 0;
        for (Engine e : side) {
            maxLoad = Math.max(maxLoad, load.getOrDefault(e.id(), 0));
        }
        String best = null;
        double bestScore = Double.NEGATIVE_INFINITY;
        int bestLoad = Integer.MAX_VALUE;
        int bestCached = Integer.MAX_VALUE;
        for (Engine e : side) {
            int l = load.getOrDefault(e.id(), 0);
            double score = cacheAware
                    ? (r.keys().length == 0 ? 0 : (double) caches.get(e.id()).match(r.keys()) / r.keys().length) - (double) l / (maxLoad + 1)
                    : -l;
            int c = cacheAware ? caches.get(e.id()).keys.size() : 0; // as the proxy: a new prompt where there is most room
            if (best == null || score > bestScore || (score == bestScore && (l < bestLoad || (l == bestLoad && c < bestCached)))) {
                best = e.id();
                bestScore = score;
                bestLoad = l;
                bestCached = c;
            }
        }
        return best;
    }

    /** The table: per engine and in total, recorded next to the what-if. */
    public static void print(PrintStream out, Outcome recorded, Outcome whatIf, int requests) {
        out.printf(Locale.ROOT, "What-if routing over %d recorded requests (prefix caches of the engines' recorded sizes; deterministic)%n", requests);
        out.printf(Locale.ROOT, "%-14s | %-40s | %-40s%n", "", recorded.label(), whatIf.label());
        out.printf(Locale.ROOT, "%-14s | %8s %9s %12s %9s | %8s %9s %12s %9s%n", "engine", "requests", "hit rate", "computed", "KV MiB",
                "requests", "hit rate", "computed", "KV MiB");
        java.util.Set<String> ids = new java.util.TreeSet<>(recorded.engines().keySet());
        ids.addAll(whatIf.engines().keySet());
        for (String id : ids) {
            row(out, id, recorded.engines().getOrDefault(id, new Tally()), whatIf.engines().getOrDefault(id, new Tally()));
        }
        row(out, "all", recorded.total(), whatIf.total());
        out.printf(Locale.ROOT, "prefilled on the decode engine: %d recorded, %d what-if%n", recorded.localPrefills(), whatIf.localPrefills());
    }

    private static void row(PrintStream out, String id, Tally a, Tally b) {
        out.printf(Locale.ROOT, "%-14s | %8d %8.1f%% %12d %9.1f | %8d %8.1f%% %12d %9.1f%n", id, a.requests, 100 * a.hitRate(), a.computed,
                a.kvBytes / 1048576.0, b.requests, 100 * b.hitRate(), b.computed, b.kvBytes / 1048576.0);
    }
}
