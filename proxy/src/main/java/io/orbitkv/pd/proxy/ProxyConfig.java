package io.orbitkv.pd.proxy;

import static io.orbitkv.pd.schemas.config.ConfigProps.requirePort;
import static io.orbitkv.pd.schemas.config.ConfigProps.requirePositive;
import static io.orbitkv.pd.schemas.config.ConfigProps.requireRange;

import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.proxy.routing.EngineInfo;
import io.orbitkv.pd.proxy.routing.RoutingPolicy;
import io.orbitkv.pd.schemas.SerdeConfig;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.schemas.config.ConfigProps;
import java.net.URI;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

/**
 * How the proxy runs ({@code ./orbitkv-pd proxy --config FILE}); every key and its default is in
 * {@code docs/proxy.md}. Errors name the key.
 *
 * @param bootstrapServers Kafka ({@code bootstrap.servers}, required: admissions and cancels are facts)
 * @param proxyId          name in facts and logs ({@code proxy.id})
 * @param httpHost         bind address ({@code proxy.http.host})
 * @param httpPort         port, 0 for any ({@code proxy.http.port})
 * @param eventLoops       Vert.x event loops serving HTTP ({@code proxy.event-loops})
 * @param deciderUrls      the decider instances' query URLs for the engine list and load, asked in turn when one does not
 *                         answer; empty for none ({@code proxy.decider.url}, comma-separated)
 * @param staticEngines    engines named in the config ({@code proxy.engines}: {@code id@role=url,...}), used with or
 *                         instead of the decider's list
 * @param refresh          how often the engine list is refreshed ({@code proxy.engines.refresh})
 * @param routing          {@code round_robin} or {@code least_in_flight} ({@code proxy.routing})
 * @param maxBodyBytes     largest request body ({@code proxy.max-body-bytes}; larger: 413)
 * @param maxPromptChars   longest prompt ({@code proxy.max-prompt-chars}; longer: 400)
 * @param maxTokens        largest {@code max_tokens} ({@code proxy.max-tokens}; larger: 400)
 * @param requestTimeout   a request not answered by then is cancelled and gets 504 ({@code proxy.timeout.request})
 * @param connectTimeout   connecting to an engine ({@code proxy.timeout.connect})
 * @param fallbackRecompute admit requests with failure policy RECOMPUTE: when the prefill fails, the decode engine
 *                         computes the prompt itself ({@code proxy.fallback.recompute})
 * @param model            the model name served, or null for any ({@code proxy.model}; another: 404)
 * @param probe            how often each engine's {@code /health} is checked ({@code proxy.engines.probe}); 0 turns the checks off
 * @param probeTimeout     a check not answered within this marks the engine down ({@code proxy.engines.probe-timeout})
 * @param redispatch       how many times a request that failed before its answer started is sent again to other engines
 *                         under a new request id ({@code proxy.redispatch.max}; 0: never)
 * @param clientIdleTimeout a client connection with no request in progress (just opened, between keep-alive requests, or
 *                         stalled inside a request head) is closed after this ({@code proxy.timeout.client-idle})
 * @param clientBodyTimeout a request body not complete within this of its head: 408, connection closed
 *                         ({@code proxy.timeout.client-body})
 * @param streamIdle       an answer that has started streaming and then sends nothing for this long is broken off and the
 *                         request cancelled ({@code proxy.timeout.stream-idle}): a decode engine streams a token per step,
 *                         so silence mid-stream is a dead or partitioned engine, not a slow one
 * @param topics           topic names (must match the other components')
 * @param serde            wire format of the events
 * @param kafkaOverrides   extra producer properties ({@code kafka.*})
 * @param apiKeys          who may call {@code /v1/*}, each at a rate of its own ({@code proxy.auth.keys-file}); null: anyone
 * @param kvIndex          keep the engines' KV index from {@code orbitkv.kv-events} ({@code proxy.kv-index.enabled}; docs/routing.md)
 * @param prefix           how {@code proxy.routing=prefix_aware} hashes prompts and weighs cache against load
 */
