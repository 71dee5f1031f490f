package io.orbitkv.pd.schemas.security;

import io.orbitkv.pd.schemas.Topic;
import io.orbitkv.pd.schemas.Topics;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;

/**
 * Least-privilege ACLs for each component's principal, derived from the topic registry: who may read and write which
 * topic, which consumer groups and transactional ids each may use. The decider alone may write {@code decisions} and
 * {@code engine-commands}; workers and engines write facts and registrations and read commands; the proxy writes
 * admissions, cancels and answers; the dashboard and the log tools read. Every principal may describe every topic of
 * the registry (a component checks at start that its topics exist). Topics themselves are created by an admin.
 *
 * <p>Kafka's ACLs are per topic, not per partition: an engine's principal can read every engine's commands, so
 * one principal per role is what they can tell apart; the engine API keeps an engine to its own partition.
 *
 * @param principals the principal of each role, e.g. {@code decider → User:orbitkv-decider}
 */
public record AclPlan(Topics topics, String deciderApplicationId, String dashboardApplicationId, Map<Role, String> principals) {

    /** The components that talk to Kafka, each with a principal of its own. */
    public enum Role {
        DECIDER, WORKER, ENGINE, PROXY, DASHBOARD, LOG_TOOLS;

        /** {@code decider}, {@code log-tools}: the name in configs and in default principals. */
        public String key() {
            return name().toLowerCase(java.util.Locale.ROOT).replace('_', '-');
        }
    }

    /** The worker's consumer groups: {@code orbitkv-worker-<engine id>} (the command offsets of each engine). */
    public static final String WORKER_GROUP_PREFIX = "orbitkv-worker-";

    /** {@code User:orbitkv-<role>} for every role. */
    public static Map<Role, String> defaultPrincipals() {
        Map<Role, String> m = new LinkedHashMap<>();
        for (Role r : Role.values()) {
            m.put(r, "User:orbitkv-" + r.key());
        }
        return m;
    }

    public AclPlan {
        principals = Map.copyOf(principals);
        for (Role r : Role.values()) {
            String p = principals.get(r);
            if (p == null || !p.matches("User:[A-Za-z0-9._@-]+")) {
                throw new IllegalArgumentException("principal of " + r.key() + ": must be User:<name>, got " + p);
            }
        }
    }

    /** The bindings of every role, role by role. */
    public Map<Role, List<AclBinding>> bindings() {
        Map<Role, List<AclBinding>> all = new LinkedHashMap<>();
        for (Role r : Role.values()) {
            all.put(r, bindings(r));
        }
        return all;
    }

    /** The bindings of {@code role}. */
    public List<AclBinding> bindings(Role role) {
        Acls a = new Acls(principals.get(role));
        for (Topic<String, ?> t : topics.all()) {
            a.topic(t.name(), AclOperation.DESCRIBE);
        }
        String facts = topics.requestEvents().name();
        String engines = topics.engines().name();
        String commands = topics.engineCommands().name();
        String dead = topics.deadLetters().name();
        switch (role) {
            case DECIDER -> {
                a.topic(facts, AclOperation.READ, AclOperation.WRITE); // reads facts; writes ticks and engine-epoch facts
                a.topic(engines, AclOperation.READ);
                a.topic(topics.decisions().name(), AclOperation.WRITE);
                a.topic(commands, AclOperation.WRITE);
                a.topic(dead, AclOperation.WRITE);
                a.streamsApp(deciderApplicationId, true);
            }
            case WORKER -> {
                a.topic(commands, AclOperation.READ);
                a.topic(engines, AclOperation.READ, AclOperation.WRITE);
                a.topic(facts, AclOperation.WRITE);
                a.topic(dead, AclOperation.WRITE);
                a.topic(topics.kvEvents().name(), AclOperation.WRITE); // its engine's KV cache events (engine API)
                a.prefixed(ResourceType.GROUP, WORKER_GROUP_PREFIX, AclOperation.READ);
            }
            case ENGINE -> {
                a.topic(commands, AclOperation.READ);
                a.topic(engines, AclOperation.READ, AclOperation.WRITE);
                a.topic(facts, AclOperation.WRITE);
                a.topic(dead, AclOperation.WRITE);
            }
            case PROXY -> {
                a.topic(facts, AclOperation.WRITE);
                a.topic(topics.answers().name(), AclOperation.WRITE);
                a.topic(topics.kvEvents().name(), AclOperation.READ); // the engines' KV index (assign(), no group)
                a.topic(dead, AclOperation.WRITE); // KV cache events the index cannot use
            }
            case DASHBOARD -> {
                a.topic(topics.decisions().name(), AclOperation.READ);
                a.topic(facts, AclOperation.READ);
                a.topic(dead, AclOperation.WRITE);
                a.streamsApp(dashboardApplicationId, false);
            }
            case LOG_TOOLS -> {
                for (Topic<String, ?> t : topics.all()) {
                    a.topic(t.name(), AclOperation.READ);
                }
            }
        }
        return a.out;
    }

    /** Kafka's {@code kafka-acls} words for one binding: {@code User:x ALLOW WRITE TOPIC LITERAL orbitkv.decisions}. */
    public static String describe(AclBinding b) {
        return b.entry().principal() + " " + b.entry().permissionType() + " " + b.entry().operation() + " " + b.pattern().resourceType() + " "
                + b.pattern().patternType() + " " + b.pattern().name();
    }

    /** Collects one principal's allow-bindings from any host. */
    private static final class Acls {
        private final String principal;
        private final List<AclBinding> out = new ArrayList<>();

        Acls(String principal) {
            this.principal = principal;
        }

        void topic(String name, AclOperation... ops) {
            add(new ResourcePattern(ResourceType.TOPIC, name, PatternType.LITERAL), ops);
        }

        void prefixed(ResourceType type, String prefix, AclOperation... ops) {
            add(new ResourcePattern(type, prefix, PatternType.PREFIXED), ops);
        }

        /**
         * A Streams app's own resources: its internal topics (changelogs, repartitions: {@code <app id>-…}, created and
         * used by the app), its consumer group (the app id) and, under exactly-once, its transactional ids
         * ({@code <app id>-…}).
         */
        void streamsApp(String applicationId, boolean transactional) {
            prefixed(ResourceType.TOPIC, applicationId + "-", AclOperation.ALL);
            add(new ResourcePattern(ResourceType.GROUP, applicationId, PatternType.LITERAL), AclOperation.READ, AclOperation.DESCRIBE);
            if (transactional) {
                prefixed(ResourceType.TRANSACTIONAL_ID, applicationId, AclOperation.WRITE, AclOperation.DESCRIBE);
            }
        }

        private void add(ResourcePattern pattern, AclOperation... ops) {
            for (AclOperation op : ops) {
                AclBinding b = new AclBinding(pattern, new AccessControlEntry(principal, "*", op, AclPermissionType.ALLOW));
                if (!out.contains(b)) {
                    out.add(b);
                }
            }
        }
    }
}
