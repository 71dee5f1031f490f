package io.orbitkv.pd.cli.k8s;

import io.orbitkv.pd.runtime.Health;
import io.orbitkv.pd.schemas.Topic;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.security.AclPlan;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.common.acl.AclBinding;

/**
 * The Kubernetes manifests of a deployment, generated from what the code already knows: Strimzi's {@code Kafka} and
 * {@code KafkaNodePool} (KRaft, SCRAM over TLS, simple authorization), a {@code KafkaTopic} per topic of the registry, a
 * {@code KafkaUser} per role carrying its {@link AclPlan} ACLs, and the components: the decider as a StatefulSet (state
 * on a volume, a standby replica per instance), an engine pod with its transfer worker as a sidecar (shared
 * {@code /dev/shm}; for {@code cuda}, shared IPC), the proxy as a Deployment with an HPA; every pod probed on
 * {@code /health/live} and {@code /health/ready}, scraped by Prometheus, given 10 s to stop. Each file is a list of
 * documents (maps), written as YAML by {@link K8sCommand}.
 */
public final class K8sManifests {

    /** The namespace everything goes in. */
    public static final String NAMESPACE = "orbitkv";
    /** The Strimzi cluster name. */
    public static final String CLUSTER = "orbitkv";
    private static final String IMAGE = "ghcr.io/orbitkv/orbitkv-pd:0.1.0";
    private static final String BOOTSTRAP = CLUSTER + "-kafka-bootstrap:9093";
    private static final int GRACE_SECONDS = 10;

    private final Topics topics;
    private final AclPlan acls;
    private final int brokers;

    public K8sManifests(Topics topics, AclPlan acls, int brokers) {
        this.topics = topics;
        this.acls = acls;
        this.brokers = brokers;
    }

    /** File name → its documents. */
    public Map<String, List<Map<String, Object>>> files() {
        Map<String, List<Map<String, Object>>> f = new LinkedHashMap<>();
        f.put("00-namespace.yaml", List.of(map("apiVersion", "v1", "kind", "Namespace", "metadata", map("name", NAMESPACE))));
        f.put("10-kafka.yaml", kafka());
        f.put("20-topics.yaml", kafkaTopics());
        f.put("30-users.yaml", kafkaUsers());
        f.put("40-decider.yaml", decider());
        f.put("50-engine-prefill.yaml", engine("prefill"));
        f.put("51-engine-decode.yaml", engine("decode"));
        f.put("60-proxy.yaml", proxy());
        return f;
    }

    private List<Map<String, Object>> kafka() {
        Map<String, Object> pool = map("apiVersion", "kafka.strimzi.io/v1beta2", "kind", "KafkaNodePool",
                "metadata", meta(CLUSTER + "-dual", map("strimzi.io/cluster", CLUSTER)),
                "spec", map("replicas", brokers, "roles", List.of("controller", "broker"),
                        "storage", map("type", "jbod", "volumes", List.of(map("id", 0, "type", "persistent-claim", "size", "100Gi",
                                "deleteClaim", false, "kraftMetadata", "shared")))));
        Map<String, Object> kafka = map("apiVersion", "kafka.strimzi.io/v1beta2", "kind", "Kafka",
                "metadata", map("name", CLUSTER, "namespace", NAMESPACE,
                        "annotations", map("strimzi.io/node-pools", "enabled", "strimzi.io/kraft", "enabled")),
                "spec", map(
                        "kafka", map("version", "4.1.0", "metadataVersion", "4.1-IV1",
                                "listeners", List.of(map("name", "tls", "port", 9093, "type", "internal", "tls", true,
                                        "authentication", map("type", "scram-sha-512"))),
                                "authorization", map("type", "simple"),
                                "config", map("offsets.topic.replication.factor", Math.min(3, brokers),
                                        "transaction.state.log.replication.factor", Math.min(3, brokers),
                                        "transaction.state.log.min.isr", Math.min(2, brokers),
                                        "default.replication.factor", Math.min(3, brokers), "min.insync.replicas", Math.min(2, brokers),
                                        "auto.create.topics.enable", false,
                                        // the decider's failover: its 3 s transaction timeout is noticed within 0.5 s (docs/decider.md)
                                        "transaction.abort.timed.out.transaction.cleanup.interval.ms", 500,
                                        "group.min.session.timeout.ms", 1000)),
                        "entityOperator", map("topicOperator", map(), "userOperator", map())));
        return List.of(pool, kafka);
    }

