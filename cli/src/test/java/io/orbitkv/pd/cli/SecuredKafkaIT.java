package io.orbitkv.pd.cli;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import io.orbitkv.pd.broker.BrokerSecurity;
import io.orbitkv.pd.broker.KraftCluster;
import io.orbitkv.pd.broker.TlsMaterial;
import io.orbitkv.pd.decider.DeciderApp;
import io.orbitkv.pd.decider.DeciderConfig;
import io.orbitkv.pd.schemas.config.ConfigProps;
import io.orbitkv.pd.worker.WorkerApp;
import io.orbitkv.pd.worker.WorkerConfig;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.errors.TopicAuthorizationException;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The components on a secured cluster (SASL SCRAM-SHA-512 over TLS, ACLs enforced): an operator creates the topics
 * and applies {@code ./orbitkv-pd acls} as the admin; then each component's principal does what its ACLs allow and no
 * more (the worker's principal writing a decision is refused by the broker), a worker and a decider start and run on
 * theirs, and a wrong password or an untrusted CA stops a component at start with the principal and the cause named.
 */
@Timeout(300)
class SecuredKafkaIT {

    private static final String PREFIX = "sec.";

    @Test
    void eachPrincipalDoesExactlyWhatItsAclsAllow(@TempDir Path dir) throws Exception {
        BrokerSecurity security = new BrokerSecurity(TlsMaterial.generate(dir.resolve("tls"), "dev-store-secret"), "admin", "admin-secret-1");
        try (KraftCluster cluster = KraftCluster.builder().nodes(1).dataDir(dir.resolve("data")).secured(security).build().start()) {
            Path admin = dir.resolve("admin.properties");
            Files.writeString(admin, properties(connection(cluster, security, "admin", "admin-secret-1"))
                    + "topics.prefix=" + PREFIX + "\ntopics.partitions=2\ndecider.application.id=sec-decider\n");
            assertThat(run("topics", "--config", admin.toString(), "--create")).isZero();
            assertThat(run("acls", "--config", admin.toString(), "--apply", "--user", "orbitkv-decider=decider-secret",
                    "--user", "orbitkv-worker=worker-secret")).isZero();

            // The worker's principal may not write a decision: the broker refuses it, naming the topic.
            assertThatThrownBy(() -> send(cluster, security.clientConfig("orbitkv-worker", "worker-secret"), PREFIX + "decisions"))
                    .hasCauseInstanceOf(TopicAuthorizationException.class).hasMessageContaining(PREFIX + "decisions");
            // The decider's may (ACLs reach the authorizer through the metadata log: the first tries may still be refused).
            org.awaitility.Awaitility.await().atMost(Duration.ofSeconds(30)).ignoreExceptions()
                    .until(() -> send(cluster, security.clientConfig("orbitkv-decider", "decider-secret"), PREFIX + "decisions") >= 0);

            // Real components on their own principals: the decider runs (exactly-once: its transactional ids), the worker
            // announces its engine and reads its commands.
            try (DeciderApp decider = new DeciderApp(DeciderConfig.from(component(cluster, security, "orbitkv-decider", "decider-secret")
                    .with("decider.application.id", "sec-decider").with("decider.state.dir", dir.resolve("state").toString())
                    .with("decider.store", "in_memory"))).start();
                 WorkerApp worker = new WorkerApp(WorkerConfig.from(worker(cluster, security, "worker-secret"))).start()) {
                assertThat(decider.awaitRunning(Duration.ofSeconds(120))).as("decider RUNNING on its own principal").isTrue();
                assertThat(worker.state().label()).isEqualTo("running");
            }

            // A wrong password: the component stops at start, naming its principal and the broker's reason.
            assertThatThrownBy(() -> new WorkerApp(WorkerConfig.from(worker(cluster, security, "not-the-password"))).start())
                    .hasMessageStartingWith("kafka: cannot authenticate as User:orbitkv-worker to " + cluster.bootstrapServers())
                    .hasMessageContaining("invalid credentials");
            // A CA it does not trust: the TLS handshake fails, said as such.
            BrokerSecurity otherCa = new BrokerSecurity(TlsMaterial.generate(dir.resolve("other-ca"), "dev-store-secret"), "admin", "admin-secret-1");
            assertThatThrownBy(() -> new WorkerApp(WorkerConfig.from(worker(cluster, otherCa, "worker-secret"))).start())
                    .hasMessageStartingWith("kafka: cannot authenticate as User:orbitkv-worker")
                    .hasMessageContaining("SSL handshake failed");

            // A broker whose certificate has expired (Kafka refuses to load one, so a TLS endpoint of this CA stands in
            // for it, presenting an expired certificate): a component connecting stops at start, saying so.
            try (ExpiredTlsEndpoint expired = new ExpiredTlsEndpoint(security.tls())) {
                assertThatThrownBy(() -> new WorkerApp(WorkerConfig.from(worker(cluster, security, "worker-secret")
                        .with("bootstrap.servers", "127.0.0.1:" + expired.port()).with("kafka.default.api.timeout.ms", "8000")
                        .with("kafka.request.timeout.ms", "4000"))).start())
                        .hasMessageStartingWith("kafka: cannot authenticate as User:orbitkv-worker to 127.0.0.1:" + expired.port())
                        .hasMessageContaining("SSL handshake failed").satisfies(e -> assertThat(e.getMessage()).contains("validity check failed"));
            }
        }
    }

    /** A TLS endpoint presenting the CA's expired certificate to whoever connects. */
    private static final class ExpiredTlsEndpoint implements AutoCloseable {
        private final javax.net.ssl.SSLServerSocket server;

        ExpiredTlsEndpoint(TlsMaterial tls) throws Exception {
            java.security.KeyStore ks = java.security.KeyStore.getInstance("PKCS12");
            try (var in = Files.newInputStream(tls.expiredKeystore())) {
                ks.load(in, tls.password().toCharArray());
            }
            javax.net.ssl.KeyManagerFactory kmf = javax.net.ssl.KeyManagerFactory.getInstance(javax.net.ssl.KeyManagerFactory.getDefaultAlgorithm());
            kmf.init(ks, tls.password().toCharArray());
            javax.net.ssl.SSLContext ctx = javax.net.ssl.SSLContext.getInstance("TLS");
            ctx.init(kmf.getKeyManagers(), null, null);
            server = (javax.net.ssl.SSLServerSocket) ctx.getServerSocketFactory().createServerSocket(0, 50,
                    java.net.InetAddress.getLoopbackAddress());
            Thread.ofVirtual().start(() -> {
                while (!server.isClosed()) {
                    try (javax.net.ssl.SSLSocket s = (javax.net.ssl.SSLSocket) server.accept()) {
                        s.startHandshake(); // fails on the client's side: the certificate's validity
                    } catch (java.io.IOException e) {
                        // the client refused the handshake, or the endpoint closed
                    }
                }
            });
        }

        int port() {
            return server.getLocalPort();
        }

        @Override
        public void close() throws java.io.IOException {
            server.close();
        }
    }

    private static int run(String... args) {
        StringWriter err = new StringWriter();
        var cli = Main.commandLine();
        cli.setErr(new PrintWriter(err, true));
        int exit = cli.execute(args);
        assertThat(err.toString()).as("stderr of %s", String.join(" ", args)).doesNotContain("Exception");
        return exit;
    }

    /** A component's properties: the cluster, the topics, and its connection as {@code kafka.*} keys. */
    private static ConfigProps component(KraftCluster cluster, BrokerSecurity security, String user, String password) {
        ConfigProps p = ConfigProps.empty().with("topics.prefix", PREFIX).with("topics.partitions", "2").with("topics.retention", "1h")
                .with("auth.key", "secured-it-auth-key-0123456789");
        for (Map.Entry<String, Object> e : connection(cluster, security, user, password).entrySet()) {
            p = p.with(e.getKey(), e.getValue().toString());
        }
        return p;
    }

    private static ConfigProps worker(KraftCluster cluster, BrokerSecurity security, String password) {
        return component(cluster, security, "orbitkv-worker", password).with("worker.engine.id", "decode-s").with("worker.engine.role", "decode")
                .with("worker.layout.num-layers", "2").with("worker.layout.block-size-tokens", "16").with("worker.layout.num-kv-heads", "8")
                .with("worker.layout.head-dim", "128").with("worker.layout.dtype", "bf16").with("worker.layout.num-blocks", "16");
    }

    /** {@code bootstrap.servers} and the client security settings as a component's {@code kafka.*} keys. */
    private static Map<String, Object> connection(KraftCluster cluster, BrokerSecurity security, String user, String password) {
        Map<String, Object> m = new HashMap<>();
        m.put("bootstrap.servers", cluster.bootstrapServers());
        security.clientConfig(user, password).forEach((k, v) -> m.put("kafka." + k, v));
        return m;
    }

    private static String properties(Map<String, Object> m) {
        StringBuilder b = new StringBuilder();
        // Properties syntax: the JAAS line's quotes and spaces are fine as they are.
        m.forEach((k, v) -> b.append(k).append('=').append(v.toString().replace("\\", "\\\\")).append('\n'));
        return b.toString();
    }

    private static long send(KraftCluster cluster, Map<String, Object> security, String topic) throws Exception {
        Map<String, Object> c = new HashMap<>(security);
        c.put("bootstrap.servers", cluster.bootstrapServers());
        c.put("max.block.ms", 10_000);
        c.put("delivery.timeout.ms", 10_000);
        c.put("request.timeout.ms", 5_000);
        try (KafkaProducer<String, String> p = new KafkaProducer<>(c, new StringSerializer(), new StringSerializer())) {
            return p.send(new ProducerRecord<>(topic, "k", "v")).get(15, TimeUnit.SECONDS).offset();
        }
    }
}
