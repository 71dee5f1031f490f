package io.orbitkv.pd.kvbridge;

import io.orbitkv.pd.events.AllBlocksCleared;
import io.orbitkv.pd.events.DeadLetter;
import io.orbitkv.pd.events.KvCacheEvent;
import io.orbitkv.pd.schemas.Topics;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicLong;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;
import org.zeromq.SocketType;
import org.zeromq.ZContext;
import org.zeromq.ZMQ;
import org.zeromq.ZMsg;

/**
 * One vLLM engine's KV-cache events into {@code orbitkv.kv-events}, as the engines on the engine API report theirs
 * (docs/routing.md): subscribes to the engine's ZMQ publisher ({@code --kv-events-config}: PUB frames {@code [topic, 8-byte
 * big-endian sequence, msgpack KVEventBatch]}), decodes each batch ({@link VllmKvEvents}) and writes each event as a
 * {@code KvCacheEvent} keyed by the engine id, numbered from 1 without gaps within the bridge's instance epoch.
 *
 * <p>The publisher's sequence numbers are watched: a number past the next expected is a gap (the subscriber's queue
 * overflowed, or it joined late) — the missing batches are asked for on vLLM's replay socket (a DEALER sending
 * {@code ["", start_seq]}; the ROUTER answers each buffered batch from there as {@code ["", topic, seq, payload]}, or
 * {@code ["", seq, payload]} before vLLM PR #45177, then an end marker of sequence -1 and an empty payload) and written in
 * order before the batch that showed the gap. What cannot be replayed (no replay socket, the buffer moved on, the replay
 * timed out) is lost: the bridge then starts a new instance epoch with an {@code AllBlocksCleared} ("events_lost"), so a
 * router forgets what it may no longer know rather than trust a cache that may have evicted blocks. A number below the
 * expected one means the publisher restarted (vLLM counts from 0 again): a new epoch too ("new_instance"); so does a
 * connection to the publisher made again after it dropped ("reconnected": the engine may have restarted and counted past
 * the old numbers, and what it published meanwhile is not known). At its first batch, and at the first after either, the
 * bridge asks for what the publisher still buffers from 0 (blocks cached before it subscribed).
 *
 * <p>A batch that does not decode, or a message that is not three frames with an 8-byte number, goes to the dead-letter
 * topic with the reason; the bridge goes on. One thread owns the sockets (ZMQ sockets are not thread-safe).
 */
public final class KvEventsBridge implements AutoCloseable {

    private static final Logger log = LoggerFactory.getLogger(KvEventsBridge.class);
    /** vLLM's end-of-replay marker: sequence -1 as 8 bytes. */
    private static final long END_SEQ = -1L;

    private final BridgeConfig config;
    private final Producer<String, byte[]> producer;
    private final Topics topics;
    private final String component;
    private final Thread thread;
    private final java.util.concurrent.CompletableFuture<Void> stopped = new java.util.concurrent.CompletableFuture<>();
    private volatile boolean closed;
    private volatile boolean subscribed;
    private boolean ownsProducer;

    // the bridge thread's own
    private long epoch;
    private long eventSeq;
    private long expected = -1;
    private ZMQ.Socket replay;

    private final AtomicLong batches = new AtomicLong();
    private final AtomicLong events = new AtomicLong();
    private final AtomicLong replayedBatches = new AtomicLong();
    private final AtomicLong gaps = new AtomicLong();
    private final AtomicLong lostBatches = new AtomicLong();
    private final AtomicLong restarts = new AtomicLong();
    private final AtomicLong reconnects = new AtomicLong();
    private final AtomicLong historyBatches = new AtomicLong();
    private final AtomicLong deadLettered = new AtomicLong();
    private final AtomicLong sendFailures = new AtomicLong();
    private final AtomicLong written = new AtomicLong();
    private final AtomicLong lastSeq = new AtomicLong(-1);

    public KvEventsBridge(BridgeConfig config, Producer<String, byte[]> producer, Topics topics) {
        this.config = config;
        this.producer = producer;
        this.topics = topics;
        this.component = "kv-events-bridge:" + config.engineId();
        this.epoch = config.instanceEpoch() > 0 ? config.instanceEpoch() : System.currentTimeMillis();
        this.thread = Thread.ofPlatform().name("kv-events-bridge-" + config.engineId()).unstarted(this::run);
    }