    private List<Map<String, Object>> kafkaTopics() {
        List<Map<String, Object>> out = new ArrayList<>();
        for (Topic<String, ?> t : topics.all()) {
            Map<String, Object> config = new java.util.TreeMap<>(t.spec().configs()); // sorted: the same file every time
            out.add(map("apiVersion", "kafka.strimzi.io/v1beta2", "kind", "KafkaTopic",
                    "metadata", meta(t.name().replace('.', '-').replace('_', '-'), map("strimzi.io/cluster", CLUSTER)),
                    "spec", map("topicName", t.name(), "partitions", t.spec().partitions(), "replicas", (int) Math.min(3, brokers),
                            "config", config)));
        }
        return out;
    }

    private List<Map<String, Object>> kafkaUsers() {
        List<Map<String, Object>> out = new ArrayList<>();
        acls.bindings().forEach((role, bindings) -> {
            List<Map<String, Object>> rules = new ArrayList<>();
            Map<String, Map<String, Object>> byResource = new LinkedHashMap<>();
            for (AclBinding b : bindings) {
                String key = b.pattern().resourceType() + "/" + b.pattern().patternType() + "/" + b.pattern().name();
                Map<String, Object> rule = byResource.computeIfAbsent(key, k -> {
                    Map<String, Object> resource = map("type", b.pattern().resourceType().name().toLowerCase().replace("transactional_id",
                            "transactionalId"), "patternType", b.pattern().patternType().name().toLowerCase());
                    if (b.pattern().resourceType() != org.apache.kafka.common.resource.ResourceType.CLUSTER) {
                        resource.put("name", b.pattern().name());
                    }
                    Map<String, Object> r = map("resource", resource, "operations", new ArrayList<String>(), "host", "*");
                    rules.add(r);
                    return r;
                });
                @SuppressWarnings("unchecked")
                List<String> ops = (List<String>) rule.get("operations");
                ops.add(pascal(b.entry().operation().name()));
            }
            String user = acls.principals().get(role).substring("User:".length());
            out.add(map("apiVersion", "kafka.strimzi.io/v1beta2", "kind", "KafkaUser",
                    "metadata", meta(user, map("strimzi.io/cluster", CLUSTER)),
                    "spec", map("authentication", map("type", "scram-sha-512"), "authorization", map("type", "simple", "acls", rules))));
        });
        return out;
    }

    private List<Map<String, Object>> decider() {
        String props = connection() + """
                decider.application.id=orbitkv-decider
                decider.instance.id=${env:POD_NAME}
                decider.state.dir=/var/lib/orbitkv/decider
                decider.store=rocksdb
                decider.http.host=0.0.0.0
                decider.http.advertised-host=${env:POD_NAME}.orbitkv-decider
                decider.http.port=7070
                kafka.num.standby.replicas=1
                kafka.session.timeout.ms=2000
                kafka.heartbeat.interval.ms=500
                kafka.producer.transaction.timeout.ms=3000
                auth.key=${env:ORBITKV_AUTH_KEY}
                """;
        Map<String, Object> container = container("decider", 7070, "orbitkv-decider");
        container.put("volumeMounts", List.of(map("name", "config", "mountPath", "/etc/orbitkv"),
                map("name", "state", "mountPath", "/var/lib/orbitkv/decider")));
        Map<String, Object> podSpec = podSpec(List.of(container), List.of(map("name", "config", "configMap", map("name", "orbitkv-decider"))));
        return List.of(
                configMap("orbitkv-decider", "decider.properties", props),
                map("apiVersion", "v1", "kind", "Service", "metadata", meta("orbitkv-decider", null),
                        "spec", map("clusterIP", "None", "selector", map("app", "orbitkv-decider"),
                                "ports", List.of(map("name", "http", "port", 7070)))),
                map("apiVersion", "apps/v1", "kind", "StatefulSet", "metadata", meta("orbitkv-decider", null),
                        "spec", map("serviceName", "orbitkv-decider", "replicas", 2, "podManagementPolicy", "Parallel",
                                "selector", map("matchLabels", map("app", "orbitkv-decider")),
                                "template", map("metadata", podMeta("orbitkv-decider", 7070), "spec", podSpec),
                                "volumeClaimTemplates", List.of(map("metadata", map("name", "state"),
                                        "spec", map("accessModes", List.of("ReadWriteOnce"),
                                                "resources", map("requests", map("storage", "10Gi"))))))));
    }

