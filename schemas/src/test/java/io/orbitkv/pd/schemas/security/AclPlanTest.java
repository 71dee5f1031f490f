package io.orbitkv.pd.schemas.security;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.Topic;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.schemas.security.AclPlan.Role;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourceType;
import org.junit.jupiter.api.Test;

class AclPlanTest {

    private final Topics topics = new Topics(new TopicsConfig("t.", 3, (short) 1, Duration.ofHours(1)), EventSerdes.embedded());
    private final AclPlan plan = new AclPlan(topics, "dec", "dash", AclPlan.defaultPrincipals());

    private boolean allows(Role role, String topic, AclOperation op) {
        return plan.bindings(role).stream().anyMatch(b -> b.pattern().resourceType() == ResourceType.TOPIC
                && b.pattern().patternType() == PatternType.LITERAL && b.pattern().name().equals(topic) && b.entry().operation() == op);
    }

    @Test
    void theDeciderAloneWritesDecisionsAndCommands() {
        for (String topic : List.of(topics.decisions().name(), topics.engineCommands().name())) {
            for (Role r : Role.values()) {
                assertThat(allows(r, topic, AclOperation.WRITE)).as("%s writes %s", r, topic).isEqualTo(r == Role.DECIDER);
            }
        }
    }

    @Test
    void everyRoleDescribesEveryTopicAndOnlyTheLogToolsReadThemAll() {
        for (Role r : Role.values()) {
            for (Topic<String, ?> t : topics.all()) {
                assertThat(allows(r, t.name(), AclOperation.DESCRIBE)).as("%s describes %s", r, t.name()).isTrue();
            }
        }
        assertThat(topics.all()).allSatisfy(t -> assertThat(allows(Role.LOG_TOOLS, t.name(), AclOperation.READ)).isTrue());
        assertThat(allows(Role.PROXY, topics.decisions().name(), AclOperation.READ)).isFalse();
        assertThat(plan.bindings(Role.LOG_TOOLS)).noneMatch(b -> b.entry().operation() == AclOperation.WRITE);
    }

    @Test
    void workersAndEnginesWriteFactsAndRegistrationsAndReadCommands() {
        for (Role r : List.of(Role.WORKER, Role.ENGINE)) {
            assertThat(allows(r, topics.requestEvents().name(), AclOperation.WRITE)).isTrue();
            assertThat(allows(r, topics.engines().name(), AclOperation.WRITE)).isTrue();
            assertThat(allows(r, topics.engineCommands().name(), AclOperation.READ)).isTrue();
            assertThat(allows(r, topics.decisions().name(), AclOperation.READ)).isFalse();
        }
    }

    @Test
    void theDecidersTransactionalIdsAndInternalTopicsAreItsAppsOnly() {
        List<AclBinding> d = plan.bindings(Role.DECIDER);
        assertThat(d).anyMatch(b -> b.pattern().resourceType() == ResourceType.TRANSACTIONAL_ID && b.pattern().name().equals("dec")
                && b.pattern().patternType() == PatternType.PREFIXED);
        assertThat(d).anyMatch(b -> b.pattern().resourceType() == ResourceType.TOPIC && b.pattern().name().equals("dec-")
                && b.entry().operation() == AclOperation.ALL);
        assertThat(plan.bindings(Role.DASHBOARD)).noneMatch(b -> b.pattern().resourceType() == ResourceType.TRANSACTIONAL_ID);
        assertThat(AclPlan.describe(d.get(0))).isEqualTo("User:orbitkv-decider ALLOW DESCRIBE TOPIC LITERAL " + topics.all().get(0).name());
    }

    @Test
    void aPrincipalMustBeAUser() {
        Map<Role, String> bad = new HashMap<>(AclPlan.defaultPrincipals());
        bad.put(Role.PROXY, "proxy");
        assertThatThrownBy(() -> new AclPlan(topics, "d", "e", bad)).hasMessage("principal of proxy: must be User:<name>, got proxy");
    }
}