    /**
     * A bridge with its own Kafka producer (the project's fact-producer settings: idempotent, acks=all), the topics made
     * if missing; {@link #close} closes the producer.
     */
    public static KvEventsBridge open(BridgeConfig config) {
        Topics topics = new Topics(config.topics(), io.orbitkv.pd.schemas.EventSerdes.create(config.serde()));
        io.orbitkv.pd.schemas.TopicAdmin.ensure(io.orbitkv.pd.schemas.config.KafkaClients.admin(config.bootstrapServers(), config.kafkaOverrides()),
                topics);
        Producer<String, byte[]> producer = new org.apache.kafka.clients.producer.KafkaProducer<>(io.orbitkv.pd.schemas.config.KafkaClients
                .factProducer(config.bootstrapServers(), "kv-events-bridge-" + config.engineId(), new java.util.HashMap<>(config.kafkaOverrides())),
                new org.apache.kafka.common.serialization.StringSerializer(), new org.apache.kafka.common.serialization.ByteArraySerializer());
        KvEventsBridge b = new KvEventsBridge(config, producer, topics);
        b.ownsProducer = true;
        return b;
    }

    public KvEventsBridge start() {
        thread.start();
        return this;
    }

    /** Whether the subscription is up (its socket connected; ZMQ still delivers only what is published after the join). */
    public boolean subscribed() {
        return subscribed;
    }

    /**
     * Counters: batches decoded and events sent, batches replayed, gaps seen, batches lost, publisher restarts and
     * reconnects, dead letters, sends that failed, and records the broker acknowledged ({@code written}, clears included).
     */
    public Map<String, Long> snapshot() {
        Map<String, Long> m = new LinkedHashMap<>();
        m.put("batches", batches.get());
        m.put("events", events.get());
        m.put("replayed_batches", replayedBatches.get());
        m.put("gaps", gaps.get());
        m.put("lost_batches", lostBatches.get());
        m.put("restarts", restarts.get());
        m.put("reconnects", reconnects.get());
        m.put("history_batches", historyBatches.get());
        m.put("dead_lettered", deadLettered.get());
        m.put("send_failures", sendFailures.get());
        m.put("written", written.get());
        m.put("last_seq", lastSeq.get());
        return m;
    }

    private void run() {
        try (ZContext ctx = new ZContext()) {
            ZMQ.Socket sub = ctx.createSocket(SocketType.SUB);
            sub.setRcvHWM(100_000); // as vLLM's publisher's own default: a slow moment is absorbed, not dropped
            sub.setReceiveTimeOut(100);
            sub.subscribe(config.zmqTopic().getBytes(StandardCharsets.UTF_8));
            sub.connect(config.endpoint());
            if (!config.replayEndpoint().isEmpty()) {
                replay = ctx.createSocket(SocketType.DEALER);
                replay.setRcvHWM(100_000); // a replay answers up to vLLM's whole buffer (10,000 batches by default)
                replay.setReceiveTimeOut((int) Math.min(Integer.MAX_VALUE, config.replayTimeout().toMillis()));
                replay.setLinger(0);
                replay.connect(config.replayEndpoint());
            }
            // the subscription's connection events: a connection made again after a drop may be to a restarted engine
            String monitorAddress = "inproc://kv-events-bridge-monitor-" + System.identityHashCode(this);
            sub.monitor(monitorAddress, ZMQ.EVENT_CONNECTED | ZMQ.EVENT_DISCONNECTED);
            ZMQ.Socket monitor = ctx.createSocket(SocketType.PAIR);
            monitor.connect(monitorAddress);
            subscribed = true;
            log.atInfo().addKeyValue("engineId", config.engineId()).log("subscribed to " + config.endpoint() + (replay != null ? ", replay "
                    + config.replayEndpoint() : ", no replay socket") + "; writing under instance epoch " + epoch);
            boolean dropped = false;
            while (!closed) {
                ZMsg m = ZMsg.recvMsg(sub);
                // connection events before the message: a new connection's first message must not count as the old one's
                for (ZMQ.Event e = ZMQ.Event.recv(monitor, ZMQ.DONTWAIT); e != null; e = ZMQ.Event.recv(monitor, ZMQ.DONTWAIT)) {
                    if (e.getEvent() == ZMQ.EVENT_DISCONNECTED) {
                        dropped = true;
                    } else if (e.getEvent() == ZMQ.EVENT_CONNECTED && dropped) {
                        dropped = false;
                        reconnects.incrementAndGet();
                        if (expected >= 0) {
                            newEpoch("reconnected", "the connection to the publisher was made again");
                            expected = -1;
                        }
                    }
                }
                if (m != null) {
                    onMessage(m);
                }
            }
        } catch (RuntimeException | Error e) {
            if (!closed) {
                log.atError().setCause(e).log("kv-events bridge for " + config.engineId() + " stopped");
            }
            stopped.completeExceptionally(e);
        } finally {
            stopped.complete(null);
        }
    }

