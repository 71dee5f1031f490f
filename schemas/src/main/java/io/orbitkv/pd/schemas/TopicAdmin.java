package io.orbitkv.pd.schemas;

import io.orbitkv.pd.schemas.config.KafkaClients;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.common.errors.AuthenticationException;
import org.apache.kafka.common.errors.AuthorizationException;
import org.apache.kafka.common.errors.TopicExistsException;

/** Creates the product's topics from their {@link TopicSpec}s. Idempotent: existing topics are left as they are. */
public final class TopicAdmin {

    private TopicAdmin() { }

    /**
     * {@link #ensureTopics(Admin, Topics)} with an admin client of {@code adminConfig}, as a component's start does it:
     * its first call to the cluster, so a failure to authenticate or a missing ACL is reported here, naming the
     * principal and the cause ({@code kafka: cannot authenticate as User:worker-0 to host:9093: ...}).
     */
    public static List<String> ensure(Map<String, Object> adminConfig, Topics topics) {
        try (Admin admin = Admin.create(adminConfig)) {
            return ensureTopics(admin, topics);
        } catch (IllegalStateException e) {
            String who = KafkaClients.principal(adminConfig);
            for (Throwable c = e; c != null; c = c.getCause() == c ? null : c.getCause()) {
                if (c instanceof AuthenticationException) {
                    throw new IllegalStateException("kafka: cannot authenticate as " + who + " to " + adminConfig.get("bootstrap.servers") + ": "
                            + withCause(c), c);
                }
                if (c instanceof AuthorizationException) {
                    throw new IllegalStateException("kafka: " + who + " is not allowed: " + c.getMessage()
                            + " (its ACLs: ./orbitkv-pd acls; topics are created by an admin: ./orbitkv-pd topics --create)", c);
                }
            }
            throw e;
        }
    }

    /** A message and, when it adds something (a TLS handshake's reason), its cause's. */
    private static String withCause(Throwable t) {
        Throwable c = t.getCause();
        return c == null || c.getMessage() == null || c.getMessage().equals(t.getMessage()) ? t.getMessage() : t.getMessage() + ": " + c.getMessage();
    }

    /**
     * Creates every topic in {@code topics} that does not exist yet, and returns once the broker serves every
     * partition of the created ones (so a producer's first write does not race the partition's creation).
     *
     * @return the names that were created by this call
     */
    public static List<String> ensureTopics(Admin admin, Topics topics) {
        try {
            Set<String> existing = admin.listTopics().names().get(30, TimeUnit.SECONDS);
            List<NewTopic> missing = new ArrayList<>();
            for (Topic<String, ?> t : topics.all()) {
                if (!existing.contains(t.name())) {
                    missing.add(new NewTopic(t.name(), t.spec().partitions(), t.spec().replicationFactor()).configs(t.spec().configs()));
                }
            }
            List<String> created = new ArrayList<>();
            var result = admin.createTopics(missing);
            for (NewTopic nt : missing) {
                try {
                    result.values().get(nt.name()).get(30, TimeUnit.SECONDS);
                    created.add(nt.name());
                } catch (ExecutionException e) {
                    if (!(e.getCause() instanceof TopicExistsException)) {
                        throw new IllegalStateException("creating topic " + nt.name() + ": " + e.getCause().getMessage(), e.getCause());
                    }
                }
            }
            awaitServed(admin, created);
            return created;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted while creating topics", e);
        } catch (ExecutionException | TimeoutException e) {
            throw new IllegalStateException("cannot list, create or reach topics: " + e.getMessage(), e);
        }
    }

    /**
     * Waits (up to 30 s) until the leader of every partition of {@code names} answers a ListOffsets request. Creation
     * returns when the controller has recorded the topic, slightly before the leader hosts its partitions; an
     * idempotent producer whose first batch meets that window (NOT_LEADER_OR_FOLLOWER) can have later batches accepted
     * first and then retry the first one forever with OutOfOrderSequence (seen with Kafka 4.4 clients), losing it.
     */
    public static void awaitServed(Admin admin, List<String> names) throws InterruptedException, ExecutionException, TimeoutException {
        if (names.isEmpty()) {
            return;
        }
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
        while (true) {
            try {
                endOffsets(admin, names);
                return;
            } catch (ExecutionException e) {
                if (!(e.getCause() instanceof org.apache.kafka.common.errors.RetriableException) || System.nanoTime() > deadline) {
                    throw e;
                }
                Thread.sleep(20); // bounded: the partitions come up within a few metadata updates
            }
        }
    }

    /**
     * The end offset of every partition of {@code names}, from each partition's leader (ListOffsets, latest); fails
     * with the broker's error when a leader does not serve its partition.
     */
    public static java.util.Map<org.apache.kafka.common.TopicPartition, Long> endOffsets(Admin admin, java.util.Collection<String> names)
            throws InterruptedException, ExecutionException, TimeoutException {
        java.util.Map<org.apache.kafka.common.TopicPartition, org.apache.kafka.clients.admin.OffsetSpec> specs = new java.util.HashMap<>();
        admin.describeTopics(names).allTopicNames().get(30, TimeUnit.SECONDS).forEach((name, d) -> d.partitions().forEach(p ->
                specs.put(new org.apache.kafka.common.TopicPartition(name, p.partition()), org.apache.kafka.clients.admin.OffsetSpec.latest())));
        java.util.Map<org.apache.kafka.common.TopicPartition, Long> end = new java.util.HashMap<>();
        admin.listOffsets(specs).all().get(30, TimeUnit.SECONDS).forEach((tp, info) -> end.put(tp, info.offset()));
        return end;
    }
}
