package io.orbitkv.pd.dashboard;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.CancelRequested;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.DecodeCompleted;
import io.orbitkv.pd.events.DecodeReady;
import io.orbitkv.pd.events.DecodeRejected;
import io.orbitkv.pd.events.KvLayout;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferFailed;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.events.TransferStarted;
import io.orbitkv.pd.schemas.EventDecodingException;
import io.orbitkv.pd.schemas.Topics;
import java.time.Duration;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.locks.LockSupport;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A realistic workload against the real decider, with the event shapes of {@code bench decider}'s actor: it plays the
 * proxy and the engines (admission, decode ready, prefill completed, decode completed) and the transfer workers
 * (started, then completed after a transfer time proportional to the bytes, or failed), reading the decisions from
 * {@code engine-commands} like a worker does (deduped by decision id). One request in 20 of each scenario besides the
 * normal one, so every outcome kind and failure path shows up:
 * <ul>
 *   <li>70 %: normal handoff → COMPLETED;</li>
 *   <li>10 %: first attempt fails retriably (PEER_UNREACHABLE), the decider retries, the second completes → COMPLETED;</li>
 *   <li>5 %: the transfer fails for good (STALE_EPOCH) → FAILED;</li>
 *   <li>5 %: the client cancels once the transfer started → CANCELLED;</li>
 *   <li>5 %: the decode engine rejects the request → FAILED;</li>
 *   <li>5 %: the prefill never completes → TIMED_OUT (decider prefill timeout).</li>
 * </ul>
 * The ground truth (what the dashboard must show) is what this class sent and what the decider decided.
 */
final class Workload implements AutoCloseable {

    enum Scenario { NORMAL, RETRY, FATAL, CANCEL, REJECT, TIMEOUT }

    static final int ENGINES = 3;
    static final long PAGE = 32 << 10;
    static final long BYTES_PER_NS = 2; // 2 GB/s transfers

    final Topics topics;
    final KafkaProducer<String, RequestEvent> producer;
    final KafkaConsumer<String, byte[]> commands;
    final KafkaConsumer<String, byte[]> decisions;
    final ScheduledExecutorService workers = Executors.newScheduledThreadPool(2, Thread.ofPlatform().daemon().name("workload-worker-", 0).factory());
    final Set<String> seen = ConcurrentHashMap.newKeySet();
    final Map<String, Scenario> scenarios = new ConcurrentHashMap<>();
    final Map<OutcomeKind, AtomicLong> outcomes = new EnumMap<>(OutcomeKind.class);
    final Map<String, OutcomeKind> outcomeOf = new ConcurrentHashMap<>();
    final AtomicLong transferBytes = new AtomicLong();
    final AtomicLong transfersCompleted = new AtomicLong();
    final AtomicLong transfersFailed = new AtomicLong();
    final AtomicLong transfersFailedRetriable = new AtomicLong();
    final AtomicLong orders = new AtomicLong();
    final AtomicLong retries = new AtomicLong();
    final AtomicLong kvBytes = new AtomicLong();
    final KvLayout layout = Logs.layout();
    private final Thread commandLoop;
    private final Thread decisionLoop;
    private volatile boolean running = true;

