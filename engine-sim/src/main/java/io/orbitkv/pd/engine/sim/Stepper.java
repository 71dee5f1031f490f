package io.orbitkv.pd.engine.sim;

import io.micrometer.core.instrument.Counter;
import io.micrometer.core.instrument.DistributionSummary;
import io.micrometer.core.instrument.Gauge;
import io.micrometer.core.instrument.MeterRegistry;
import io.micrometer.core.instrument.Timer;
import io.orbitkv.pd.engine.client.cache.BlockHashes;
import io.orbitkv.pd.engine.sim.model.PrefixCache;
import io.orbitkv.pd.engine.sim.model.StepScheduler;
import io.orbitkv.pd.engine.sim.model.StepScheduler.Outcome;
import io.orbitkv.pd.engine.sim.model.StepScheduler.Plan;
import io.orbitkv.pd.engine.sim.model.StepScheduler.Role;
import io.orbitkv.pd.metrics.MetricNames;
import io.vertx.core.Context;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.LongAdder;

/**
 * The engine's model in real time: the engine model's {@link StepScheduler} runs one forward step at a time, each as long
 * as the cost model says, and hands every request the tokens its steps produced. While a step "computes" nothing runs:
 * a timer on a clock thread ends it (so one core can run many engines). Touched on the engine's event loop only.
 *
 * <p>Steps follow each other on virtual deadlines: while the engine is busy, a step starts when the previous one was due
 * to end, not when the loop got round to it, so a late wake-up does not stretch every later step (at most
 * {@link #MAX_LAG_NANOS} is made up, so a long stall does not become a burst of instant steps).
 *
 * <p>The prefix cache ({@link PrefixCache}) holds the hashes of the blocks this engine computed or received.
 */
final class Stepper implements AutoCloseable {

    /** What a request's steps produced so far: {@code produced} tokens in all; {@code finished} after the last. Event loop. */
    interface Listener {
        void tokens(int produced, boolean finished);
    }

    /**
     * How far a prefill's layers have come in the step computing it: prompt tokens {@code [0, doneTokens)} in every layer,
     * {@code [doneTokens, chunkEnd)} in layers {@code [0, layers)} of {@code numLayers}. Event loop.
     */
    interface LayerListener {
        void layers(int doneTokens, int chunkEnd, int layers);
    }

    static final long MAX_LAG_NANOS = 5_000_000;

    private final ComputeModel compute;
    private final StepScheduler scheduler;
    private final StepScheduler.Limits limits;
    private final PrefixCache cache;
    private final Context ctx;
    private final ScheduledExecutorService clock;
    private final Map<String, Entry> entries = new HashMap<>();
    private Plan inFlight;
    private long lastEndNanos;
    private volatile boolean closed;

    private final Timer stepTime;
    private final DistributionSummary stepTokens;
    private final Counter queried;
    private final Counter hits;
    private final LongAdder steps = new LongAdder();
    private final LongAdder stepNanos = new LongAdder();
    private final LongAdder tokens = new LongAdder();
    private volatile int running;
    private volatile int waiting;
    private volatile int blocksUsed;

    private static final class Entry {
        final Listener listener;
        int produced;
        /** Hears of the sequence's prefill layer by layer, or null. */
        LayerListener layers;

        Entry(Listener listener, int produced) {
            this.listener = listener;
            this.produced = produced;
        }
    }

    /** The KV's layers a step's time is split over, and how many times a prefill step reports ({@link #layerwise}). */
    private int numLayers = 1;
    private int reportsPerStep;
    private long reportIntervalNanos;

    /**
     * Prefill steps report their layers' progress {@code reportsPerStep} times each, over {@code numLayers} layers, at
     * least {@code minIntervalNanos} apart (a shorter step reports fewer, larger groups of layers).
     */
    void layerwise(int numLayers, int reportsPerStep, long minIntervalNanos) {
        this.numLayers = numLayers;
        this.reportsPerStep = reportsPerStep;
        this.reportIntervalNanos = minIntervalNanos;
    }

