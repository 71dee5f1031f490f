package io.orbitkv.pd.cli;

import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.dataformat.yaml.YAMLFactory;
import com.fasterxml.jackson.dataformat.yaml.YAMLParser;
import io.fabric8.kubernetes.api.model.ConfigMap;
import io.fabric8.kubernetes.api.model.Container;
import io.fabric8.kubernetes.api.model.Namespace;
import io.fabric8.kubernetes.api.model.PodSpec;
import io.fabric8.kubernetes.api.model.Service;
import io.fabric8.kubernetes.api.model.apps.Deployment;
import io.fabric8.kubernetes.api.model.apps.StatefulSet;
import io.fabric8.kubernetes.api.model.autoscaling.v2.HorizontalPodAutoscaler;
import io.orbitkv.pd.cli.k8s.K8sCommand;
import io.strimzi.api.kafka.model.kafka.Kafka;
import io.strimzi.api.kafka.model.nodepool.KafkaNodePool;
import io.strimzi.api.kafka.model.topic.KafkaTopic;
import io.strimzi.api.kafka.model.user.KafkaUser;
import java.io.StringReader;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.junit.jupiter.api.Test;

/**
 * deploy/k8s is what {@code ./orbitkv-pd k8s} generates today (regenerate when this fails), and every document in it
 * parses strictly with the real schemas: the Strimzi API classes of 0.49 and the Fabric8 Kubernetes model it is built on,
 * failing on any field the schema does not have (Fabric8 and Strimzi keep unknown fields aside instead of failing: they
 * are looked for). Each component's config in the ConfigMaps is one its command accepts.
 */
class K8sManifestsTest {

    private static final Path ROOT = Path.of("..").toAbsolutePath().normalize();
    private static final Map<String, Class<?>> KINDS = Map.of("Namespace", Namespace.class, "ConfigMap", ConfigMap.class,
            "Service", Service.class, "StatefulSet", StatefulSet.class, "Deployment", Deployment.class,
            "HorizontalPodAutoscaler", HorizontalPodAutoscaler.class, "Kafka", Kafka.class, "KafkaNodePool", KafkaNodePool.class,
            "KafkaTopic", KafkaTopic.class, "KafkaUser", KafkaUser.class);
    private static final ObjectMapper JSON = new ObjectMapper().enable(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES);

    private static Map<String, String> generated() throws Exception {
        return K8sCommand.render(3, 12, ROOT.resolve("deploy/grafana/orbitkv-pd.json"));
    }

    @Test
    void theCommittedManifestsAreWhatTheGeneratorWritesToday() throws Exception {
        for (Map.Entry<String, String> f : generated().entrySet()) {
            Path committed = ROOT.resolve("deploy/k8s").resolve(f.getKey());
            assertThat(committed).as("run ./orbitkv-pd k8s").exists();
            assertThat(Files.readString(committed)).as("%s is stale: run ./orbitkv-pd k8s", committed).isEqualTo(f.getValue());
        }
    }

    @Test
    void everyDocumentParsesStrictlyWithTheRealSchemas() throws Exception {
        int docs = 0;
        List<String> kinds = new ArrayList<>();
        for (Map.Entry<String, String> f : generated().entrySet()) {
            for (JsonNode doc : documents(f.getValue())) {
                String kind = doc.path("kind").asText();
                Class<?> type = KINDS.get(kind);
                assertThat(type).as("%s: a kind this test knows", kind).isNotNull();
                Object parsed = JSON.treeToValue(doc, type);
                List<String> unknown = new ArrayList<>();
                unknownFields(parsed, kind + " " + doc.path("metadata").path("name").asText(), unknown, new IdentityHashMap<>());
                assertThat(unknown).as("fields the %s schema does not have, in %s", kind, f.getKey()).isEmpty();
                if (parsed instanceof Deployment d) {
                    podChecks(d.getSpec().getTemplate().getSpec());
                } else if (parsed instanceof StatefulSet s) {
                    podChecks(s.getSpec().getTemplate().getSpec());
                } else if (parsed instanceof ConfigMap cm) {
                    configChecks(cm);
                }
                kinds.add(kind);
                docs++;
            }
        }
        assertThat(kinds).contains("Kafka", "KafkaNodePool", "KafkaTopic", "KafkaUser", "StatefulSet", "Deployment", "HorizontalPodAutoscaler");
        assertThat(docs).isGreaterThan(20);
    }

