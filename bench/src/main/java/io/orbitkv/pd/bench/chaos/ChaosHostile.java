package io.orbitkv.pd.bench.chaos;

import io.orbitkv.pd.harness.Pipeline;
import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.DeadLetter;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.DecodeReady;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.events.KvLayout;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.ReleaseSide;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransportEndpoint;
import io.orbitkv.pd.schemas.Topics;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.concurrent.Callable;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The hostile-input corpus, fired at every door of a live pipeline while good traffic runs: malformed and forged
 * records on the input topics (each must come out on the dead-letter topic, the original bytes with a reason), random
 * bytes, an impossible length and stalls on a worker's tcp port (each connection closed, the worker serving on), and
 * malformed, oversized and abandoned requests at the proxy (each refused with a 4xx a user can act on, abandoned
 * connections closed). One row per input: what was expected and what happened.
 */
final class ChaosHostile {

    /** One hostile input: where it went, what it was, what should happen, what did. */
    record Door(String door, String input, String expected, String got, boolean ok) { }

    /** A record sent to a topic that must come out dead-lettered (matched by topic and original bytes). */
    private record Sent(String door, String input, String topic, byte[] value, String expectedType) { }

    private static final HttpClient HTTP = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(Duration.ofSeconds(2))
            .build();

    private final Pipeline pipeline;
    private final Topics topics;
    private final String model;
    private final Duration tcpIoTimeout;
    private final Duration engineApiIoTimeout = io.orbitkv.pd.worker.EngineApiConfig.DEFAULT_IO_TIMEOUT;
    private final Duration proxyIdle;
    private final Random random = new Random(22);
    private final List<Sent> records = new ArrayList<>();
    private final List<Door> doors = new ArrayList<>();
    private final List<Future<Door>> pending = new ArrayList<>();
    private final ExecutorService threads = Executors.newVirtualThreadPerTaskExecutor();

    ChaosHostile(Pipeline pipeline, Topics topics, String model, Duration tcpIoTimeout, Duration proxyIdle) {
        this.pipeline = pipeline;
        this.topics = topics;
        this.model = model;
        this.tcpIoTimeout = tcpIoTimeout;
        this.proxyIdle = proxyIdle;
    }

    /** Sends the whole corpus; the connection checks go on in the background until {@link #verify()}. */
    void fire() throws Exception {
        topicsCorpus();
        tcpCorpus();
        engineApiCorpus();
        proxyCorpus();
    }

    /** Waits for the connection checks, then reads the dead-letter topic for every record that must be there. */
    List<Door> verify() throws Exception {
        for (Future<Door> f : pending) {
            doors.add(f.get());
        }
        threads.close();
        List<DeadLetter> dead = deadLetters();
        for (Sent s : records) {
            DeadLetter d = dead.stream().filter(x -> x.getTopic().equals(s.topic()) && x.getOriginalValue() != null
                    && Arrays.equals(bytes(x.getOriginalValue()), s.value())).findFirst().orElse(null);
            boolean ok = d != null && (s.expectedType() == null || s.expectedType().equals(d.getErrorType()));
            doors.add(new Door(s.door(), s.input(), "dead letter" + (s.expectedType() == null ? "" : " " + s.expectedType()),
                    d == null ? "no dead letter" : d.getErrorType() + " by " + d.getComponent() + ": " + shorten(d.getReason()), ok));
        }
        return List.copyOf(doors);
    }

    // ------------------------------------------------------------------------------------------------ topics