    /** Completes when the bridge's thread ends: normally after {@link #close}, exceptionally when it failed on its own. */
    public java.util.concurrent.CompletableFuture<Void> stopped() {
        return stopped;
    }

    /** One PUB message: {@code [topic, seq, payload]}. */
    private void onMessage(ZMsg m) {
        if (m.size() != 3 || m.peekLast() == null) {
            deadLetter(-1, new byte[0], m.isEmpty() ? new byte[0] : m.getLast().getData(), "MALFORMED_FRAME",
                    "a publisher message is 3 frames [topic, 8-byte sequence, payload], got " + m.size());
            return;
        }
        byte[] topic = m.pop().getData();
        byte[] seqBytes = m.pop().getData();
        byte[] payload = m.pop().getData();
        if (seqBytes.length != 8) {
            deadLetter(-1, topic, payload, "MALFORMED_FRAME", "the sequence frame has " + seqBytes.length + " bytes, not 8");
            return;
        }
        long seq = ByteBuffer.wrap(seqBytes).getLong();
        if (expected >= 0 && seq < expected) {
            // vLLM numbers batches from 0 per publisher: a smaller number is a new publisher (the engine restarted)
            restarts.incrementAndGet();
            newEpoch("new_instance", "the publisher restarted (sequence " + seq + " after " + (expected - 1) + ")");
            expected = -1; // its first batch: what it buffered before this one is its history
        }
        if (expected < 0 && seq > 0 && replay != null) {
            recover(0, seq, false); // the first batch: what the publisher still buffers from before the bridge subscribed
        } else if (expected >= 0 && seq > expected) {
            gaps.incrementAndGet();
            recover(expected, seq, true);
        }
        apply(seq, topic, payload);
    }

    /**
     * Asks the replay socket for batches {@code [from, to)} and writes them in order; a batch it cannot give is lost.
     * {@code gap}: the missing batches came after ones already written (a lost one loses what the router knows); else
     * history from before the subscription (what is not there was never known).
     */
    private void recover(long from, long to, boolean gap) {
        long next = from;
        if (replay != null) {
            // what an earlier replay still had on the way (it stops reading once it has what it needs): not this one's
            while (replay.recv(ZMQ.DONTWAIT) != null) {
                // drained
            }
            replay.sendMore(new byte[0]);
            replay.send(ByteBuffer.allocate(8).putLong(from).array());
            while (true) {
                ZMsg r = ZMsg.recvMsg(replay);
                if (r == null) {
                    log.atWarn().addKeyValue("engineId", config.engineId()).log("replay from " + config.replayEndpoint() + " timed out after "
                            + config.replayTimeout().toMillis() + " ms");
                    break;
                }
                if (!r.isEmpty() && r.peekFirst().size() == 0) {
                    r.pop(); // the DEALER's empty delimiter
                }
                if (r.size() == 2) {
                    r.push(new byte[0]); // before vLLM PR #45177 a replayed batch had no topic frame
                }
                if (r.size() != 3) {
                    log.atWarn().log("replay answered a message of " + r.size() + " frames; replay abandoned");
                    break;
                }
                byte[] seqBytes = r.toArray(new org.zeromq.ZFrame[0])[1].getData();
                long s = seqBytes.length == 8 ? ByteBuffer.wrap(seqBytes).getLong() : -2;
                if (s == END_SEQ || r.getLast().size() == 0) {
                    break;
                }
                if (s < next || s >= to) {
                    continue; // before what is missing, or what the live stream brings anyway
                }
                if (s > next) {
                    lost(next, s, gap);
                }
                byte[] topic = r.pop().getData();
                r.pop();
                apply(s, topic, r.pop().getData());
                (gap ? replayedBatches : historyBatches).incrementAndGet();
                next = s + 1;
                if (next >= to) {
                    break; // all that was missing; the rest of the answer (and its end marker) is drained next time
                }
            }
        }
        if (next < to) {
            lost(next, to, gap);
        }
    }