    /**
     * Each component's properties, with the pod's environment filled in, are accepted by its own config class: the
     * addresses are a cluster's (every listener reachable from other pods at what it advertises, nothing announcing a
     * wildcard or loopback) and the decider's heartbeat fits inside its shortened session. The manifests as first
     * generated failed here three ways: engines bound 0.0.0.0 and announced it, workers listened on 127.0.0.1 while
     * advertising the pod IP, and the decider's 2 s session sat under the default 3 s heartbeat.
     */
    @Test
    void everyComponentAcceptsItsConfigAsAPodWouldSeeIt() throws Exception {
        Map<String, String> env = Map.of("POD_NAME", "orbitkv-engine-decode-7f9c", "POD_IP", "10.244.1.17", "ORBITKV_AUTH_KEY",
                "hex:00112233445566778899aabbccddeeff", "KAFKA_SASL_JAAS_CONFIG", "org.apache.kafka.common.security.scram.ScramLoginModule required username=\"u\" password=\"p\";", "KAFKA_CA_PASSWORD", "secret");
        int checked = 0;
        for (Map.Entry<String, String> f : generated().entrySet()) {
            for (JsonNode doc : documents(f.getValue())) {
                if (!doc.path("kind").asText().equals("ConfigMap")) {
                    continue;
                }
                var data = doc.path("data").fields();
                while (data.hasNext()) {
                    var e = data.next();
                    if (!e.getKey().endsWith(".properties")) {
                        continue;
                    }
                    String text = e.getValue().asText();
                    for (Map.Entry<String, String> v : env.entrySet()) {
                        text = text.replace("${env:" + v.getKey() + "}", v.getValue());
                    }
                    assertThat(text).as("%s: an environment variable this test does not set", e.getKey()).doesNotContain("${env:");
                    Properties props = new Properties();
                    props.load(new StringReader(text));
                    io.orbitkv.pd.schemas.config.ConfigProps c = new io.orbitkv.pd.schemas.config.ConfigProps(props);
                    String what = e.getKey() + " in " + doc.path("metadata").path("name").asText();
                    switch (e.getKey()) {
                        case "engine.properties" -> {
                            var engine = io.orbitkv.pd.engine.sim.SimEngineConfig.from(c);
                            assertThat(engine.advertisedUrl()).as(what).contains(env.get("POD_IP"));
                        }
                        case "worker.properties" -> {
                            var worker = io.orbitkv.pd.worker.WorkerConfig.from(c);
                            assertThat(worker.tcp().advertisedHost()).as(what).isEqualTo(env.get("POD_IP"));
                        }
                        case "decider.properties" -> io.orbitkv.pd.decider.DeciderConfig.from(c);
                        case "proxy.properties" -> io.orbitkv.pd.proxy.ProxyConfig.from(c);
                        default -> throw new AssertionError("a component this test does not know: " + what);
                    }
                    checked++;
                }
            }
        }
        assertThat(checked).isGreaterThanOrEqualTo(5);
    }

    /** Probes on the component's health endpoints, and the pod's grace within the SIGTERM bound. */
    private static void podChecks(PodSpec pod) {
        assertThat(pod.getTerminationGracePeriodSeconds()).isEqualTo(10L);
        for (Container c : pod.getContainers()) {
            assertThat(c.getLivenessProbe().getHttpGet().getPath()).isEqualTo("/health/live");
            assertThat(c.getReadinessProbe().getHttpGet().getPath()).isEqualTo("/health/ready");
        }
    }

    /** Every key of a component's properties is its own or a shared one (bootstrap, kafka.*, auth, topics, transfer). */
    private static void configChecks(ConfigMap cm) throws Exception {
        for (Map.Entry<String, String> e : cm.getData().entrySet()) {
            if (!e.getKey().endsWith(".properties")) {
                continue;
            }
            Properties p = new Properties();
            p.load(new StringReader(e.getValue()));
            String command = e.getKey().substring(0, e.getKey().indexOf('.'));
            assertThat(p).as("%s in %s", e.getKey(), cm.getMetadata().getName()).isNotEmpty();
            assertThat(p.stringPropertyNames()).allSatisfy(k -> assertThat(k).matches("(bootstrap\\.servers|kafka\\..+|auth\\.key|" + command + "\\..+|"
                    + "transfer\\..+|topics\\..+)"));
        }
    }

    private static List<JsonNode> documents(String yaml) throws Exception {
        List<JsonNode> out = new ArrayList<>();
        YAMLFactory f = new YAMLFactory();
        ObjectMapper m = new ObjectMapper(f);
        try (YAMLParser parser = f.createParser(yaml)) {
            var it = m.readValues(parser, JsonNode.class);
            while (it.hasNext()) {
                JsonNode n = it.next();
                if (n != null && !n.isNull() && !n.isMissingNode()) {
                    out.add(n);
                }
            }
        }
        return out;
    }

    /** Walks a parsed model and collects every non-empty additionalProperties map: fields the schema does not have. */
    private static void unknownFields(Object o, String path, List<String> out, IdentityHashMap<Object, Boolean> seen) throws Exception {
        if (o == null || seen.containsKey(o)) {
            return;
        }
        if (o instanceof Collection<?> c) {
            int i = 0;
            for (Object e : c) {
                unknownFields(e, path + "[" + i++ + "]", out, seen);
            }
            return;
        }
        if (o instanceof Map<?, ?> m) {
            for (Map.Entry<?, ?> e : m.entrySet()) {
                unknownFields(e.getValue(), path + "." + e.getKey(), out, seen);
            }
            return;
        }
        String pkg = o.getClass().getPackageName();
        if (!pkg.startsWith("io.fabric8") && !pkg.startsWith("io.strimzi")) {
            return;
        }
        seen.put(o, true);
        for (Method g : o.getClass().getMethods()) {
            if (g.getParameterCount() != 0 || Modifier.isStatic(g.getModifiers()) || !g.getName().startsWith("get") || g.getName().equals("getClass")) {
                continue;
            }
            Object v;
            try {
                v = g.invoke(o);
            } catch (ReflectiveOperationException | RuntimeException e) {
                continue;
            }
            if (g.getName().equals("getAdditionalProperties")) {
                if (v instanceof Map<?, ?> extra && !extra.isEmpty()) {
                    out.add(path + ": " + extra.keySet());
                }
                continue;
            }
            unknownFields(v, path + "." + g.getName().substring(3), out, seen);
        }
    }
}
