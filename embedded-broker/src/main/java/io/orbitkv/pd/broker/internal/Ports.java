package io.orbitkv.pd.broker.internal;

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

    private Ports() {
    }

    /**
     * Picks {@code n} distinct free loopback ports. All sockets stay open until every port is chosen so the
     * kernel cannot hand out the same port twice; there is still a window between closing them and the
     * broker binding, which is the accepted price of not owning the broker's sockets.
     */
    public static List<Integer> free(int n) {
        List<ServerSocket> held = new ArrayList<>(n);
        try {
            for (int i = 0; i < n; i++) {
                ServerSocket s = new ServerSocket();
                held.add(s);
                s.setReuseAddress(true);
                s.bind(new InetSocketAddress(InetAddress.getByName(HOST), 0));
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
        try (Socket s = new Socket()) {
            s.connect(new InetSocketAddress(HOST, port), timeoutMs);
            return true;
        } catch (IOException e) {
            return false;
        }
    }
}