    Stepper(String engineId, ComputeModel compute, int numBlocks, int blockTokens, Context ctx, MeterRegistry registry) {
        this.compute = compute;
        this.limits = new StepScheduler.Limits(compute.maxBatchedTokens(), compute.maxNumSeqs(), blockTokens, numBlocks);
        this.scheduler = new StepScheduler(Role.BOTH, limits, compute.costs());
        this.cache = new PrefixCache(numBlocks);
        this.ctx = ctx;
        this.clock = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, "engine-clock-" + engineId);
            t.setDaemon(true);
            return t;
        });
        stepTime = io.orbitkv.pd.metrics.ComponentMetrics.tokenTime(registry, MetricNames.ENGINE_STEP, "an engine's forward steps (the model's time)",
                "engine", engineId);
        stepTokens = DistributionSummary.builder(MetricNames.ENGINE_STEP_TOKENS).description("tokens a step computed (decodes + prefill chunks)")
                .tag("engine", engineId).serviceLevelObjectives(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384).register(registry);
        queried = Counter.builder(MetricNames.ENGINE_PREFIX_QUERIES).description("prompt tokens looked up in the prefix cache")
                .tag("engine", engineId).register(registry);
        hits = Counter.builder(MetricNames.ENGINE_PREFIX_HITS).description("prompt tokens found in the prefix cache (no compute)")
                .tag("engine", engineId).register(registry);
        Gauge.builder(MetricNames.ENGINE_SEQS, this, s -> s.running).description("sequences").tag("engine", engineId).tag("state", "running")
                .register(registry);
        Gauge.builder(MetricNames.ENGINE_SEQS, this, s -> s.waiting).description("sequences").tag("engine", engineId).tag("state", "waiting")
                .register(registry);
        Gauge.builder(MetricNames.ENGINE_KV_USAGE, this, s -> (double) s.blocksUsed / numBlocks)
                .description("the model's KV blocks reserved by running sequences, of the pool").tag("engine", engineId).register(registry);
    }

    /** Whether a request of {@code prompt} + {@code output} tokens can ever run here (its blocks fit the whole pool). */
    boolean fits(int prompt, int output, Role part) {
        return scheduler.blocksFor(prompt, output, part) <= limits.numBlocks();
    }

    int numBlocks() {
        return limits.numBlocks();
    }

    /**
     * Queues a sequence; {@code listener} hears of each token its steps produce. A decode part starts with its first token
     * (1 produced); one that asks for a single token has nothing left to compute: false, and nothing is queued.
     */
    boolean submit(String seq, int prompt, int output, int cached, Role part, Listener listener) {
        return submit(seq, prompt, output, cached, part, listener, null);
    }

    /** As above; {@code layers} (or null) hears how far each of its prefill steps has come, from the first step on. */
    boolean submit(String seq, int prompt, int output, int cached, Role part, Listener listener, LayerListener layers) {
        if (!scheduler.add(new StepScheduler.Request(seq, prompt, output, cached), part)) {
            return false;
        }
        Entry entry = new Entry(listener, part == Role.DECODE ? 1 : 0);
        entry.layers = layers;
        entries.put(seq, entry);
        observe();
        kick();
        return true;
    }

    /** The sequence ended early (client gone, lease lost, a failure): out of the scheduler, its blocks free. */
    void abort(String seq) {
        if (seq != null && entries.remove(seq) != null) {
            scheduler.abort(seq);
            observe();
        }
    }

    /** The block hashes of a prompt, as the prefix cache keys it; empty when the cache is off (nothing to hash for). */
    List<byte[]> hashes(int[] promptTokens) {
        return compute.prefixCache() ? BlockHashes.chain(compute.prefixCacheSeed(), limits.blockTokens(), promptTokens, null) : List.of();
    }

    /** Leading blocks of a prompt ({@code hashes}) in the prefix cache, not counted as a lookup (a decode's, not a prefill's). */
    int cachedBlocks(List<byte[]> hashes) {
        return compute.prefixCache() ? cache.lookup(hashes) : 0;
    }

    /** Prompt tokens already in cached blocks ({@code hashes}: the prompt's, counted for the hit rate); 0 when the cache is off. */
    int cachedTokens(List<byte[]> hashes, int[] promptTokens) {
        if (!compute.prefixCache()) {
            return 0;
        }
        int hit = cache.lookup(hashes);
        int cached = PrefixCache.cachedTokens(hit, limits.blockTokens(), promptTokens.length);
        queried.increment(promptTokens.length);
        hits.increment(cached);
        return cached;
    }

    /**
     * The prompt's full blocks ({@code h}: its hashes) are now in this engine's KV (computed, or received by a transfer): cached. Returns what
     * changed as KV cache events (vLLM's): a {@code BlockStored} per run of blocks that were not cached, a
     * {@code BlockRemoved} for the blocks evicted to make room; empty when nothing changed or the cache is off.
     */
    List<Object> cache(List<byte[]> h, int[] promptTokens) {
        if (!compute.prefixCache()) {
            return List.of();
        }
        PrefixCache.Change c = cache.insert(h);
        List<Object> events = new java.util.ArrayList<>();
        int bs = limits.blockTokens();
        for (int k = 0; k < c.added().size(); ) {
            int first = c.added().get(k);
            int last = first;
            while (k + 1 < c.added().size() && c.added().get(k + 1) == last + 1) {
                k++;
                last++;
            }
            k++;
            List<java.nio.ByteBuffer> run = new java.util.ArrayList<>();
            List<Integer> tokens = new java.util.ArrayList<>();
            for (int i = first; i <= last; i++) {
                run.add(java.nio.ByteBuffer.wrap(h.get(i)));
                for (int t = i * bs; t < (i + 1) * bs; t++) {
                    tokens.add(promptTokens[t]);
                }
            }
            events.add(io.orbitkv.pd.events.BlockStored.newBuilder().setBlockHashes(run).setTokenIds(tokens).setBlockSize(bs)
                    .setParentBlockHash(first == 0 ? null : java.nio.ByteBuffer.wrap(h.get(first - 1))).build());
        }
        if (!c.evicted().isEmpty()) {
            events.add(io.orbitkv.pd.events.BlockRemoved.newBuilder().setBlockHashes(c.evicted().stream().map(java.nio.ByteBuffer::wrap).toList())
                    .build());
        }
        return events;
    }

    private void kick() {
        if (inFlight != null || closed) {
            return;
        }
        Plan p = scheduler.plan();
        if (p == null) {
            return;
        }
        inFlight = p;
        long now = System.nanoTime();
        long start = Math.max(lastEndNanos, now - MAX_LAG_NANOS);
        long end = start + p.durationPs() / 1000;
        lastEndNanos = end;
        long delay = end - now;
        reportLayers(p, start, end);
        if (delay <= 0) {
            ctx.runOnContext(v -> done(p));
        } else {
            clock.schedule(() -> ctx.runOnContext(v -> done(p)), delay, TimeUnit.NANOSECONDS);
        }
    }

    /**
     * The step's time split evenly over the KV's layers, as a GPU computes a forward pass layer after layer: each prefill
     * chunk of a sequence that listens reports at {@code reportsPerStep} points of the step how many layers are done, and
     * at its end that the chunk is done in all of them.
     */
    /**
     * How many progress reports a prefill step of {@code stepNanos} makes: {@code reportsPerStep} at most, never more than
     * the layers, and never closer than {@code minIntervalNanos} (0: no floor) — at least one.
     */
    static int reportGroups(int reportsPerStep, int numLayers, long stepNanos, long minIntervalNanos) {
        int groups = Math.min(reportsPerStep, numLayers);
        if (minIntervalNanos > 0) {
            groups = (int) Math.max(1, Math.min(groups, stepNanos / minIntervalNanos));
        }
        return groups;
    }

    private void reportLayers(Plan p, long startNanos, long endNanos) {
        if (reportsPerStep == 0 || numLayers < 2) {
            return;
        }
        for (StepScheduler.Chunk c : p.prefills()) {
            Entry e = entries.get(c.id());
            if (e == null || e.layers == null) {
                continue;
            }
            int groups = reportGroups(reportsPerStep, numLayers, endNanos - startNanos, reportIntervalNanos);
            for (int g = 1; g <= groups; g++) {
                int layers = numLayers * g / groups;
                int done = g == groups ? c.start() + c.tokens() : c.start();
                long at = startNanos + (endNanos - startNanos) * g / groups;
                Runnable report = () -> {
                    Entry still = entries.get(c.id());
                    if (still != null && still.layers != null) {
                        still.layers.layers(done, c.start() + c.tokens(), layers);
                    }
                };
                long wait = at - System.nanoTime();
                if (wait <= 0) {
                    ctx.runOnContext(v -> report.run());
                } else {
                    clock.schedule(() -> ctx.runOnContext(v -> report.run()), wait, TimeUnit.NANOSECONDS);
                }
            }
        }
    }

    private void done(Plan p) {
        if (closed) {
            return;
        }
        inFlight = null;
        long nanos = p.durationPs() / 1000;
        stepTime.record(nanos, TimeUnit.NANOSECONDS);
        stepTokens.record(p.tokens());
        steps.increment();
        stepNanos.add(nanos);
        tokens.add(p.tokens());
        List<Outcome> outcomes = scheduler.complete(p);
        observe();
        // per sequence, in order: FIRST_TOKEN (1 produced), TOKEN (one more), FINISHED (one more, unless it came with the
        // first token in the same step: a prefill part, or a request of one token)
        Map<String, Boolean> firstNow = new LinkedHashMap<>();
        for (Outcome o : outcomes) {
            Entry e = entries.get(o.id());
            if (e == null) {
                continue;
            }
            switch (o.kind()) {
                case FIRST_TOKEN -> {
                    e.produced = 1;
                    firstNow.put(o.id(), Boolean.TRUE);
                    e.listener.tokens(1, false);
                }
                case TOKEN -> e.listener.tokens(++e.produced, false);
                case FINISHED -> {
                    entries.remove(o.id());
                    if (firstNow.containsKey(o.id())) {
                        e.listener.tokens(e.produced, true);
                    } else {
                        e.listener.tokens(++e.produced, true);
                    }
                }
            }
        }
        kick();
    }

    private void observe() {
        running = scheduler.runningCount();
        waiting = scheduler.waitingCount();
        blocksUsed = scheduler.blocksUsed();
    }

    /** What {@code /stats} says of the model. */
    Map<String, Object> stats() {
        Map<String, Object> m = new LinkedHashMap<>(compute.describe());
        long n = steps.sum();
        m.put("steps", n);
        m.put("mean_step_ms", n == 0 ? 0.0 : stepNanos.sum() / 1e6 / n);
        m.put("mean_tokens_per_step", n == 0 ? 0.0 : (double) tokens.sum() / n);
        m.put("running", running);
        m.put("waiting", waiting);
        m.put("kv_blocks_used", blocksUsed);
        m.put("kv_blocks_total", limits.numBlocks());
        double q = queried.count();
        m.put("prefix_cache", Map.of("queried_tokens", (long) q, "hit_tokens", (long) hits.count(), "hit_rate", q == 0 ? 0.0 : hits.count() / q));
        return m;
    }

    @Override
    public void close() {
        closed = true;
        clock.shutdownNow();
    }
}
