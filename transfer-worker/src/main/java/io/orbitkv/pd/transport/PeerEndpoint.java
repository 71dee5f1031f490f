package io.orbitkv.pd.transport;

import io.orbitkv.pd.events.TransportEndpoint;
import java.util.Map;

/**
 * Where a peer engine's worker accepts pushes over one transport, as its latest registration says.
 *
 * @param engineId      the peer engine
 * @param instanceEpoch the registration's instance epoch; a new one voids cached connections
 * @param transport     {@code tcp}, {@code local}, later {@code cuda} and {@code mooncake}
 * @param address       transport-specific ({@code host:port} for tcp)
 * @param attributes    transport-specific hints
 */
public record PeerEndpoint(String engineId, long instanceEpoch, String transport, String address, Map<String, String> attributes) {

    public PeerEndpoint {
        attributes = attributes == null ? Map.of() : Map.copyOf(attributes);
    }

    public static PeerEndpoint of(String engineId, long instanceEpoch, TransportEndpoint e) {
        return new PeerEndpoint(engineId, instanceEpoch, e.getTransport(), e.getAddress(), e.getAttributes());
    }

    @Override
    public String toString() {
        return engineId + "@" + instanceEpoch + " " + transport + "://" + address;
    }
}