public record ProxyConfig(String bootstrapServers, String proxyId, String httpHost, int httpPort, int eventLoops, List<URI> deciderUrls,
                          List<EngineInfo> staticEngines, Duration refresh, String routing, int maxBodyBytes, int maxPromptChars, int maxTokens,
                          Duration requestTimeout, Duration connectTimeout, boolean fallbackRecompute, String model, Duration probe,
                          Duration probeTimeout, int redispatch, Duration clientIdleTimeout, Duration clientBodyTimeout, Duration streamIdle, TopicsConfig topics, SerdeConfig serde, Map<String, Object> kafkaOverrides,
                          ApiKeys apiKeys, boolean kvIndex, PrefixRouting prefix) {

    /**
     * Prefix-aware routing: prompts hashed as the engines hash their blocks ({@code proxy.kv-index.seed}, the engines'
     * {@code engine.prefix-cache.seed}; {@code proxy.kv-index.block-tokens}, their block size), cache against load
     * ({@code proxy.routing.prefix.cache-weight}, {@code .load-weight}).
     */
    public record PrefixRouting(String seed, int blockTokens, io.orbitkv.pd.proxy.routing.PrefixScore.Weights weights, boolean localPrefill,
                                int localMaxUncachedTokens, double localMinCachedShare) {
        public PrefixRouting {
            if (blockTokens < 1) {
                throw new IllegalArgumentException("proxy.kv-index.block-tokens: must be >= 1, got " + blockTokens);
            }
            if (localMaxUncachedTokens < 0) {
                throw new IllegalArgumentException("proxy.routing.local-prefill.max-uncached-tokens: must be >= 0, got " + localMaxUncachedTokens);
            }
            if (!(localMinCachedShare > 0) || localMinCachedShare > 1) {
                throw new IllegalArgumentException("proxy.routing.local-prefill.min-cached-share: must be in (0, 1], got " + localMinCachedShare);
            }
        }

        /**
         * Conditional disaggregation: prefill on the decode engine itself (no handoff) when it already holds
         * {@code decodeCachedBlocks} of the prompt's {@code promptBlocks} full blocks ({@code blockSize} tokens each) and what
         * is left to compute is short (llm-d's {@code nonCachedTokens}) or most of the prompt is there (Dynamo's 0.7 of the
         * raw prompt). The rule that fires — {@code local_prefill_uncached}, {@code local_prefill_share} — or null (P/D).
         */
        public String localRule(int promptTokens, int promptBlocks, int decodeCachedBlocks, int blockSize) {
            if (!localPrefill || promptBlocks == 0) {
                return null;
            }
            if (promptTokens - decodeCachedBlocks * blockSize <= localMaxUncachedTokens) {
                return "local_prefill_uncached";
            }
            return (double) decodeCachedBlocks / promptBlocks >= localMinCachedShare ? "local_prefill_share" : null;
        }
    }


    public ProxyConfig {
        if (bootstrapServers == null || bootstrapServers.isBlank()) {
            throw new IllegalArgumentException("bootstrap.servers: required (the proxy reports admissions and cancels to Kafka)");
        }
        if (proxyId == null || !proxyId.matches("[A-Za-z0-9._:-]+")) {
            throw new IllegalArgumentException("proxy.id: letters, digits, '.', '_', ':' and '-' only, got " + proxyId);
        }
        requirePort("proxy.http.port", httpPort, false);
        requireRange("proxy.event-loops", eventLoops, 1, 64);
        requireRange("proxy.max-body-bytes", maxBodyBytes, 1024, 1 << 30);
        requireRange("proxy.max-prompt-chars", maxPromptChars, 1, Integer.MAX_VALUE);
        requireRange("proxy.max-tokens", maxTokens, 1, 1_000_000);
        requirePositive("proxy.timeout.stream-idle", streamIdle);
        requirePositive("proxy.engines.refresh", refresh);
        requirePositive("proxy.timeout.request", requestTimeout);
        requirePositive("proxy.timeout.connect", connectTimeout);
        if (probe == null || probe.isNegative()) {
            throw new IllegalArgumentException("proxy.engines.probe: must be 0 (off) or positive, got " + probe);
        }
        requirePositive("proxy.engines.probe-timeout", probeTimeout);
        requireRange("proxy.redispatch.max", redispatch, 0, 8);
        requirePositive("proxy.timeout.client-idle", clientIdleTimeout);
        requirePositive("proxy.timeout.client-body", clientBodyTimeout);
        RoutingPolicy.named(routing);
        deciderUrls = List.copyOf(deciderUrls);
        if (deciderUrls.isEmpty() && staticEngines.isEmpty()) {
            throw new IllegalArgumentException("proxy.decider.url / proxy.engines: the proxy needs the decider's URL (engines and their load)"
                    + " or a static engine list (id@role=url,...)");
        }
        staticEngines = List.copyOf(staticEngines);
        kafkaOverrides = Map.copyOf(kafkaOverrides);
    }

    public static ProxyConfig from(ConfigProps p) {
        String decider = p.string("proxy.decider.url", "http://127.0.0.1:7070");
        List<URI> deciderUris = new ArrayList<>();
        for (String one : decider.split(",")) {
            String u = one.strip();
            if (u.isEmpty()) {
                continue;
            }
            try {
                URI uri = URI.create(u);
                if (uri.getHost() == null || uri.getScheme() == null || !uri.getScheme().startsWith("http")) {
                    throw new IllegalArgumentException("not an http URL");
                }
                deciderUris.add(uri);
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("proxy.decider.url: must be http URLs like http://127.0.0.1:7070 (comma-separated for several"
                        + " decider instances), got '" + u + "'");
            }
        }
        String model = p.string("proxy.model", "");
        return new ProxyConfig(p.required("bootstrap.servers"), p.string("proxy.id", "proxy-1"), p.string("proxy.http.host", "127.0.0.1"),
                p.integer("proxy.http.port", 8000), p.integer("proxy.event-loops", 1), deciderUris, parseEngines(p.string("proxy.engines", "")),
                p.duration("proxy.engines.refresh", Duration.ofSeconds(1)), p.string("proxy.routing", "least_in_flight"),
                p.integer("proxy.max-body-bytes", 4 << 20), p.integer("proxy.max-prompt-chars", 400_000), p.integer("proxy.max-tokens", 4096),
                p.duration("proxy.timeout.request", Duration.ofSeconds(120)), p.duration("proxy.timeout.connect", Duration.ofSeconds(2)),
                p.bool("proxy.fallback.recompute", false), model.isEmpty() ? null : model, p.duration("proxy.engines.probe", Duration.ofMillis(500)),
                p.duration("proxy.engines.probe-timeout", Duration.ofSeconds(1)), p.integer("proxy.redispatch.max", 2),
                p.duration("proxy.timeout.client-idle", Duration.ofSeconds(30)), p.duration("proxy.timeout.client-body", Duration.ofSeconds(30)),
                p.duration("proxy.timeout.stream-idle", Duration.ofSeconds(10)), p.topics(), p.serde(),
                p.withPrefix("kafka."), keys(p.string("proxy.auth.keys-file", "")), p.bool("proxy.kv-index.enabled", true),
                new PrefixRouting(p.string("proxy.kv-index.seed", "orbitkv"), p.integer("proxy.kv-index.block-tokens", 16),
                        new io.orbitkv.pd.proxy.routing.PrefixScore.Weights(number(p, "proxy.routing.prefix.cache-weight", 1.0),
                                number(p, "proxy.routing.prefix.load-weight", 1.0)), p.bool("proxy.routing.local-prefill", false),
                        p.integer("proxy.routing.local-prefill.max-uncached-tokens", 256), number(p, "proxy.routing.local-prefill.min-cached-share", 0.7)));
    }

    private static double number(ConfigProps p, String key, double def) {
        String v = p.string(key, null);
        try {
            return v == null ? def : Double.parseDouble(v.trim());
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(key + ": must be a number, got '" + v + "'");
        }
    }

    private static ApiKeys keys(String file) {
        return file.isEmpty() ? null : ApiKeys.load(java.nio.file.Path.of(file));
    }

    /** {@code id@role=url,...}, e.g. {@code prefill-0@prefill=http://10.0.0.5:8100}. */
    public static List<EngineInfo> parseEngines(String spec) {
        List<EngineInfo> out = new ArrayList<>();
        for (String item : spec.split(",")) {
            String s = item.strip();
            if (s.isEmpty()) {
                continue;
            }
            int at = s.indexOf('@');
            int eq = s.indexOf('=');
            if (at < 1 || eq < at + 2 || eq == s.length() - 1) {
                throw new IllegalArgumentException("proxy.engines: each entry is id@role=url (role prefill, decode or both), got '" + s + "'");
            }
            EngineRole role;
            try {
                role = EngineRole.valueOf(s.substring(at + 1, eq).toUpperCase());
            } catch (IllegalArgumentException e) {
                throw new IllegalArgumentException("proxy.engines: role must be prefill, decode or both in '" + s + "'");
            }
            String url = s.substring(eq + 1);
            if (!url.startsWith("http://") && !url.startsWith("https://")) {
                throw new IllegalArgumentException("proxy.engines: url must start with http:// in '" + s + "'");
            }
            out.add(new EngineInfo(s.substring(0, at), role, url, 0));
        }
        return out;
    }


}
