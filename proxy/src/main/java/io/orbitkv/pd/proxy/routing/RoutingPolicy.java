package io.orbitkv.pd.proxy.routing;

import java.util.List;
import java.util.Locale;
import java.util.Optional;
import java.util.function.ToLongFunction;

/**
 * Picks one engine among candidates for one side of a request. Implementations are thread-safe; a policy never
 * sees an empty list.
 */
public interface RoutingPolicy {

    /**
     * Which side is being chosen (policies keep separate state per side). {@code COLOCATED}: one engine does both (the
     * benchmarks' baseline, {@code x-orbitkv-route: colocated}); any engine can, whatever its P/D role, so a colocated
     * baseline runs on as many engines as the P/D layout it is compared with.
     */
    enum Side { PREFILL, DECODE, COLOCATED }

    /**
     * @param side       prefill or decode
     * @param candidates engines able to serve that side, in a stable order (by id)
     * @param localLoad  requests this proxy has in flight on an engine now
     */
    EngineInfo choose(Side side, List<EngineInfo> candidates, ToLongFunction<String> localLoad);

    /** A policy's name as {@link #named} reads it: lower case, {@code _} for {@code -}. */
    static String canonical(String name) {
        return name.toLowerCase(Locale.ROOT).replace('-', '_');
    }

    /** {@code round_robin}, {@code least_in_flight} or {@code prefix_aware}. */
    static RoutingPolicy named(String name) {
        return switch (canonical(name)) {
            case "round_robin" -> new RoundRobin();
            case "least_in_flight" -> new LeastInFlight();
            // prefix_aware: both engines by the KV index (PrefixScore, in the proxy, which knows the prompt); every request
            // the index cannot score (no token ids, no index) by load
            case "prefix_aware" -> new LeastInFlight();
            default -> throw new IllegalArgumentException("proxy.routing: must be round_robin, least_in_flight or prefix_aware, got '" + name + "'");
        };
    }

    /** Engine ids in turn, per side. */
    final class RoundRobin implements RoutingPolicy {
        private final java.util.concurrent.atomic.AtomicLong[] next = {new java.util.concurrent.atomic.AtomicLong(),
                new java.util.concurrent.atomic.AtomicLong(), new java.util.concurrent.atomic.AtomicLong()};

        @Override
        public EngineInfo choose(Side side, List<EngineInfo> candidates, ToLongFunction<String> localLoad) {
            return candidates.get((int) Math.floorMod(next[side.ordinal()].getAndIncrement(), (long) candidates.size()));
        }
    }

    /**
     * The engine with the fewest requests in flight: the larger of the decider's count (all proxies, but as of its
     * last poll) and this proxy's own live count; ties go round robin so equal engines share the load.
     */
    final class LeastInFlight implements RoutingPolicy {
        private final RoundRobin ties = new RoundRobin();

        @Override
        public EngineInfo choose(Side side, List<EngineInfo> candidates, ToLongFunction<String> localLoad) {
            long best = Long.MAX_VALUE;
            List<EngineInfo> bestOnes = new java.util.ArrayList<>();
            for (EngineInfo e : candidates) {
                long load = Math.max(e.inFlight(), localLoad.applyAsLong(e.engineId()));
                if (load < best) {
                    best = load;
                    bestOnes.clear();
                }
                if (load == best) {
                    bestOnes.add(e);
                }
            }
            return bestOnes.size() == 1 ? bestOnes.get(0) : ties.choose(side, bestOnes, localLoad);
        }
    }

    /** The candidates of a side, stable order. */
    static List<EngineInfo> candidates(List<EngineInfo> engines, Side side) {
        return engines.stream().filter(side == Side.PREFILL ? EngineInfo::canPrefill : side == Side.DECODE ? EngineInfo::canDecode : e -> true)
                .sorted(java.util.Comparator.comparing(EngineInfo::engineId)).toList();
    }

    /** Convenience for callers that may have no candidate. */
    default Optional<EngineInfo> pick(Side side, List<EngineInfo> engines, ToLongFunction<String> localLoad) {
        List<EngineInfo> c = candidates(engines, side);
        return c.isEmpty() ? Optional.empty() : Optional.of(choose(side, c, localLoad));
    }
}
