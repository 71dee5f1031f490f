package io.orbitkv.pd.broker;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.ScramCredentialInfo;
import org.apache.kafka.clients.admin.ScramMechanism;
import org.apache.kafka.clients.admin.UserScramCredentialUpsertion;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.errors.SaslAuthenticationException;
import org.apache.kafka.common.errors.SslAuthenticationException;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * A secured development cluster: SASL SCRAM-SHA-512 over TLS, the StandardAuthorizer with nothing allowed without an
 * ACL. A user with a WRITE ACL writes; a user without one is refused by the broker; a wrong password and a CA the
 * client does not trust each fail with the broker's or the TLS layer's own reason.
 */
@Timeout(180)
class SecuredKraftClusterIT {

    @Test
    void onlyWhatAnAclAllowsAndOnlyWithTheRightCredentialsAndCa(@TempDir Path dir) throws Exception {
        BrokerSecurity security = new BrokerSecurity(TlsMaterial.generate(dir.resolve("tls"), "dev-store-secret"), "admin", "admin-secret-1");
        try (KraftCluster cluster = KraftCluster.builder().nodes(1).dataDir(dir.resolve("data")).secured(security).build().start();
             Admin admin = cluster.createAdmin()) {
            admin.createTopics(List.of(new NewTopic("secured-t", 1, (short) 1))).all().get(30, TimeUnit.SECONDS);
            for (String user : List.of("alice", "bob")) {
                admin.alterUserScramCredentials(List.of(new UserScramCredentialUpsertion(user,
                        new ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192), user + "-secret"))).all().get(30, TimeUnit.SECONDS);
            }
            ResourcePattern topic = new ResourcePattern(ResourceType.TOPIC, "secured-t", PatternType.LITERAL);
            admin.createAcls(List.of(
                    new AclBinding(topic, new AccessControlEntry("User:alice", "*", AclOperation.WRITE, AclPermissionType.ALLOW)),
                    new AclBinding(topic, new AccessControlEntry("User:alice", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW))))
                    .all().get(30, TimeUnit.SECONDS);

            // alice may write (ACLs reach the authorizer through the metadata log: retried until they have)
            org.awaitility.Awaitility.await().atMost(Duration.ofSeconds(30)).ignoreExceptions()
                    .until(() -> send(cluster, security.clientConfig("alice", "alice-secret")) >= 0);
            // bob may not: the broker refuses the write, naming the topic
            assertThatThrownBy(() -> send(cluster, security.clientConfig("bob", "bob-secret")))
                    .hasCauseInstanceOf(TopicAuthorizationException.class).hasMessageContaining("secured-t");
            // a wrong password: refused at authentication
            assertThatThrownBy(() -> describe(cluster, security.clientConfig("alice", "not-her-password")))
                    .hasCauseInstanceOf(SaslAuthenticationException.class).hasMessageContaining("invalid credentials");
            // a client that trusts another CA: the TLS handshake fails before any SASL
            BrokerSecurity other = new BrokerSecurity(TlsMaterial.generate(dir.resolve("other-ca"), "dev-store-secret"), "admin", "admin-secret-1");
            assertThatThrownBy(() -> describe(cluster, other.clientConfig("alice", "alice-secret")))
                    .hasCauseInstanceOf(SslAuthenticationException.class);
            // a plaintext client gets nowhere
            assertThatThrownBy(() -> describe(cluster, Map.of("request.timeout.ms", 3000, "default.api.timeout.ms", 5000)))
                    .isInstanceOf(ExecutionException.class);
        }
    }

    private static long send(KraftCluster cluster, Map<String, Object> security) throws Exception {
        Map<String, Object> c = new HashMap<>(security);
        c.put("bootstrap.servers", cluster.bootstrapServers());
        c.put("max.block.ms", 10_000);
        c.put("delivery.timeout.ms", 10_000);
        c.put("request.timeout.ms", 5_000);
        try (KafkaProducer<String, String> p = new KafkaProducer<>(c, new StringSerializer(), new StringSerializer())) {
            return p.send(new ProducerRecord<>("secured-t", "k", "v")).get(15, TimeUnit.SECONDS).offset();
        }
    }

    private static void describe(KraftCluster cluster, Map<String, Object> security) throws Exception {
        Map<String, Object> c = new HashMap<>(security);
        c.put("bootstrap.servers", cluster.bootstrapServers());
        c.putIfAbsent("default.api.timeout.ms", 10_000);
        c.putIfAbsent("request.timeout.ms", 5_000);
        try (Admin a = Admin.create(c)) {
            a.describeCluster().clusterId().get(15, TimeUnit.SECONDS);
        }
    }

    @Test
    void theMaterialIsMadeWithTheJdksKeytool(@TempDir Path dir) {
        TlsMaterial m = TlsMaterial.generate(dir, "dev-store-secret");
        assertThat(m.truststore()).exists();
        assertThat(m.keystore()).exists();
        assertThat(Files.isRegularFile(dir.resolve("ca.pem"))).isTrue();
    }
}