    private void lost(long from, long to, boolean gap) {
        if (!gap) {
            log.atInfo().addKeyValue("engineId", config.engineId()).log("batches " + from + ".." + (to - 1) + " from before the bridge"
                    + " subscribed are no longer buffered by the publisher: blocks cached then are unknown until stored again");
            return;
        }
        lostBatches.addAndGet(to - from);
        newEpoch("events_lost", "batches " + from + ".." + (to - 1) + " were lost (not replayed)");
    }

    /** Starts a new instance epoch: a router drops what it knew of the engine. */
    private void newEpoch(String reason, String why) {
        epoch = Math.max(epoch + 1, System.currentTimeMillis());
        eventSeq = 0;
        log.atWarn().addKeyValue("engineId", config.engineId()).log(why + ": KV events go on under a new instance epoch " + epoch
                + ", starting from an empty cache");
        send(0, AllBlocksCleared.newBuilder().setReason(reason).build());
    }

    private void apply(long seq, byte[] topic, byte[] payload) {
        expected = seq + 1;
        lastSeq.set(seq);
        VllmKvEvents.Batch b;
        try {
            b = VllmKvEvents.decode(payload);
        } catch (VllmKvEvents.Invalid e) {
            deadLetter(seq, topic, payload, "UNDECODABLE", "batch " + seq + ": " + e.getMessage());
            return;
        }
        batches.incrementAndGet();
        for (Object ev : b.events()) {
            send(++eventSeq, ev);
            events.incrementAndGet();
        }
    }

    private void send(long seq, Object payload) {
        KvCacheEvent ev = KvCacheEvent.newBuilder().setEngineId(config.engineId()).setInstanceEpoch(epoch).setSeq(seq)
                .setEventTimeMs(System.currentTimeMillis()).setPayload(payload).build();
        String t = topics.kvEvents().name();
        producer.send(new ProducerRecord<>(t, config.engineId(), topics.kvEvents().valueSerde().serializer().serialize(t, ev)), (md, err) -> {
            if (err == null) {
                written.incrementAndGet();
            } else if (sendFailures.getAndIncrement() % 1000 == 0) {
                log.atWarn().log("could not write a KV event of " + config.engineId() + " (" + sendFailures.get() + " so far): " + err);
            }
        });
    }

    private void deadLetter(long seq, byte[] topic, byte[] payload, String type, String reason) {
        deadLettered.incrementAndGet();
        log.atWarn().addKeyValue("engineId", config.engineId()).log("dead-lettered a publisher message: " + reason);
        DeadLetter d = DeadLetter.newBuilder().setComponent(component).setTopic("zmq:" + config.endpoint()).setPartition(-1).setOffset(seq)
                .setOriginalKey(ByteBuffer.wrap(topic)).setOriginalValue(ByteBuffer.wrap(payload)).setReason(reason).setErrorType(type)
                .setDeadLetteredAtMs(System.currentTimeMillis()).build();
        String t = topics.deadLetters().name();
        producer.send(new ProducerRecord<>(t, config.engineId(), topics.deadLetters().valueSerde().serializer().serialize(t, d)));
    }

    @Override
    public void close() {
        closed = true;
        try {
            thread.join(Duration.ofSeconds(5));
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        producer.flush();
        if (ownsProducer) {
            producer.close(Duration.ofSeconds(5));
        }
    }
}
