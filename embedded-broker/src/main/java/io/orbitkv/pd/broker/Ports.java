package io.orbitkv.pd.broker;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.util.ArrayList;
import java.util.List;

/** Loopback port helpers. All brokers bind to {@code 127.0.0.1} only. */
public final class Ports {

    public static final String HOST = "127.0.0.1";
    static final String EPHEMERAL_RANGE = "/proc/sys/net/ipv4/ip_local_port_range";

    private Ports() {
    }

    /**
     * Picks {@code n} distinct free loopback ports for a process that will bind them later. They come from below the
     * kernel's ephemeral range ({@code /proc/sys/net/ipv4/ip_local_port_range}) where there is room for them: every
     * {@code bind(0)} and every outgoing connection on the machine takes its port from that range, so a port handed
     * out from it can be taken by any of them (a Kafka client, a transport binding port 0, or this method's next call
     * returning the same number) before its process binds it. All sockets stay open until every port is chosen so
     * the list holds no port twice; another process probing the same way in the same instant is the one race left.
     */
    public static List<Integer> free(int n) {
        return free(n, belowEphemeral());
    }

    /** {@link #free(int)} drawing from {@code [range[0], range[1])}, or from {@code bind(0)} when null or exhausted. */
    static List<Integer> free(int n, int[] range) {
        List<ServerSocket> held = new ArrayList<>(n);
        try {
            java.util.concurrent.ThreadLocalRandom random = java.util.concurrent.ThreadLocalRandom.current();
            int attempts = 0;
            while (held.size() < n) {
                ServerSocket s = new ServerSocket();
                s.setReuseAddress(true);
                int port = range == null || attempts++ > 64 * n ? 0 : random.nextInt(range[0], range[1]);
                try {
                    s.bind(new InetSocketAddress(InetAddress.getByName(HOST), port));
                    held.add(s);
                } catch (IOException taken) {
                    s.close();
                    if (port == 0) {
                        throw taken;
                    }
                }
            }
            return held.stream().map(ServerSocket::getLocalPort).toList();
        } catch (IOException e) {
            throw new UncheckedIOException("cannot allocate free loopback ports", e);
        } finally {
            for (ServerSocket s : held) {
                try {
                    s.close();
                } catch (IOException ignored) {
                    // nothing was bound or it is already gone
                }
            }
        }
    }

    /**
     * {@code [from, to)} of at least 2,000 ports from 10,000 up to the start of the ephemeral range, or null when the
     * range cannot be read or leaves no such room (then ports come from {@code bind(0)}).
     */
    static int[] belowEphemeral() {
        try {
            // readLine, not Files.readString: a /proc file reports size 0, and readString returned one byte of it.
            String line;
            try (java.io.BufferedReader r = java.nio.file.Files.newBufferedReader(java.nio.file.Path.of(EPHEMERAL_RANGE))) {
                line = r.readLine();
            }
            String[] range = line.trim().split("\\s+");
            int low = Integer.parseInt(range[0]);
            return low - 10_000 >= 2_000 ? new int[] {10_000, low} : null;
        } catch (IOException | RuntimeException e) {
            return null;
        }
    }

    /** True when nothing is listening on {@code port} and we could bind it. */
    public static boolean isFree(int port) {
        try (ServerSocket s = new ServerSocket()) {
            s.setReuseAddress(true);
            s.bind(new InetSocketAddress(InetAddress.getByName(HOST), port));
            return true;
        } catch (IOException e) {
            return false;
        }
    }

    /** True when something accepts TCP connections on {@code port}. */
    public static boolean isListening(int port, int timeoutMs) {
        return isListening(HOST, port, timeoutMs);
    }

    /** Whether something accepts connections at {@code host:port} within {@code timeoutMs}. */
    public static boolean isListening(String host, int port, int timeoutMs) {
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(host, port), timeoutMs);
            return true;
        } catch (IOException e) {
            return false;
        }
    }
}
