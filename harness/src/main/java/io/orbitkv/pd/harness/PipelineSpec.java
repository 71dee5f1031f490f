package io.orbitkv.pd.harness;

import io.orbitkv.pd.engine.sim.ModelPreset;
import java.util.Map;
import java.util.Set;
import java.util.function.Consumer;

/**
 * What a {@link Pipeline} starts: engines and their model, how many deciders, proxies and broker nodes, Python engines,
 * a fault relay, extra settings per component. Immutable; each {@code with…} returns a changed copy.
 */
public record PipelineSpec(int prefillEngines, int decodeEngines, ModelPreset preset, int poolBlocks, double prefillMsPerToken, double decodeMsPerToken,
                   String routing, Map<String, String> decider, Map<String, String> engine, Map<String, String> worker,
                   Map<String, String> proxy, boolean dashboard, Set<String> pythonEngines, String pythonModule, boolean nodeWorker,
                   int proxies, int deciders, int brokers, String relayed, boolean engineApi, boolean netns, String link) {
    public static PipelineSpec defaults() {
        return new PipelineSpec(1, 1, ModelPreset.LLAMA_8B, 384, 0.05, 2.0, "least_in_flight", Map.of(), Map.of(), Map.of(), Map.of(), false,
                Set.of(), Pipeline.SIM_MODULE, false, 1, 1, 1, null, false, false, null);
    }

    /** Run {@code n} proxies ({@code proxy}, {@code proxy-2}, ...), each on its own port, as behind a load balancer. */
    public PipelineSpec withProxies(int n) {
        return with(b -> b.proxies = n);
    }

    /**
     * Run {@code n} decider instances ({@code decider}, {@code decider-2}, ...) sharing the work, each with a standby
     * of the other's state, set up to fail over in seconds (docs/decider.md, "Failover").
     */
    public PipelineSpec withDeciders(int n) {
        return with(b -> b.deciders = n);
    }

    /**
     * An embedded KRaft cluster of {@code n} nodes (each broker and controller) instead of one, the topics replicated
     * on all of them (at most 3): one can be killed ({@code broker-2}) with nothing lost.
     */
    public PipelineSpec withBrokers(int n) {
        return with(b -> b.brokers = n);
    }

    /**
     * Pushes to engine {@code id} cross a {@link FaultRelay} ({@link Pipeline#relay()}): its worker advertises the relay's port,
     * so the relay can cut or stall the data plane between live workers.
     */
    public PipelineSpec withRelay(String id) {
        return with(b -> b.relayed = id);
    }

    /**
     * Run these engines (by id: {@code prefill-0}, {@code decode-1}, ...) as the Python simulated engine
     * ({@code python/orbitkv_pd/sim_engine.py}) on its worker's engine API instead of the Java engine.
     */
    public PipelineSpec withPythonEngines(Set<String> ids) {
        return with(b -> b.pythonEngines = Set.copyOf(ids));
    }

    /**
     * The Python engines run this module ({@code orbitkv_pd.sim_engine} by default; {@code orbitkv_pd.real_engine}:
     * a real transformer whose KV lives in GPU memory, registered with its worker by CUDA IPC handle, no pool file).
     */
    public PipelineSpec withPythonModule(String module) {
        return with(b -> b.pythonModule = module);
    }

    /**
     * Every engine's worker in one process (the node's worker): the {@code cuda} transport copies between pools that
     * one process mapped.
     */
    public PipelineSpec withNodeWorker(boolean on) {
        return with(b -> b.nodeWorker = on);
    }

    /**
     * The Java engines join through their workers' engine API (the worker's local socket: facts and decisions pass
     * through the worker, which starts an order ahead on the engine's own prefill report and hands the decode engine
     * {@code kv_ready} as the pages land) instead of talking to Kafka themselves.
     */
    public PipelineSpec withEngineApi(boolean on) {
        return with(b -> b.engineApi = on);
    }

    /**
     * Lay the pipeline over separate network hosts ({@link NetnsHosts}): each broker node, each decider, each engine node
     * (the engine and its worker: their engine API stays a local socket), each proxy and the dashboard on a namespace
     * of its own with its own address, every listener bound and advertised there. Needs root.
     */
    public PipelineSpec withNetns(boolean on) {
        return with(b -> b.netns = on);
    }

    /** With {@link #withNetns}: every host's link limited to {@code rate} ({@code 10gbit}, {@code 500mbit}; null: the veth's own). */
    public PipelineSpec withLink(String rate) {
        if (rate != null) {
            NetnsHosts.bitsPerSecond(rate);
        }
        return with(b -> b.link = rate);
    }

    /** Whether the Python engines bring their own pool (device memory) instead of sharing a pool file. */
    boolean enginesOwnPools() {
        return !Pipeline.SIM_MODULE.equals(pythonModule);
    }

    /** Also start the dashboard (its own process, not awaited: the pipeline is ready without it). */
    public PipelineSpec withDashboard(boolean on) {
        return with(b -> b.dashboard = on);
    }

    public PipelineSpec withEngines(int prefill, int decode) {
        return with(b -> {
            b.prefillEngines = prefill;
            b.decodeEngines = decode;
        });
    }

    public PipelineSpec withModel(ModelPreset p, int blocks, double prefillMs, double decodeMs) {
        return with(b -> {
            b.preset = p;
            b.poolBlocks = blocks;
            b.prefillMsPerToken = prefillMs;
            b.decodeMsPerToken = decodeMs;
        });
    }

    public PipelineSpec withExtra(Map<String, String> deciderKeys, Map<String, String> engineKeys, Map<String, String> workerKeys,
                          Map<String, String> proxyKeys) {
        return with(b -> {
            b.decider = deciderKeys;
            b.engine = engineKeys;
            b.worker = workerKeys;
            b.proxy = proxyKeys;
        });
    }

    /** This spec with {@code change} applied to a copy of its settings. */
    private PipelineSpec with(Consumer<Changes> change) {
        Changes c = new Changes(this);
        change.accept(c);
        return c.spec();
    }

    /** The settings of a spec while one {@code with…} changes some of them. */
    private static final class Changes {
        int prefillEngines;
        int decodeEngines;
        ModelPreset preset;
        int poolBlocks;
        double prefillMsPerToken;
        double decodeMsPerToken;
        String routing;
        Map<String, String> decider;
        Map<String, String> engine;
        Map<String, String> worker;
        Map<String, String> proxy;
        boolean dashboard;
        Set<String> pythonEngines;
        String pythonModule;
        boolean nodeWorker;
        int proxies;
        int deciders;
        int brokers;
        String relayed;
        boolean engineApi;
        boolean netns;
        String link;

        Changes(PipelineSpec s) {
            prefillEngines = s.prefillEngines;
            decodeEngines = s.decodeEngines;
            preset = s.preset;
            poolBlocks = s.poolBlocks;
            prefillMsPerToken = s.prefillMsPerToken;
            decodeMsPerToken = s.decodeMsPerToken;
            routing = s.routing;
            decider = s.decider;
            engine = s.engine;
            worker = s.worker;
            proxy = s.proxy;
            dashboard = s.dashboard;
            pythonEngines = s.pythonEngines;
            pythonModule = s.pythonModule;
            nodeWorker = s.nodeWorker;
            proxies = s.proxies;
            deciders = s.deciders;
            brokers = s.brokers;
            relayed = s.relayed;
            engineApi = s.engineApi;
            netns = s.netns;
            link = s.link;
        }

        PipelineSpec spec() {
            return new PipelineSpec(prefillEngines, decodeEngines, preset, poolBlocks, prefillMsPerToken, decodeMsPerToken, routing, decider, engine, worker,
                    proxy, dashboard, pythonEngines, pythonModule, nodeWorker, proxies, deciders, brokers, relayed, engineApi, netns, link);
        }
    }
}
