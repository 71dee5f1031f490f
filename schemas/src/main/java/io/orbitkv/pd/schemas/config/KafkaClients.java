package io.orbitkv.pd.schemas.config;

import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.producer.ProducerConfig;

/**
 * Client settings shared by every component that writes facts or reads decisions: one place that says how our
 * producers and consumers are tuned, so a latency lesson is learned once.
 */
public final class KafkaClients {

    private KafkaClients() { }

    /**
     * A producer of facts: acks=all with idempotence (no duplicates or reordering on retries), and linger.ms 0 —
     * a fact is on the critical path of a handoff, so it is sent at once rather than batched. {@code overrides}
     * (the component's {@code kafka.*} keys) win.
     */
    public static Map<String, Object> factProducer(String bootstrapServers, String clientId, Map<String, Object> overrides) {
        Map<String, Object> p = new HashMap<>();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 0);
        if (clientId != null) {
            p.put(ProducerConfig.CLIENT_ID_CONFIG, clientId);
        }
        p.putAll(overrides);
        return p;
    }

    /**
     * A consumer that commits its own offsets (no auto-commit), at the given isolation level; {@code groupId} may
     * be null for an assign()-only consumer. {@code overrides} win.
     */
    public static Map<String, Object> consumer(String bootstrapServers, String clientId, String groupId, String isolationLevel,
                                               String autoOffsetReset, Map<String, Object> overrides) {
        Map<String, Object> c = new HashMap<>();
        c.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers);
        c.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, false);
        c.put(ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolationLevel);
        c.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, autoOffsetReset);
        if (clientId != null) {
            c.put(ConsumerConfig.CLIENT_ID_CONFIG, clientId);
        }
        if (groupId != null) {
            c.put(ConsumerConfig.GROUP_ID_CONFIG, groupId);
        }
        c.putAll(overrides);
        return c;
    }
}
