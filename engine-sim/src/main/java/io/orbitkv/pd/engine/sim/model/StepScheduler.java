package io.orbitkv.pd.engine.sim.model;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.List;
import java.util.Objects;

/**
 * One engine's forward steps, one at a time, as a continuously batching serving engine (vLLM v1) schedules them; the
 * same rules as the Python engine's {@code orbitkv_pd.engine_model} (docs/engine-model.md, "The scheduler"; the
 * cross-language golden test holds both to the same steps and times). Pure: no clock, no thread — {@link #plan} says
 * what the next step computes and how long it takes, {@link #complete} applies it; the caller owns time (a virtual
 * clock in {@link #simulate}, a timer in the engine).
 *
 * <p>A step: every running sequence that decodes adds one token; prefill chunks fill the rest of the token budget
 * ({@code maxBatchedTokens}), first for running sequences whose prompt is partly computed, then for waiting ones in
 * arrival order (FCFS) while the running set is below {@code maxNumSeqs} and the pool has the blocks the request needs
 * for its prompt and its whole output. A request that does not fit waits, and so does every one behind it: no
 * preemption (vLLM would preempt and recompute; reserving the output up front never has to). Cached prompt tokens (a
 * prefix-cache hit) cost no compute.
 */
public final class StepScheduler {

    /** Which part of a request this engine serves. */
    public enum Role {
        /** Prefill only: a sequence leaves once its prompt is computed (its first token sampled). */
        PREFILL,
        /** Decode only: sequences arrive with their prompt's KV and their first token, and decode the rest. */
        DECODE,
        /** Both: prefill, then decode on the same engine (colocated). */
        BOTH
    }

    /** Scheduler limits (vLLM's names: {@code max_num_batched_tokens}, {@code max_num_seqs}). */
    public record Limits(int maxBatchedTokens, int maxNumSeqs, int blockTokens, int numBlocks) {
        public Limits {
            if (maxBatchedTokens < 1 || maxNumSeqs < 1 || blockTokens < 1 || numBlocks < 1) {
                throw new IllegalArgumentException("engine limits must be >= 1, got " + this);
            }
        }
    }

    /** A request given to the scheduler. {@code cachedTokens}: prompt tokens already in cached blocks (no compute). */
    public record Request(String id, int promptTokens, int outputTokens, int cachedTokens) {
        public Request {
            Objects.requireNonNull(id, "id");
            if (promptTokens < 1 || outputTokens < 1 || cachedTokens < 0 || cachedTokens > promptTokens) {
                throw new IllegalArgumentException("request " + id + ": prompt >= 1, output >= 1, 0 <= cached <= prompt, got " + promptTokens
                        + "/" + outputTokens + "/" + cachedTokens);
            }
        }
    }

    /** A prefill chunk of a step: {@code tokens} prompt tokens of {@code id}, computed on top of {@code start} already there. */
    public record Chunk(String id, int start, int tokens) { }

    /** One planned step: who decodes, which chunks prefill, and how long it takes (picoseconds, from the cost model). */
    public record Plan(List<String> decodes, List<Chunk> prefills, long decodeContextTokens, long durationPs) {
        public int tokens() {
            return decodes.size() + prefills.stream().mapToInt(Chunk::tokens).sum();
        }
    }

    /** What a completed step produced for one request: its first token, another token, or its end. */
    public record Outcome(String id, Kind kind) {
        public enum Kind {
            /** The prompt is computed and the first token sampled (a prefill engine's sequence leaves here). */
            FIRST_TOKEN,
            /** One more generated token. */
            TOKEN,
            /** The last token: the sequence leaves and its blocks are free. */
            FINISHED
        }
    }

    private static final class Seq {
        final Request r;
        /** Which part of the request this engine serves: the engine's role, or the part it was added with. */
        final Role part;
        int computed;
        int generated;
        int blocks;

        Seq(Request r, Role part) {
            this.r = r;
            this.part = part;
            this.computed = r.cachedTokens();
        }

        boolean decoding() {
            return computed == r.promptTokens();
        }
    }