    private void topicsCorpus() throws Exception {
        String re = topics.requestEvents().name();
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(Map.of("bootstrap.servers", pipeline.bootstrapServers(), "acks", "all"),
                new ByteArraySerializer(), new ByteArraySerializer())) {
            byte[] valid = event("chaos-hostile-3", decodeReady(0));
            send(producer, "request-events", "random bytes", re, key("chaos-hostile-1"), randomBytes(200), "UNDECODABLE");
            send(producer, "request-events", "truncated Avro", re, key("chaos-hostile-2"), Arrays.copyOf(valid, valid.length / 2), "UNDECODABLE");
            byte[] wrongSchema = valid.clone();
            for (int i = 2; i < 10 && i < wrongSchema.length; i++) {
                wrongSchema[i] ^= (byte) 0x5A; // the single-object encoding's schema fingerprint
            }
            send(producer, "request-events", "wrong schema id", re, key("chaos-hostile-3"), wrongSchema, "UNDECODABLE");
            // after the header, a string length of 2^30 (zig-zag varint) and nothing behind it
            byte[] huge = {(byte) 0x80, (byte) 0x80, (byte) 0x80, (byte) 0x80, 0x08};
            byte[] forged = concat(Arrays.copyOf(valid, 10), huge, randomBytes(6));
            send(producer, "request-events", "forged length (2^30 bytes)", re, key("chaos-hostile-4"), forged, "UNDECODABLE");
            send(producer, "request-events", "null key", re, null, event("chaos-hostile-5", decodeReady(0)), "KEY_MISMATCH");
            send(producer, "request-events", "key is not the request id", re, key("somebody-else"), event("chaos-hostile-6", decodeReady(0)),
                    "KEY_MISMATCH");
            send(producer, "request-events", "page run outside the pool", re, key("chaos-hostile-7"), event("chaos-hostile-7",
                    decodeReady(2_000_000_000)), "OUT_OF_BOUNDS");
            send(producer, "request-events", "unknown request id", re, key("chaos-hostile-8"), event("chaos-hostile-8",
                    TransferCompleted.newBuilder().setOrderId("chaos-hostile-8/a1").setAttempt(1).setWorkerId("w").setBytes(1).setDurationUs(1).build()),
                    "UNKNOWN_REQUEST");
            String ec = topics.engineCommands().name();
            int ecPartitions = producer.partitionsFor(ec).size();
            send(producer, "engine-commands", "random bytes", ec, key("prefill-0"), randomBytes(120), null,
                    io.orbitkv.pd.engine.client.CommandRouting.partitionFor("prefill-0", ecPartitions));
            Decision release = Decision.newBuilder().setRequestId("chaos-hostile-10").setDecisionId("chaos-hostile-10/forged").setSeq(0)
                    .setStreamTimeMs(System.currentTimeMillis()).setPayload(ReleaseDecided.newBuilder().setEngineId("decode-0")
                            .setSide(ReleaseSide.DECODE).setBlocks(List.of(run(0, 4))).setLeaseId("lease/decode-0/chaos-hostile-10").setLeaseEpoch(7L)
                            .setReason("forged").build()).build();
            send(producer, "engine-commands", "release for an unknown request (stale lease)", ec, key("decode-0"),
                    topics.engineCommands().valueSerde().serializer().serialize(ec, release), "UNKNOWN_REQUEST",
                    io.orbitkv.pd.engine.client.CommandRouting.partitionFor("decode-0", ecPartitions));
            String en = topics.engines().name();
            send(producer, "engines", "random bytes for decode-0", en, key("decode-0"), randomBytes(90), null);
            EngineRegistration older = EngineRegistration.newBuilder().setEngineId("decode-0").setRole(EngineRole.DECODE).setInstanceEpoch(-1)
                    .setModel(model).setHttpUrl("http://127.0.0.1:9/forged").setEndpoints(List.<TransportEndpoint>of()).setRegions(List.of())
                    .setRegisteredAtMs(0).setDeregistered(false).setLayout(layout(0)).build();
            send(producer, "engines", "older instance epoch for decode-0", en, key("decode-0"), topics.engines().valueSerde().serializer()
                    .serialize(en, older), null);
            producer.flush();
        }
    }

    private void send(KafkaProducer<byte[], byte[]> producer, String door, String input, String topic, byte[] key, byte[] value, String type)
            throws Exception {
        send(producer, door, input, topic, key, value, type, null);
    }

    private void send(KafkaProducer<byte[], byte[]> producer, String door, String input, String topic, byte[] key, byte[] value, String type,
                      Integer partition) throws Exception {
        producer.send(new ProducerRecord<>(topic, partition, key, value)).get();
        records.add(new Sent(door, input, topic, value, type));
    }

    private byte[] event(String requestId, Object payload) {
        RequestEvent e = RequestEvent.newBuilder().setRequestId(requestId).setEventId(requestId + "/hostile").setSource("chaos")
                .setEventTimeMs(System.currentTimeMillis()).setPayload(payload).build();
        return topics.requestEvents().valueSerde().serializer().serialize(topics.requestEvents().name(), e);
    }

    private static DecodeReady decodeReady(int start) {
        return DecodeReady.newBuilder().setEngineId("decode-9").setInstanceEpoch(1).setLeaseId("lease-hostile").setLeaseEpoch(1)
                .setDestBlocks(List.of(run(start, 8))).setLeaseDeadlineMs(0).setLayout(layout(256)).build();
    }

    private static KvLayout layout(int blocks) {
        return KvLayout.newBuilder().setNumLayers(4).setKvSplit(KvSplit.SEPARATE).setBlockSizeTokens(16).setNumKvHeads(2).setHeadDim(64)
                .setDtype(Dtype.BF16).setTpRank(0).setTpSize(1).setPageBytes(16 * 2 * 64 * 2).setNumBlocks(Math.max(blocks, 1)).build();
    }

    private static BlockRun run(int start, int count) {
        return BlockRun.newBuilder().setStart(start).setCount(count).build();
    }

    private List<DeadLetter> deadLetters() {
        List<DeadLetter> out = new ArrayList<>();
        String t = topics.deadLetters().name();
        readToEnd(t, r -> out.add(topics.deadLetters().valueSerde().deserializer().deserialize(t, r.value())));
        return out;
    }

    /** Every record of {@code topic} up to its end now (30 s at most), to {@code sink}; records it cannot take are skipped. */
    private void readToEnd(String topic, java.util.function.Consumer<ConsumerRecord<byte[], byte[]>> sink) {
        try (KafkaConsumer<byte[], byte[]> c = new KafkaConsumer<>(Map.of("bootstrap.servers", pipeline.bootstrapServers()),
                new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            List<TopicPartition> parts = c.partitionsFor(topic).stream().map(p -> new TopicPartition(topic, p.partition())).toList();
            c.assign(parts);
            c.seekToBeginning(parts);
            Map<TopicPartition, Long> end = c.endOffsets(parts);
            long deadline = System.nanoTime() + 30_000_000_000L;
            while (parts.stream().anyMatch(p -> c.position(p) < end.get(p)) && System.nanoTime() < deadline) {
                for (ConsumerRecord<byte[], byte[]> r : c.poll(Duration.ofMillis(200))) {
                    try {
                        sink.accept(r);
                    } catch (RuntimeException e) {
                        // a record that does not decode: another's (or one of the corpus), not this reader's to judge
                    }
                }
            }
        }
    }

    // ------------------------------------------------------------------------------------------------ tcp

    private void tcpCorpus() {
        InetSocketAddress tcp = workerTcp("decode-0");
        if (tcp == null) {
            doors.add(new Door("worker tcp", "(all)", "a tcp endpoint for decode-0", "none registered", false));
            return;
        }
        Duration bound = tcpIoTimeout.plusSeconds(3);
        closedWithin("worker tcp", "random bytes", tcp, randomBytes(64), bound);
        ByteBuffer h = ByteBuffer.allocate(24).putInt(0x4F4B5654).put((byte) 1).put((byte) 1).putShort((short) 0).putInt(1).putInt(-1).putLong(0);
        closedWithin("worker tcp", "HELLO with a 4 GiB body length", tcp, h.array(), bound);
        closedWithin("worker tcp", "a header that stalls after 6 bytes", tcp, Arrays.copyOf(h.array(), 6), bound);
        closedWithin("worker tcp", "connect and say nothing", tcp, new byte[0], bound);
    }

    private InetSocketAddress workerTcp(String engine) {
        String t = topics.engines().name();
        String[] address = {null};
        readToEnd(t, r -> {
            EngineRegistration reg = topics.engines().valueSerde().deserializer().deserialize(t, r.value());
            if (reg.getEngineId().equals(engine) && reg.getInstanceEpoch() > 0) {
                for (TransportEndpoint e : reg.getEndpoints()) {
                    if (e.getTransport().equals("tcp")) {
                        address[0] = e.getAddress();
                    }
                }
            }
        });
        if (address[0] == null) {
            return null;
        }
        int colon = address[0].lastIndexOf(':');
        return new InetSocketAddress(address[0].substring(0, colon), Integer.parseInt(address[0].substring(colon + 1)));
    }

    /**
     * Connects (tcp or a Unix socket), sends {@code bytes}, and waits for the peer to close: ok when it does within
     * {@code bound}. An answer carrying an error code (the engine API's) is named in the row.
     */
    private void closedWithin(String door, String input, java.net.SocketAddress to, byte[] bytes, Duration bound) {
        pending.add(threads.submit((Callable<Door>) () -> {
            long t0 = System.nanoTime();
            StringBuilder said = new StringBuilder();
            java.util.concurrent.atomic.AtomicBoolean cut = new java.util.concurrent.atomic.AtomicBoolean();
            try (java.nio.channels.SocketChannel ch = java.nio.channels.SocketChannel.open(to)) {
                ByteBuffer out = ByteBuffer.wrap(bytes);
                while (out.hasRemaining()) {
                    ch.write(out);
                }
                // a blocking channel has no read timeout: a watchdog closes it past the bound (then the door failed)
                Thread guard = Thread.ofVirtual().start(() -> {
                    try {
                        Thread.sleep(bound.toMillis() + 5000);
                        cut.set(true);
                        ch.close();
                    } catch (InterruptedException | java.io.IOException e) {
                        // closed by the peer in time
                    }
                });
                ByteBuffer in = ByteBuffer.allocate(4096);
                while (ch.read(in) >= 0) {
                    in.flip();
                    said.append(StandardCharsets.UTF_8.decode(in));
                    in.clear();
                }
                guard.interrupt();
            } catch (java.io.IOException e) {
                // reset by the peer, or closed by the guard: told apart below
            }
            double secs = (System.nanoTime() - t0) / 1e9;
            String expected = "closed within " + bound.toSeconds() + " s";
            if (cut.get()) {
                return new Door(door, input, expected, String.format(java.util.Locale.ROOT, "still open after %.0f s", secs), false);
            }
            java.util.regex.Matcher code = java.util.regex.Pattern.compile("\"code\"\\s*:\\s*\"([a-z_]+)\"").matcher(said);
            return new Door(door, input, expected, String.format(java.util.Locale.ROOT, "closed after %.1f s%s", secs,
                    code.find() ? " (answered " + code.group(1) + ")" : ""), secs <= bound.toSeconds());
        }));
    }

    // ------------------------------------------------------------------------------------------------ engine API

    /** The engine API of the first engine that has one (a Python engine's worker): a local door, but a door. */
    private void engineApiCorpus() {
        java.nio.file.Path socket = pipeline.engines().stream().map(e -> pipeline.engineApiSocket(e.id())).flatMap(java.util.Optional::stream)
                .findFirst().orElse(null);
        if (socket == null) {
            return; // no engine on an engine API in this pipeline (--python-engines none)
        }
        Duration bound = engineApiIoTimeout.plusSeconds(3);
        java.net.UnixDomainSocketAddress api = java.net.UnixDomainSocketAddress.of(socket);
        closedWithin("engine API", "random bytes", api, randomBytes(64), bound);
        closedWithin("engine API", "a frame of 4 GiB", api, new byte[] {(byte) 0xFF, (byte) 0xFF, (byte) 0xFF, (byte) 0xFF, 1, 2}, bound);
        closedWithin("engine API", "a frame that stalls after 2 bytes", api, new byte[] {0, 0}, bound);
        closedWithin("engine API", "connect and say nothing", api, new byte[0], bound);
    }

    // ------------------------------------------------------------------------------------------------ proxy

    private void proxyCorpus() {
        String url = pipeline.proxyUrl() + "/v1/completions";
        String chat = pipeline.proxyUrl() + "/v1/chat/completions";
        String m = "\"model\":\"" + model + "\"";
        status("invalid JSON", url, "{\"model\": \"x\", \"prompt\": ", Map.of(), 400);
        status("wrong types", url, "{" + m + ",\"prompt\":\"hi\",\"max_tokens\":\"ten\"}", Map.of(), 400);
        status("negative max_tokens", url, "{" + m + ",\"prompt\":\"hi\",\"max_tokens\":-5}", Map.of(), 400);
        status("huge max_tokens", url, "{" + m + ",\"prompt\":\"hi\",\"max_tokens\":1000000000}", Map.of(), 400);
        status("unknown model", url, "{\"model\":\"no-such-model\",\"prompt\":\"hi\",\"max_tokens\":4}", Map.of(), 404);
        StringBuilder many = new StringBuilder("{" + m + ",\"max_tokens\":4,\"messages\":[");
        for (int i = 0; i < 10_000; i++) {
            many.append(i == 0 ? "" : ",").append("{\"role\":\"user\",\"content\":\"m").append(i).append("\"}");
        }
        status("10,000 messages", chat, many.append("]}").toString(), Map.of(), 400);
        byte[] big = new byte[50 << 20];
        Arrays.fill(big, (byte) 'a');
        status("50 MiB body", url, new String(big, StandardCharsets.US_ASCII), Map.of(), 413);
        status("malformed traceparent (ignored: a new trace)", url, "{" + m + ",\"prompt\":\"hi\",\"max_tokens\":4}",
                Map.of("traceparent", "00-zz-not-a-trace-01"), 200);
        // Hundreds of connections opened and abandoned: a sample of them must be closed by the proxy's idle deadline.
        InetSocketAddress proxy = new InetSocketAddress("127.0.0.1", URI.create(pipeline.proxyUrl()).getPort());
        List<Socket> abandoned = new ArrayList<>();
        for (int i = 0; i < 300; i++) {
            try {
                Socket s = new Socket();
                s.connect(proxy, 2000);
                if (i % 2 == 1) {
                    s.getOutputStream().write("POST /v1/completions HTTP/1.1\r\nhost: x\r\n".getBytes(StandardCharsets.US_ASCII));
                }
                abandoned.add(s);
            } catch (java.io.IOException e) {
                doors.add(new Door("proxy", "300 connections opened, half with a stalled head, abandoned", "all accepted", "connection " + i + " refused: " + e, false));
                break;
            }
        }
        Duration bound = proxyIdle.plusSeconds(3);
        closedWithin("proxy", "a connection opened and abandoned (timed)", proxy, new byte[0], bound);
        pending.add(threads.submit(() -> {
            // the other 299: each must be closed by then as well
            long open = 0;
            Thread.sleep(bound.toMillis());
            for (Socket s : abandoned) {
                try {
                    s.setSoTimeout(200);
                    if (s.getInputStream().read() >= 0) {
                        open++;
                    }
                } catch (java.net.SocketTimeoutException e) {
                    open++;
                } catch (java.io.IOException e) {
                    // closed (reset)
                } finally {
                    s.close();
                }
            }
            return new Door("proxy", "the 300 abandoned connections themselves", "closed within " + bound.toSeconds() + " s", open + " still open",
                    open == 0);
        }));
    }

    private void status(String input, String url, String body, Map<String, String> headers, int expected) {
        try {
            HttpRequest.Builder b = HttpRequest.newBuilder(URI.create(url)).timeout(Duration.ofSeconds(30)).header("content-type", "application/json")
                    .POST(HttpRequest.BodyPublishers.ofString(body));
            headers.forEach(b::header);
            HttpResponse<String> r = HTTP.send(b.build(), HttpResponse.BodyHandlers.ofString());
            String msg = r.statusCode() == 200 ? "" : ": " + shorten(r.body());
            doors.add(new Door("proxy", input, Integer.toString(expected), r.statusCode() + msg, r.statusCode() == expected));
        } catch (Exception e) {
            // the proxy may answer 413 and close before the 50 MiB are sent: what the client saw is the answer
            doors.add(new Door("proxy", input, Integer.toString(expected), "no answer: " + e, false));
        }
    }

    // ------------------------------------------------------------------------------------------------ helpers

    private byte[] randomBytes(int n) {
        byte[] b = new byte[n];
        random.nextBytes(b);
        return b;
    }

    private static byte[] key(String s) {
        return s.getBytes(StandardCharsets.UTF_8);
    }

    private static byte[] bytes(ByteBuffer b) {
        ByteBuffer d = b.duplicate();
        byte[] out = new byte[d.remaining()];
        d.get(out);
        return out;
    }

    private static byte[] concat(byte[]... parts) {
        int n = 0;
        for (byte[] p : parts) {
            n += p.length;
        }
        byte[] out = new byte[n];
        int at = 0;
        for (byte[] p : parts) {
            System.arraycopy(p, 0, out, at, p.length);
            at += p.length;
        }
        return out;
    }

    private static String shorten(String s) {
        String one = s.replaceAll("\\s+", " ").strip();
        return one.length() > 160 ? one.substring(0, 160) + "..." : one;
    }
}