    /** One engine pod: the engine and its transfer worker beside it, sharing the pool in /dev/shm and the API socket. */
    private List<Map<String, Object>> engine(String role) {
        String name = "orbitkv-engine-" + role;
        String engineProps = connection() + """
                engine.id=${env:POD_NAME}
                engine.role=%s
                engine.http.host=0.0.0.0
                engine.http.advertised-url=http://${env:POD_IP}:8000
                engine.http.port=8000
                engine.pool.path=/dev/shm/orbitkv-kv
                """.formatted(role);
        String workerProps = connection() + """
                worker.engine.id=${env:POD_NAME}
                worker.engine.role=%s
                worker.pool.path=/dev/shm/orbitkv-kv
                worker.transports=tcp
                transfer.tcp.host=0.0.0.0
                transfer.tcp.advertised-host=${env:POD_IP}
                worker.http.host=0.0.0.0
                worker.http.port=9100
                auth.key=${env:ORBITKV_AUTH_KEY}
                """.formatted(role);
        Map<String, Object> engine = container("engine", 8000, "orbitkv-engine");
        Map<String, Object> worker = container("worker", 9100, "orbitkv-worker");
        for (Map<String, Object> c : List.of(engine, worker)) {
            c.put("volumeMounts", List.of(map("name", "config", "mountPath", "/etc/orbitkv"), map("name", "shm", "mountPath", "/dev/shm")));
        }
        Map<String, Object> podSpec = podSpec(List.of(engine, worker), List.of(
                map("name", "config", "configMap", map("name", name)),
                map("name", "shm", "emptyDir", map("medium", "Memory", "sizeLimit", "64Gi"))));
        // The cuda transport maps the engine's GPU pool by CUDA IPC handle: engine and worker share the pod's IPC namespace
        // (they do by default) and see each other's processes.
        podSpec.put("shareProcessNamespace", true);
        return List.of(
                configMap(name, "engine.properties", engineProps, "worker.properties", workerProps),
                map("apiVersion", "apps/v1", "kind", "Deployment", "metadata", meta(name, null),
                        "spec", map("replicas", 2, "selector", map("matchLabels", map("app", name)),
                                "template", map("metadata", podMeta(name, 9100), "spec", podSpec))));
    }

    private List<Map<String, Object>> proxy() {
        String props = connection() + """
                proxy.id=${env:POD_NAME}
                proxy.http.host=0.0.0.0
                proxy.http.port=8080
                proxy.decider.url=http://orbitkv-decider-0.orbitkv-decider:7070,http://orbitkv-decider-1.orbitkv-decider:7070
                """;
        Map<String, Object> container = container("proxy", 8080, "orbitkv-proxy");
        container.put("volumeMounts", List.of(map("name", "config", "mountPath", "/etc/orbitkv")));
        container.put("resources", map("requests", map("cpu", "1", "memory", "1Gi")));
        Map<String, Object> podSpec = podSpec(List.of(container), List.of(map("name", "config", "configMap", map("name", "orbitkv-proxy"))));
        return List.of(
                configMap("orbitkv-proxy", "proxy.properties", props),
                map("apiVersion", "v1", "kind", "Service", "metadata", meta("orbitkv-proxy", null),
                        "spec", map("selector", map("app", "orbitkv-proxy"), "ports", List.of(map("name", "http", "port", 8080)))),
                map("apiVersion", "apps/v1", "kind", "Deployment", "metadata", meta("orbitkv-proxy", null),
                        "spec", map("replicas", 2, "selector", map("matchLabels", map("app", "orbitkv-proxy")),
                                "template", map("metadata", podMeta("orbitkv-proxy", 8080), "spec", podSpec))),
                map("apiVersion", "autoscaling/v2", "kind", "HorizontalPodAutoscaler", "metadata", meta("orbitkv-proxy", null),
                        "spec", map("scaleTargetRef", map("apiVersion", "apps/v1", "kind", "Deployment", "name", "orbitkv-proxy"),
                                "minReplicas", 2, "maxReplicas", 10,
                                "metrics", List.of(map("type", "Resource", "resource", map("name", "cpu",
                                        "target", map("type", "Utilization", "averageUtilization", 70)))))));
    }

