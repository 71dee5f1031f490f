package io.orbitkv.pd.schemas;

import io.orbitkv.pd.events.DeadLetter;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.KvCacheEvent;
import io.orbitkv.pd.events.RequestAnswered;
import io.orbitkv.pd.events.RequestEvent;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;

/**
 * The typed topic registry: every topic of the product, its key and value serdes and how it is created. This
 * is the only place topic names are spelled. {@code docs/topics.md} describes each one.
 */
public final class Topics {

    private final TopicsConfig config;
    private final Topic<String, EngineRegistration> engines;
    private final Topic<String, RequestEvent> requestEvents;
    private final Topic<String, Decision> decisions;
    private final Topic<String, Decision> engineCommands;
    private final Topic<String, DeadLetter> deadLetters;
    private final Topic<String, RequestAnswered> answers;
    private final Topic<String, KvCacheEvent> kvEvents;

    public Topics(TopicsConfig config, EventSerdes serdes) {
        this.config = config;
        Serde<String> key = Serdes.String();
        short rf = config.replicationFactor();
        // Every producer writes with acks=all; on three replicas or more a write is acknowledged only once two hold it, and
        // a replica that fell out of sync never becomes leader: an isolated leader with a lagging ISR cannot lose an
        // acknowledged fact (Jepsen's Kafka finding; KIP-966). One or two replicas keep writes available with one broker.
        Map<String, String> durable = Map.of("min.insync.replicas", rf >= 3 ? "2" : "1", "unclean.leader.election.enable", "false");
        Map<String, String> log = with(durable, "cleanup.policy", "delete", "retention.ms", Long.toString(config.retention().toMillis()));
        Map<String, String> compacted = with(durable, "cleanup.policy", "compact", "min.cleanable.dirty.ratio", "0.1",
                "segment.ms", Long.toString(java.time.Duration.ofHours(1).toMillis()));
        this.engines = new Topic<>(config.prefix() + "engines", "engine id", key, serdes.engineRegistration(),
                new TopicSpec(1, rf, compacted),
                "Engine registrations keyed by engine id (layout, endpoints, memory regions, instance epoch); read as a table.");
        // Facts carry the broker's clock, not their writer's: the decider's stream time (and with it every lease and timeout)
        // then cannot run ahead because one host's clock does (docs/decider.md, "Clocks").
        this.requestEvents = new Topic<>(config.prefix() + "request-events", "request id", key, serdes.requestEvent(),
                new TopicSpec(config.partitions(), rf, config.brokerTime() ? with(log, "message.timestamp.type", "LogAppendTime") : log),
                "Every fact about a request, keyed by request id: admitted, prefill, decode ready, heartbeats, transfer progress, cancels, ticks.");
        this.decisions = new Topic<>(config.prefix() + "decisions", "request id", key, serdes.decision(),
                new TopicSpec(config.partitions(), rf, log),
                "Every decision of the decider, keyed by request id: orders, aborts, releases, KV ready, outcomes, rejected inputs.");
        this.engineCommands = new Topic<>(config.prefix() + "engine-commands", "engine id", key, serdes.decision(),
                new TopicSpec(config.partitions(), rf, log),
                "The decisions an engine or its transfer worker must act on, keyed by engine id so each worker reads one partition.");
        this.deadLetters = new Topic<>(config.prefix() + "dead-letters", "original key", key, serdes.deadLetter(),
                new TopicSpec(1, rf, log),
                "Records any component refused, with the original bytes, where they came from and why.");
        this.answers = new Topic<>(config.prefix() + "answers", "request id", key, serdes.requestAnswered(),
                new TopicSpec(config.partitions(), rf, log),
                "What each client got from the proxy (status, route, TTFT, handoff), keyed by request id; observations, not read by the decider.");
        // Keyed by engine: one engine's stored / removed / cleared stay in order, and an index partitioned like the topic
        // holds each engine whole. Deleted by age like the other logs: an index rebuilt from it sees what is still cached
        // only if blocks are re-reported within the retention (engines report a cache's content again after a restart).
        this.kvEvents = new Topic<>(config.prefix() + "kv-events", "engine id", key, serdes.kvCacheEvent(),
                new TopicSpec(config.partitions(), rf, log),
                "Every engine's KV cache events (blocks stored, removed, all cleared), keyed by engine id: what a prefix-aware router indexes.");
    }


    private static Map<String, String> with(Map<String, String> base, String... kv) {
        Map<String, String> m = new java.util.TreeMap<>(base);
        for (int i = 0; i < kv.length; i += 2) {
            m.put(kv[i], kv[i + 1]);
        }
        return Map.copyOf(m);
    }

    public TopicsConfig config() {
        return config;
    }

    public Topic<String, EngineRegistration> engines() {
        return engines;
    }

    public Topic<String, RequestEvent> requestEvents() {
        return requestEvents;
    }

    public Topic<String, Decision> decisions() {
        return decisions;
    }

    public Topic<String, Decision> engineCommands() {
        return engineCommands;
    }

    public Topic<String, DeadLetter> deadLetters() {
        return deadLetters;
    }

    public Topic<String, RequestAnswered> answers() {
        return answers;
    }

    public Topic<String, KvCacheEvent> kvEvents() {
        return kvEvents;
    }

    /** Every topic, in a stable order. */
    public List<Topic<String, ?>> all() {
        return List.of(engines, requestEvents, decisions, engineCommands, deadLetters, answers, kvEvents);
    }
}
