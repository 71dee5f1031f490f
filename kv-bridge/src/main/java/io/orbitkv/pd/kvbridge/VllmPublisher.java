package io.orbitkv.pd.kvbridge;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import org.zeromq.SocketType;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;
import org.zeromq.ZMsg;

/**
 * A KV-event publisher speaking vLLM's wire protocol (vllm/distributed/kv_events.py, {@code ZmqEventPublisher}, at the
 * release docs/vllm.md pins): a PUB socket sending {@code [topic, seq as 8 bytes big-endian, payload]} with seq from 0, a
 * buffer of the last {@code bufferSteps} batches, and a ROUTER replay socket that answers {@code [client, "", start]} with
 * {@code [client, "", topic, seq, payload]} for every buffered batch from {@code start} on, then
 * {@code [client, "", "", -1, ""]} ({@code withTopic=false}: the replies of releases before PR #45177, without the topic).
 * Its user drives it: publish, publish to the buffer only (a batch the subscriber missed), skip a number (a batch lost).
 * For the tests and the benchmark; nothing of vLLM's code.
 */
public final class VllmPublisher implements AutoCloseable {

    private final ZContext ctx = new ZContext();
    private final ZMQ.Socket pub;
    private final ZMQ.Socket router;
    private final byte[] topic;
    private final int bufferSteps;
    private final boolean withTopic;
    private final ArrayDeque<long[]> order = new ArrayDeque<>();
    private final List<byte[]> payloads = new ArrayList<>();
    private final Thread replayThread;
    private volatile boolean closed;
    private long next;
    /** Where subscribers connect ({@code tcp://127.0.0.1:PORT}), and the replay socket. */
    public final String endpoint;
    public final String replayEndpoint;

    public VllmPublisher(String topic, int bufferSteps, boolean withTopic) {
        this(topic, bufferSteps, withTopic, 0, 0);
    }

    /** On given ports (0: any free one): a restarted engine binds its endpoints again. */
    public VllmPublisher(String topic, int bufferSteps, boolean withTopic, int port, int replayPort) {
        this.topic = topic.getBytes(StandardCharsets.UTF_8);
        this.bufferSteps = bufferSteps;
        this.withTopic = withTopic;
        pub = ctx.createSocket(SocketType.PUB);
        pub.setSndHWM(100_000);
        pub.setLinger(0);
        endpoint = bind(pub, port);
        router = ctx.createSocket(SocketType.ROUTER);
        router.setReceiveTimeOut(50);
        router.setLinger(0);
        replayEndpoint = bind(router, replayPort);
        replayThread = Thread.ofPlatform().daemon().name("vllm-publisher-replay").start(this::serveReplay);
    }

    private static String bind(ZMQ.Socket s, int port) {
        if (port == 0) {
            return "tcp://127.0.0.1:" + s.bindToRandomPort("tcp://127.0.0.1");
        }
        s.bind("tcp://127.0.0.1:" + port);
        return "tcp://127.0.0.1:" + port;
    }

    public int port() {
        return Integer.parseInt(endpoint.substring(endpoint.lastIndexOf(':') + 1));
    }

    public int replayPort() {
        return Integer.parseInt(replayEndpoint.substring(replayEndpoint.lastIndexOf(':') + 1));
    }

    private static byte[] seq(long s) {
        return ByteBuffer.allocate(8).putLong(s).array();
    }

    /** Publishes {@code payload} as the next batch; returns its number. */
    public synchronized long publish(byte[] payload) {
        long s = buffer(payload);
        pub.sendMore(topic);
        pub.sendMore(seq(s));
        pub.send(payload);
        return s;
    }

    /** Numbers and buffers the next batch without sending it: the subscriber missed it (a full queue), replay has it. */
    public synchronized long buffer(byte[] payload) {
        long s = next++;
        order.addLast(new long[] {s, payloads.size()});
        payloads.add(payload);
        while (order.size() > bufferSteps) {
            order.removeFirst();
        }
        return s;
    }

    /** Skips a number: a batch neither sent nor buffered (lost for good). */
    public synchronized long skip() {
        return next++;
    }

    private void serveReplay() {
        while (!closed) {
            ZMsg m;
            try {
                m = ZMsg.recvMsg(router);
            } catch (RuntimeException e) {
                return; // closing
            }
            if (m == null) {
                continue;
            }
            byte[] client = m.pop().getData();
            m.pop(); // ""
            long start = ByteBuffer.wrap(m.pop().getData()).getLong();
            List<long[]> from;
            synchronized (this) {
                from = order.stream().filter(e -> e[0] >= start).toList();
            }
            for (long[] e : from) {
                router.sendMore(client);
                router.sendMore(new byte[0]);
                if (withTopic) {
                    router.sendMore(topic);
                }
                router.sendMore(seq(e[0]));
                synchronized (this) {
                    router.send(payloads.get((int) e[1]));
                }
            }
            router.sendMore(client);
            router.sendMore(new byte[0]);
            if (withTopic) {
                router.sendMore(new byte[0]);
            }
            router.sendMore(seq(-1));
            router.send(new byte[0]);
        }
    }

    @Override
    public void close() {
        closed = true;
        try {
            replayThread.join(2000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        ctx.close();
    }
}
