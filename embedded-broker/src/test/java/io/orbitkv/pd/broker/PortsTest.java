package io.orbitkv.pd.broker;

import static org.assertj.core.api.Assertions.assertThat;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.util.HashSet;
import java.util.List;
import org.junit.jupiter.api.Test;

class PortsTest {

    @Test
    void portsAreDistinctBindableAndOutsideTheEphemeralRange() throws Exception {
        List<Integer> ports = Ports.free(40);
        assertThat(new HashSet<>(ports)).hasSize(40);
        int[] below = Ports.belowEphemeral();
        if (java.nio.file.Files.isReadable(java.nio.file.Path.of(Ports.EPHEMERAL_RANGE))) {
            assertThat(below).as("range read from " + Ports.EPHEMERAL_RANGE).isNotNull();
        }
        for (int port : ports) {
            if (below != null) {
                // bind(0) and outgoing connections never take these: they draw from the ephemeral range.
                assertThat(port).isBetween(below[0], below[1] - 1);
            }
            try (ServerSocket s = new ServerSocket()) {
                s.bind(new InetSocketAddress(InetAddress.getByName(Ports.HOST), port));
            }
        }
    }

    @Test
    void aPortInUseIsNeverHandedOutAndAFullRangeFallsBackToTheKernel() throws Exception {
        int[] range = {15_000, 15_050};
        List<ServerSocket> taken = new java.util.ArrayList<>();
        try {
            for (int port = range[0]; port < range[1]; port++) {
                ServerSocket s = new ServerSocket();
                try {
                    s.bind(new InetSocketAddress(InetAddress.getByName(Ports.HOST), port));
                    taken.add(s);
                } catch (java.io.IOException inUse) {
                    s.close(); // someone else holds it: equally taken
                }
                if (taken.size() == 45) {
                    break;
                }
            }
            List<Integer> ports = Ports.free(10, range);
            assertThat(new HashSet<>(ports)).hasSize(10);
            for (ServerSocket s : taken) {
                assertThat(ports).doesNotContain(s.getLocalPort());
            }
            // At most 5 ports of the range are left, so at least 5 came from the kernel, outside it.
            assertThat(ports.stream().filter(p -> p < range[0] || p >= range[1]).count()).isGreaterThanOrEqualTo(5);
        } finally {
            for (ServerSocket s : taken) {
                s.close();
            }
        }
    }
}