    private final Role role;
    private final Limits limits;
    private final CostModel costs;
    private final List<Seq> running = new ArrayList<>();
    private final Deque<Seq> waiting = new ArrayDeque<>();
    private int blocksUsed;

    public StepScheduler(Role role, Limits limits, CostModel costs) {
        this.role = Objects.requireNonNull(role, "role");
        this.limits = Objects.requireNonNull(limits, "limits");
        this.costs = Objects.requireNonNull(costs, "costs");
    }

    /**
     * Queues {@code r} (FCFS). A decode engine's request arrives with its prompt computed and its first token out: one that
     * asks for a single token has nothing left to decode and is not queued (false).
     */
    public boolean add(Request r) {
        return add(r, role);
    }

    /**
     * Queues {@code r} for {@code part} of it, whatever the engine's role: an engine that serves both runs a P/D request's
     * prefill ({@link Role#PREFILL}: it leaves after its first token), a transferred request's decode ({@link Role#DECODE})
     * and a colocated one ({@link Role#BOTH}) side by side.
     */
    public boolean add(Request r, Role part) {
        Seq s = new Seq(r, Objects.requireNonNull(part, "part"));
        if (part == Role.DECODE) {
            if (r.outputTokens() == 1) {
                return false;
            }
            s.computed = r.promptTokens();
            s.generated = 1;
        }
        waiting.addLast(s);
        return true;
    }

    /** Blocks a sequence holds while it runs: its prompt, plus its whole output unless it is only prefilled here. */
    public int blocksFor(int promptTokens, int outputTokens, Role part) {
        long tokens = promptTokens + (long) (part == Role.PREFILL ? 0 : outputTokens);
        return (int) ((tokens + limits.blockTokens() - 1) / limits.blockTokens());
    }

    private int blocksFor(Seq s) {
        return blocksFor(s.r.promptTokens(), s.r.outputTokens(), s.part);
    }

    /** Takes {@code id} out, waiting or running (its blocks freed): a request that ended early. False when not here. */
    public boolean abort(String id) {
        for (java.util.Iterator<Seq> it = waiting.iterator(); it.hasNext(); ) {
            if (it.next().r.id().equals(id)) {
                it.remove();
                return true;
            }
        }
        for (java.util.Iterator<Seq> it = running.iterator(); it.hasNext(); ) {
            Seq s = it.next();
            if (s.r.id().equals(id)) {
                it.remove();
                blocksUsed -= s.blocks;
                return true;
            }
        }
        return false;
    }

    /** The next step, or null when nothing can run (nothing queued, or the head of the queue does not fit). */
    public Plan plan() {
        int budget = limits.maxBatchedTokens();
        List<String> decodes = new ArrayList<>();
        List<Chunk> prefills = new ArrayList<>();
        long context = 0;
        for (Seq s : running) {
            if (s.decoding() && budget > 0) {
                decodes.add(s.r.id());
                context += s.r.promptTokens() + s.generated;
                budget--;
            }
        }
        for (Seq s : running) {
            if (!s.decoding() && budget > 0) {
                int n = Math.min(budget, s.r.promptTokens() - s.computed);
                prefills.add(new Chunk(s.r.id(), s.computed, n));
                budget -= n;
            }
        }
        int admitted = running.size();
        int free = limits.numBlocks() - blocksUsed;
        for (Seq s : waiting) {
            if (admitted >= limits.maxNumSeqs() || budget <= 0 || blocksFor(s) > free) {
                break;
            }
            free -= blocksFor(s);
            admitted++;
            if (s.decoding()) {
                decodes.add(s.r.id());
                context += s.r.promptTokens() + s.generated;
                budget--;
            } else {
                int n = Math.min(budget, s.r.promptTokens() - s.computed);
                prefills.add(new Chunk(s.r.id(), s.computed, n));
                budget -= n;
            }
        }
        if (decodes.isEmpty() && prefills.isEmpty()) {
            return null;
        }
        return new Plan(List.copyOf(decodes), List.copyOf(prefills), context, costs.stepPs(prefills, decodes.size(), context));
    }

