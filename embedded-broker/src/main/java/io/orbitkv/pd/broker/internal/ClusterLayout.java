package io.orbitkv.pd.broker.internal;

import io.orbitkv.pd.broker.Ports;
import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;

/**
 * What a data directory remembers about the cluster that owns it: the cluster id and every node's ports.
 *
 * <p>Stored as {@value #FILE_NAME} at the top of the data directory. A persistent cluster reuses it on the
 * next start, so a broker keeps its controller port across restarts (the static KRaft voter set names it)
 * and clients keep their bootstrap address.
 *
 * @param clusterId KRaft cluster id the storage was formatted with
 * @param nodes     ports of nodes 1..N, in node-id order
 */
public record ClusterLayout(String clusterId, List<NodePorts> nodes) {

    public static final String FILE_NAME = "orbitkv-kraft-cluster.properties";

    /**
     * @param nodeId         Kafka {@code node.id}, 1-based
     * @param brokerPort     PLAINTEXT listener for clients and replication
     * @param controllerPort CONTROLLER listener for the KRaft quorum
     */
    public record NodePorts(int nodeId, int brokerPort, int controllerPort) {
        public NodePorts {
            if (nodeId < 1) {
                throw new IllegalArgumentException("nodeId: must be >= 1, got " + nodeId);
            }
            checkPort("brokerPort", brokerPort);
            checkPort("controllerPort", controllerPort);
            if (brokerPort == controllerPort) {
                throw new IllegalArgumentException("controllerPort: must differ from brokerPort " + brokerPort);
            }
        }
    }

    public ClusterLayout {
        if (clusterId == null || clusterId.isBlank()) {
            throw new IllegalArgumentException("clusterId: must not be blank");
        }
        nodes = List.copyOf(nodes);
        if (nodes.isEmpty()) {
            throw new IllegalArgumentException("nodes: must not be empty");
        }
        for (int i = 0; i < nodes.size(); i++) {
            if (nodes.get(i).nodeId() != i + 1) {
                throw new IllegalArgumentException("nodes: node ids must be 1.." + nodes.size() + " in order");
            }
        }
    }

    static void checkPort(String field, int port) {
        if (port < 1 || port > 65_535) {
            throw new IllegalArgumentException(field + ": must be in 1..65535, got " + port);
        }
    }

    public NodePorts node(int nodeId) {
        if (nodeId < 1 || nodeId > nodes.size()) {
            throw new IllegalArgumentException("nodeId: must be in 1.." + nodes.size() + ", got " + nodeId);
        }
        return nodes.get(nodeId - 1);
    }

    /** {@code controller.quorum.voters} for a static quorum of all nodes, each at the address {@code host} gives it. */
    public String quorumVoters(java.util.function.IntFunction<String> host) {
        return String.join(",", nodes.stream()
                .map(n -> n.nodeId() + "@" + host.apply(n.nodeId()) + ":" + n.controllerPort()).toList());
    }

    public ClusterLayout withBrokerPort(int nodeId, int brokerPort) {
        List<NodePorts> copy = new ArrayList<>(nodes);
        NodePorts old = node(nodeId);
        copy.set(nodeId - 1, new NodePorts(nodeId, brokerPort, old.controllerPort()));
        return new ClusterLayout(clusterId, copy);
    }

    public void store(Path dataDir) throws IOException {
        Map<String, String> m = new LinkedHashMap<>();
        m.put("cluster.id", clusterId);
        m.put("nodes", Integer.toString(nodes.size()));
        for (NodePorts n : nodes) {
            m.put("node." + n.nodeId() + ".broker.port", Integer.toString(n.brokerPort()));
            m.put("node." + n.nodeId() + ".controller.port", Integer.toString(n.controllerPort()));
        }
        PropertiesFiles.write(dataDir.resolve(FILE_NAME),
                "OrbitKV KraftCluster layout; ports are reused when this directory is restarted", m);
    }

    /** @return the stored layout, or {@code null} if the directory has none yet */
    public static ClusterLayout load(Path dataDir) throws IOException {
        Path f = dataDir.resolve(FILE_NAME);
        if (!Files.isRegularFile(f)) {
            return null;
        }
        Properties p = PropertiesFiles.read(f);
        try {
            int n = Integer.parseInt(p.getProperty("nodes", "").strip());
            List<NodePorts> nodes = new ArrayList<>(n);
            for (int id = 1; id <= n; id++) {
                nodes.add(new NodePorts(id,
                        Integer.parseInt(p.getProperty("node." + id + ".broker.port", "").strip()),
                        Integer.parseInt(p.getProperty("node." + id + ".controller.port", "").strip())));
            }
            return new ClusterLayout(p.getProperty("cluster.id"), nodes);
        } catch (IllegalArgumentException e) {
            throw new IllegalStateException("corrupt " + f + ": " + e.getMessage(), e);
        }
    }
}
