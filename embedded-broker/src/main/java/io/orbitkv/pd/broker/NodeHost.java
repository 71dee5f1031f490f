package io.orbitkv.pd.broker;

import java.util.List;

/**
 * Where one node of a {@link KraftCluster} lives: the address its listeners bind, the address clients and the other
 * nodes are told (Kafka's {@code advertised.listeners} and the controller quorum's voters), and the command prefix its
 * JVM is started under ({@code ip netns exec <host>} for a node on a host of its own; empty on this one).
 *
 * @param bind       address the client and controller listeners bind ({@code 0.0.0.0} for every interface)
 * @param advertised address every client and every other node reaches this node at; never a wildcard
 * @param launcher   command prefix the node's JVM runs under (empty: none)
 */
public record NodeHost(String bind, String advertised, List<String> launcher) {

    /** Every node on this machine's loopback: the default. */
    public static final NodeHost LOOPBACK = new NodeHost(Ports.HOST, Ports.HOST, List.of());

    public NodeHost {
        if (bind == null || bind.isBlank()) {
            throw new IllegalArgumentException("bind: required");
        }
        if (advertised == null || advertised.isBlank() || advertised.equals("0.0.0.0") || advertised.equals("::")) {
            throw new IllegalArgumentException("advertised: the address clients reach the node at is required (not a wildcard), got "
                    + advertised);
        }
        launcher = List.copyOf(launcher);
    }

    /** Whether this node shares this machine's network (its ports can be checked here before start). */
    public boolean local() {
        return launcher.isEmpty();
    }
}