    Workload(String bootstrap, Topics topics) {
        this.topics = topics;
        for (OutcomeKind k : OutcomeKind.values()) {
            outcomes.put(k, new AtomicLong());
        }
        producer = new KafkaProducer<>(Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap, ProducerConfig.ACKS_CONFIG, "all",
                ProducerConfig.LINGER_MS_CONFIG, 1), new StringSerializer(), topics.requestEvents().valueSerde().serializer());
        commands = consumer(bootstrap, "read_uncommitted");
        decisions = consumer(bootstrap, "read_committed");
        commands.subscribe(List.of(topics.engineCommands().name()));
        decisions.subscribe(List.of(topics.decisions().name()));
        commandLoop = Thread.ofPlatform().name("workload-commands").start(this::actOnCommands);
        decisionLoop = Thread.ofPlatform().name("workload-decisions").start(this::recordOutcomes);
    }

    private static KafkaConsumer<String, byte[]> consumer(String bootstrap, String isolation) {
        return new KafkaConsumer<>(Map.of(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap, ConsumerConfig.GROUP_ID_CONFIG,
                "workload-" + isolation + "-" + System.nanoTime(), ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest",
                ConsumerConfig.ISOLATION_LEVEL_CONFIG, isolation), new StringDeserializer(), new ByteArrayDeserializer());
    }

    static Scenario scenario(int i) {
        int r = i % 20;
        return r < 14 ? Scenario.NORMAL : r < 16 ? Scenario.RETRY : r == 16 ? Scenario.FATAL : r == 17 ? Scenario.CANCEL
                : r == 18 ? Scenario.REJECT : Scenario.TIMEOUT;
    }

    /** Sends {@code n} requests at {@code perSecond}. */
    void run(String prefix, int n, int perSecond) {
        long interval = 1_000_000_000L / perSecond;
        long next = System.nanoTime();
        for (int i = 0; i < n; i++) {
            LockSupport.parkNanos(next - System.nanoTime()); // pacing the load generator, not waiting for a result
            next += interval;
            send(prefix + i, i);
        }
        producer.flush();
    }

    private void send(String req, int i) {
        Scenario sc = scenario(i);
        scenarios.put(req, sc);
        String p = "prefill-" + i % ENGINES;
        String d = "decode-" + (i / ENGINES) % ENGINES;
        int pages = 8 * (1 + i % 4);
        List<BlockRun> src = List.of(BlockRun.newBuilder().setStart((i * 40) % 8000).setCount(pages).build());
        List<BlockRun> dst = List.of(BlockRun.newBuilder().setStart((i * 40 + 8) % 8000).setCount(pages).build());
        fact(req, "adm", RequestAdmitted.newBuilder().setModel("m").setPromptTokens(pages * 16).setMaxTokens(16).setPrefillEngineId(p)
                .setDecodeEngineId(d).build());
        if (sc == Scenario.REJECT) {
            fact(req, "rj", DecodeRejected.newBuilder().setEngineId(d).setInstanceEpoch(1).setReason("no free pages").build());
        } else {
            fact(req, "dr", DecodeReady.newBuilder().setEngineId(d).setInstanceEpoch(1).setLeaseId(req).setLeaseEpoch(1).setDestBlocks(dst)
                    .setLeaseDeadlineMs(0).setLayout(layout).build());
        }
        if (sc != Scenario.TIMEOUT) {
            fact(req, "pc", PrefillCompleted.newBuilder().setEngineId(p).setInstanceEpoch(1).setSourceBlocks(src).setNumTokens(pages * 16)
                    .setLayout(layout).build());
        }
    }

    private void fact(String req, String kind, Object payload) {
        producer.send(new ProducerRecord<>(topics.requestEvents().name(), req, RequestEvent.newBuilder().setRequestId(req)
                .setEventId(req + "/" + kind).setSource("workload").setEventTimeMs(System.currentTimeMillis()).setPayload(payload).build()));
    }

    private void actOnCommands() {
        while (running) {
            for (ConsumerRecord<String, byte[]> r : commands.poll(Duration.ofMillis(50))) {
                Decision dec;
                try {
                    dec = topics.engineCommands().valueSerde().deserializer().deserialize(r.topic(), r.value());
                } catch (EventDecodingException e) {
                    continue; // an actor skips what it cannot read (the decider dead-letters bad input)
                }
                if (!seen.add(dec.getDecisionId())) {
                    continue; // a worker dedupes by decision id
                }
                String req = dec.getRequestId();
                Scenario sc = scenarios.get(req);
                switch (dec.getPayload()) {
                    case TransferOrder o when o.getAwaitPrefill() -> { } // like an engine on Kafka: it waits for the copy with pages
                    case TransferOrder o -> onOrder(req, sc, o);
                    case KvReady k -> fact(req, "dc", DecodeCompleted.newBuilder().setEngineId(k.getDecodeEngineId()).setOutputTokens(16).build());
                    default -> { }
                }
            }
        }
    }

    private void onOrder(String req, Scenario sc, TransferOrder o) {
        orders.incrementAndGet();
        if (o.getAttempt() > 1) {
            retries.incrementAndGet();
        }
        int attempt = o.getAttempt();
        fact(req, "ts" + attempt, TransferStarted.newBuilder().setOrderId(o.getOrderId()).setAttempt(attempt).setWorkerId("worker:" + o.getSourceEngineId())
                .setTransport("tcp").build()); // the worker reports the transport it picked for "auto"
        long bytes = o.getSourceBlocks().stream().mapToLong(BlockRun::getCount).sum() * PAGE * 8; // several layers per page run
        long durationUs = bytes / BYTES_PER_NS / 1000;
        if (sc == Scenario.CANCEL) {
            fact(req, "cancel", CancelRequested.newBuilder().setRequestedBy("client").setReason("client disconnected").build());
            return;
        }
        boolean fail = sc == Scenario.FATAL || sc == Scenario.RETRY && attempt == 1;
        workers.schedule(() -> {
            if (fail) {
                boolean retriable = sc == Scenario.RETRY;
                transfersFailed.incrementAndGet();
                if (retriable) {
                    transfersFailedRetriable.incrementAndGet();
                }
                fact(req, "tf" + attempt, TransferFailed.newBuilder().setOrderId(o.getOrderId()).setAttempt(attempt).setWorkerId("worker:" + o.getSourceEngineId())
                        .setReason(retriable ? "PEER_UNREACHABLE: connect to 127.0.0.1:7101 refused" : "STALE_EPOCH: lease " + req + "@1 was released")
                        .setRetriable(retriable).build());
            } else {
                transfersCompleted.incrementAndGet();
                transferBytes.addAndGet(bytes);
                fact(req, "tc" + attempt, TransferCompleted.newBuilder().setOrderId(o.getOrderId()).setAttempt(attempt).setWorkerId("worker:" + o.getSourceEngineId())
                        .setBytes(bytes).setDurationUs(durationUs).build());
            }
        }, durationUs, TimeUnit.MICROSECONDS);
    }

    private void recordOutcomes() {
        while (running) {
            for (ConsumerRecord<String, byte[]> r : decisions.poll(Duration.ofMillis(50))) {
                Decision dec;
                try {
                    dec = topics.decisions().valueSerde().deserializer().deserialize(r.topic(), r.value());
                } catch (EventDecodingException e) {
                    continue; // the garbage a test writes into decisions
                }
                if (dec.getPayload() instanceof RequestOutcome o && outcomeOf.putIfAbsent(dec.getRequestId(), o.getKind()) == null) {
                    outcomes.get(o.getKind()).incrementAndGet();
                    kvBytes.addAndGet(o.getKvBytes());
                }
            }
        }
    }

    long outcomes() {
        return outcomeOf.size();
    }

    long outcome(OutcomeKind k) {
        return outcomes.get(k).get();
    }

    /** The outcome each scenario must reach. */
    static OutcomeKind expected(Scenario sc) {
        return switch (sc) {
            case NORMAL, RETRY -> OutcomeKind.COMPLETED;
            case FATAL, REJECT -> OutcomeKind.FAILED;
            case CANCEL -> OutcomeKind.CANCELLED;
            case TIMEOUT -> OutcomeKind.TIMED_OUT;
        };
    }

    @Override
    public void close() throws InterruptedException {
        running = false;
        commandLoop.join(5_000);
        decisionLoop.join(5_000);
        workers.shutdownNow();
        commands.close();
        decisions.close();
        producer.close();
    }
}