    /** Applies {@code p} (the plan {@link #plan} just returned, nothing added in between): the tokens it produced. */
    public List<Outcome> complete(Plan p) {
        java.util.Set<String> decoding = new java.util.HashSet<>(p.decodes());
        java.util.Map<String, Chunk> chunks = new java.util.HashMap<>();
        p.prefills().forEach(c -> chunks.put(c.id(), c));
        while (!waiting.isEmpty() && (decoding.contains(waiting.peekFirst().r.id()) || chunks.containsKey(waiting.peekFirst().r.id()))) {
            Seq s = waiting.pollFirst();
            s.blocks = blocksFor(s);
            blocksUsed += s.blocks;
            running.add(s);
        }
        List<Outcome> out = new ArrayList<>();
        List<Seq> done = new ArrayList<>();
        for (Seq s : running) {
            if (decoding.contains(s.r.id())) {
                s.generated++;
                boolean last = s.generated >= s.r.outputTokens();
                out.add(new Outcome(s.r.id(), last ? Outcome.Kind.FINISHED : Outcome.Kind.TOKEN));
                if (last) {
                    done.add(s);
                }
                continue;
            }
            Chunk c = chunks.get(s.r.id());
            if (c != null) {
                s.computed += c.tokens();
                if (s.decoding()) {
                    s.generated = 1;
                    out.add(new Outcome(s.r.id(), Outcome.Kind.FIRST_TOKEN));
                    if (s.part == Role.PREFILL || s.r.outputTokens() == 1) {
                        out.add(new Outcome(s.r.id(), Outcome.Kind.FINISHED));
                        done.add(s);
                    }
                }
            }
        }
        for (Seq s : done) {
            running.remove(s);
            blocksUsed -= s.blocks;
        }
        return out;
    }

    public int runningCount() {
        return running.size();
    }

    public int waitingCount() {
        return waiting.size();
    }

    public int blocksUsed() {
        return blocksUsed;
    }

    public Role role() {
        return role;
    }

    /** A request arriving at {@code atUs} (virtual microseconds) for {@link #simulate}. */
    public record Arrival(long atUs, Request request) { }

    /** One simulated step: when it began, how long it took, what it computed and the engine's state before it. */
    public record SimStep(long startUs, long durationUs, List<String> decodes, List<Chunk> prefills, int running, int waiting, int blocksUsed) { }

    /** A request's token at a virtual time. */
    public record SimEvent(long atUs, String id, Outcome.Kind kind) { }

    /** Everything {@link #simulate} did. */
    public record SimResult(List<SimStep> steps, List<SimEvent> events) { }

    /**
     * Runs the engine in virtual time over {@code arrivals} (sorted by time): a step starts when the previous one ended
     * (or at the next arrival, when idle), and sees every request that arrived by its start. Step durations are the cost
     * model's picoseconds rounded down to whole microseconds, and the clock advances by those (so both languages agree).
     */
    public static SimResult simulate(Role role, Limits limits, CostModel costs, List<Arrival> arrivals) {
        StepScheduler s = new StepScheduler(role, limits, costs);
        List<SimStep> steps = new ArrayList<>();
        List<SimEvent> events = new ArrayList<>();
        long now = 0;
        int next = 0;
        while (true) {
            while (next < arrivals.size() && arrivals.get(next).atUs() <= now) {
                s.add(arrivals.get(next++).request());
            }
            Plan p = s.plan();
            if (p == null) {
                if (next >= arrivals.size()) {
                    break;
                }
                now = Math.max(now, arrivals.get(next).atUs());
                continue;
            }
            long dt = p.durationPs() / 1_000_000L;
            steps.add(new SimStep(now, dt, p.decodes(), p.prefills(), s.runningCount(), s.waitingCount(), s.blocksUsed()));
            now += dt;
            for (Outcome o : s.complete(p)) {
                events.add(new SimEvent(now, o.id(), o.kind()));
            }
        }
        return new SimResult(steps, events);
    }
}
