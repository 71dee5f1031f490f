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
     * The settings of {@code overrides} (a component's {@code kafka.*} keys) that say how to reach and authenticate to
     * the cluster — {@code security.protocol}, {@code sasl.*}, {@code ssl.*}, {@code client.dns.lookup} — and that every
     * client of the component needs, its admin and helper clients too, whatever else the overrides tune.
     */
    public static Map<String, Object> connection(Map<String, ?> overrides) {
        Map<String, Object> c = new HashMap<>();
        overrides.forEach((k, v) -> {
            if (k.equals("security.protocol") || k.startsWith("sasl.") || k.startsWith("ssl.") || k.equals("client.dns.lookup")) {
                c.put(k, v);
            }
        });
        return c;
    }

    /**
     * Who a client with these settings is to the broker, for messages: {@code User:<name>} of its SASL login, or
     * {@code ANONYMOUS} without SASL (the {@code sasl.jaas.config} is never shown: it holds the password).
     */
    public static String principal(Map<String, ?> settings) {
        Object jaas = settings.get("sasl.jaas.config");
        if (jaas != null) {
            java.util.regex.Matcher m = java.util.regex.Pattern.compile("username=\"([^\"]*)\"").matcher(jaas.toString());
            if (m.find()) {
                return "User:" + m.group(1);
            }
        }
        Object protocol = settings.get("security.protocol");
        return protocol != null && protocol.toString().startsWith("SASL") ? "a SASL login without a username" : "ANONYMOUS";
    }

    /** An admin client's settings: the bootstrap servers and the {@link #connection} settings of {@code overrides}. */
    public static Map<String, Object> admin(String bootstrapServers, Map<String, ?> overrides) {
        Map<String, Object> a = connection(overrides);
        a.put("bootstrap.servers", bootstrapServers);
        return a;
    }

    /**
     * A producer of facts: acks=all with idempotence (no duplicates or reordering on retries), and linger.ms 0 —
     * a fact is on the critical path of a handoff, so it is sent at once rather than batched. {@code request.timeout.ms}
     * {@value #FACT_REQUEST_TIMEOUT_MS} instead of 30 s: a leader cut off from the other brokers (but not from this client)
     * holds a produce request it can never complete until that timeout, and only then does the producer look for the new
     * leader (elected within seconds); measured in the partitions chaos run, a 30 s request timeout left a decode's facts
     * unacknowledged past its {@code engine.kv.confirm-timeout} (6 s). A retry after the timeout is safe: the producer is
     * idempotent. {@code overrides} (the component's {@code kafka.*} keys) win.
     */
    /**
     * Consumers' {@code request.timeout.ms} instead of 30 s: a fetch sent to a partition leader that was then cut off
     * silently is only given up, and the new leader looked for, after this (fetches wait at most {@code fetch.max.wait.ms},
     * 500 ms, so a healthy broker always answers well within it). Measured in the partitions chaos run: with 30 s, the
     * requests of the partitions a minority broker led waited up to 15.5 s for their decisions.
     */
    public static final int CONSUMER_REQUEST_TIMEOUT_MS = 5000;

    /** The fact producers' {@code request.timeout.ms}. */
    public static final int FACT_REQUEST_TIMEOUT_MS = 4000;

    public static Map<String, Object> factProducer(String bootstrapServers, String clientId, Map<String, Object> overrides) {
        Map<String, Object> p = new HashMap<>();
        p.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrapServers);
        p.put(ProducerConfig.ACKS_CONFIG, "all");
        p.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true);
        p.put(ProducerConfig.LINGER_MS_CONFIG, 0);
        p.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, FACT_REQUEST_TIMEOUT_MS);
        if (clientId != null) {
            p.put(ProducerConfig.CLIENT_ID_CONFIG, clientId);
        }
        p.putAll(overrides);
        return p;
    }

    /**
     * A consumer that commits its own offsets (no auto-commit), at the given isolation level, with a 5 s request
     * timeout ({@link #CONSUMER_REQUEST_TIMEOUT_MS}); {@code groupId} may be null for an assign()-only consumer.
     * {@code overrides} win.
     */
    public static Map<String, Object> consumer(String bootstrapServers, String clientId, String groupId, String isolationLevel,
                                               String autoOffsetReset, Map<String, Object> overrides) {
        Map<String, Object> c = new HashMap<>();
        c.put(ConsumerConfig.REQUEST_TIMEOUT_MS_CONFIG, CONSUMER_REQUEST_TIMEOUT_MS);
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
