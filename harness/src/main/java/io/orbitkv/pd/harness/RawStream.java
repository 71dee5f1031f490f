package io.orbitkv.pd.harness;

import io.orbitkv.pd.broker.ChildClasspath;
import java.io.IOException;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

/**
 * The reference a push over a link is compared with: one plain TCP stream of the same bytes between the same two hosts,
 * over the same link, in the same run. The receiver runs in one host's namespace, the sender in the other's, each a
 * small JVM ({@code RawStream recv|send}); the rate is the receiver's: bytes over the time from its first byte to its
 * last.
 */
public final class RawStream {

    private RawStream() {
    }

    /** Bytes per second of one stream of {@code bytes} from host {@code from} to host {@code to} of {@code rig}. */
    public static double measure(NetnsHosts rig, String from, String to, long bytes) throws IOException, InterruptedException {
        int port = 39_000 + (int) (System.nanoTime() % 1000);
        String cp = ChildClasspath.join(ChildClasspath.current());
        List<String> jvm = List.of(ProcessHandle.current().info().command().orElse("java"), "-Xmx128m", "-cp", cp, RawStream.class.getName());
        Path result = Files.createTempFile("orbitkv-raw-stream-", ".txt");
        Path ready = Path.of(result + ".ready");
        List<String> recv = new ArrayList<>(rig.host(to).launcher());
        recv.addAll(jvm);
        recv.addAll(List.of("recv", rig.address(to), Integer.toString(port), Long.toString(bytes), result.toString()));
        Process r = new ProcessBuilder(recv).redirectErrorStream(true).redirectOutput(ProcessBuilder.Redirect.DISCARD).start();
        try {
            // the receiver makes the ready file once bound: wait for it, not for a time
            long until = System.nanoTime() + 30_000_000_000L;
            while (!Files.exists(ready)) {
                if (!r.isAlive() || System.nanoTime() > until) {
                    throw new IOException("raw stream receiver on " + to + " did not start listening (exit " + (r.isAlive() ? "-" : r.exitValue()) + ")");
                }
                Thread.sleep(10);
            }
            List<String> send = new ArrayList<>(rig.host(from).launcher());
            send.addAll(jvm);
            send.addAll(List.of("send", rig.address(to), Integer.toString(port), Long.toString(bytes)));
            Process s = new ProcessBuilder(send).redirectErrorStream(true).start();
            String sent = new String(s.getInputStream().readAllBytes(), StandardCharsets.UTF_8).strip();
            if (!s.waitFor(10, TimeUnit.MINUTES) || s.exitValue() != 0) {
                throw new IOException("raw stream sender on " + from + ": " + sent);
            }
            if (!r.waitFor(1, TimeUnit.MINUTES) || r.exitValue() != 0) {
                throw new IOException("raw stream receiver on " + to + " did not finish");
            }
            return bytes / (Long.parseLong(Files.readString(result).strip()) / 1e9);
        } finally {
            r.destroyForcibly();
            Files.deleteIfExists(ready);
            Files.deleteIfExists(result);
        }
    }

    /**
     * {@code recv HOST PORT BYTES FILE}: makes {@code FILE.ready} once listening, then writes into {@code FILE} the nanoseconds
     * from the first byte to the last; {@code send HOST PORT BYTES}.
     */
    public static void main(String[] args) throws IOException {
        String host = args[1];
        int port = Integer.parseInt(args[2]);
        long bytes = Long.parseLong(args[3]);
        ByteBuffer buf = ByteBuffer.allocateDirect(4 << 20);
        if (args[0].equals("recv")) {
            try (ServerSocketChannel server = ServerSocketChannel.open()) {
                server.bind(new InetSocketAddress(host, port));
                Files.writeString(Path.of(args[4] + ".ready"), "listening");
                try (SocketChannel c = server.accept()) {
                    long got = 0;
                    long t0 = 0;
                    while (got < bytes) {
                        buf.clear();
                        int n = c.read(buf);
                        if (n < 0) {
                            throw new IOException("stream ended after " + got + " of " + bytes + " bytes");
                        }
                        if (got == 0 && n > 0) {
                            t0 = System.nanoTime();
                        }
                        got += n;
                    }
                    Files.writeString(Path.of(args[4]), Long.toString(System.nanoTime() - t0));
                }
            }
        } else {
            try (SocketChannel c = SocketChannel.open(new InetSocketAddress(host, port))) {
                long left = bytes;
                while (left > 0) {
                    buf.clear();
                    buf.limit((int) Math.min(buf.capacity(), left));
                    while (buf.hasRemaining()) {
                        left -= c.write(buf);
                    }
                }
            }
        }
    }
}