    /** A component's Kafka connection: its SCRAM login (its KafkaUser's secret) and the cluster CA come from Strimzi's secrets. */
    private static String connection() {
        return """
                bootstrap.servers=%s
                kafka.security.protocol=SASL_SSL
                kafka.sasl.mechanism=SCRAM-SHA-512
                kafka.sasl.jaas.config=${env:KAFKA_SASL_JAAS_CONFIG}
                kafka.ssl.truststore.location=/etc/kafka-ca/ca.p12
                kafka.ssl.truststore.password=${env:KAFKA_CA_PASSWORD}
                kafka.ssl.truststore.type=PKCS12
                """.formatted(BOOTSTRAP);
    }

    /** A component's container: {@code <name> --config /etc/orbitkv/<name>.properties}, logged in to Kafka as {@code user}. */
    private static Map<String, Object> container(String name, int port, String user) {
        return map("name", name, "image", IMAGE, "args", List.of(name, "--config", "/etc/orbitkv/" + name + ".properties"),
                "env", List.of(
                        map("name", "POD_NAME", "valueFrom", map("fieldRef", map("fieldPath", "metadata.name"))),
                        map("name", "POD_IP", "valueFrom", map("fieldRef", map("fieldPath", "status.podIP"))),
                        map("name", "KAFKA_SASL_JAAS_CONFIG", "valueFrom", map("secretKeyRef", map("name", user, "key", "sasl.jaas.config"))),
                        map("name", "KAFKA_CA_PASSWORD", "valueFrom", map("secretKeyRef", map("name", CLUSTER + "-cluster-ca-cert",
                                "key", "ca.password"))),
                        map("name", "ORBITKV_AUTH_KEY", "valueFrom", map("secretKeyRef", map("name", "orbitkv-auth-key", "key", "key")))),
                "ports", List.of(map("name", "http", "containerPort", port)),
                "livenessProbe", probe(Health.LIVE, port, 3),
                "readinessProbe", probe(Health.READY, port, 1),
                "startupProbe", map("httpGet", map("path", Health.LIVE, "port", port), "periodSeconds", 2, "failureThreshold", 90));
    }

    private static Map<String, Object> probe(String path, int port, int failures) {
        return map("httpGet", map("path", path, "port", port), "periodSeconds", 5, "timeoutSeconds", 2, "failureThreshold", failures);
    }

    private static Map<String, Object> podSpec(List<Map<String, Object>> containers, List<Map<String, Object>> volumes) {
        List<Map<String, Object>> all = new ArrayList<>(volumes);
        all.add(map("name", "kafka-ca", "secret", map("secretName", CLUSTER + "-cluster-ca-cert")));
        for (Map<String, Object> c : containers) {
            @SuppressWarnings("unchecked")
            List<Map<String, Object>> mounts = new ArrayList<>((List<Map<String, Object>>) c.getOrDefault("volumeMounts", List.of()));
            mounts.add(map("name", "kafka-ca", "mountPath", "/etc/kafka-ca", "readOnly", true));
            c.put("volumeMounts", mounts);
        }
        // SIGTERM: every component stops within its 8 s bound (ShutdownBound); Kubernetes kills at 10 s.
        return map("terminationGracePeriodSeconds", GRACE_SECONDS, "containers", containers, "volumes", all);
    }

    private static Map<String, Object> podMeta(String app, int metricsPort) {
        return map("labels", map("app", app), "annotations", map("prometheus.io/scrape", "true", "prometheus.io/port", Integer.toString(metricsPort),
                "prometheus.io/path", "/metrics"));
    }

    private static Map<String, Object> configMap(String name, String... fileAndContent) {
        Map<String, Object> data = new LinkedHashMap<>();
        for (int i = 0; i < fileAndContent.length; i += 2) {
            data.put(fileAndContent[i], fileAndContent[i + 1]);
        }
        return map("apiVersion", "v1", "kind", "ConfigMap", "metadata", meta(name, null), "data", data);
    }

    private static Map<String, Object> meta(String name, Map<String, Object> labels) {
        Map<String, Object> m = map("name", name, "namespace", NAMESPACE);
        if (labels != null) {
            m.put("labels", labels);
        }
        return m;
    }

    private static String pascal(String upper) {
        StringBuilder b = new StringBuilder();
        for (String part : upper.split("_")) {
            b.append(part.charAt(0)).append(part.substring(1).toLowerCase());
        }
        return b.toString();
    }

    static Map<String, Object> map(Object... kv) {
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) {
            m.put((String) kv[i], kv[i + 1]);
        }
        return m;
    }
}
