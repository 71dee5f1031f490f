package io.orbitkv.pd.worker.internal;

import static io.orbitkv.pd.kv.BlockRuns.run;
import static org.assertj.core.api.Assertions.assertThat;
import static org.awaitility.Awaitility.await;

import io.micrometer.core.instrument.simple.SimpleMeterRegistry;
import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferFailed;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.events.TransferStarted;
import io.orbitkv.pd.kv.HostKvPool;
import io.orbitkv.pd.kv.KvGeometry;
import io.orbitkv.pd.kv.KvTestData;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.SerdeConfig;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.transport.PushGate;
import io.orbitkv.pd.transport.Pushes;
import io.orbitkv.pd.transport.local.LocalFabric;
import io.orbitkv.pd.transport.local.LocalTransport;
import java.nio.ByteBuffer;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Random;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.junit.jupiter.api.Test;

/**
 * The worker's order table over random interleavings: orders issued ahead of their prefill, the decider's copies with the
 * source pages, the engine's prefill reports (done or failed, before or after the order), aborts and duplicates, fed in
 * random order while pushes run on the runner's threads (a real local transport into a real receiving gate). Whatever the
 * order of inputs: one terminal report per attempt, after its start; a push only from an attempt that was not aborted
 * before it became runnable, with the bytes of the source pages in the destination pages; an attempt with nothing to run
 * on stays parked; every order record is done exactly once (a duplicate at once, the rest once their report is durable).
 */
class OrderRunnerTableTest {

    private static final KvGeometry G = KvTestData.small(2, 64);
    private static final Topics TOPICS = new Topics(TopicsConfig.defaults(), EventSerdes.create(SerdeConfig.embedded()));

    /** What can happen to a request, in the order the scenario feeds it. */
    private enum Kind { AHEAD, COPY, ENGINE_DONE, ENGINE_FAILED, ABORT }

    private record Step(int request, Kind kind) { }

    @Test
    void anyInterleavingEndsEachAttemptOnceAndPushesOnlyWhatMayBePushed() throws Exception {
        for (int seed = 0; seed < 150; seed++) {
            scenario(new Random(seed), seed);
        }
    }

    private void scenario(Random rnd, int seed) throws Exception {
        int requests = 1 + rnd.nextInt(4);
        List<Step> steps = new ArrayList<>();
        for (int i = 0; i < requests; i++) {
            boolean ahead = rnd.nextBoolean();
            if (ahead) {
                steps.add(new Step(i, Kind.AHEAD));
                if (rnd.nextInt(5) == 0) {
                    steps.add(new Step(i, Kind.AHEAD)); // a duplicate
                }
                int engine = rnd.nextInt(6);
                if (engine < 4) {
                    steps.add(new Step(i, Kind.ENGINE_DONE));
                } else if (engine == 4) {
                    steps.add(new Step(i, Kind.ENGINE_FAILED));
                }
            }
            if (!ahead || rnd.nextInt(5) < 3) {
                steps.add(new Step(i, Kind.COPY));
                if (rnd.nextInt(4) == 0) {
                    steps.add(new Step(i, Kind.COPY));
                }
            }
            if (rnd.nextInt(4) == 0) {
                steps.add(new Step(i, Kind.ABORT));
            }
        }
        Collections.shuffle(steps, rnd);

        withRunner(seed, r -> r, (src, dst, producer, runner) -> {
                Map<Integer, AtomicInteger> dones = new ConcurrentHashMap<>();
                Map<Integer, Integer> submits = new HashMap<>();
                Model model = new Model(requests);
                    for (Step s : steps) {
                        model.feed(s);
                        String rid = "r" + s.request();
                        switch (s.kind()) {
                            case AHEAD, COPY -> {
                                submits.merge(s.request(), 1, Integer::sum);
                                AtomicInteger done = dones.computeIfAbsent(s.request(), k -> new AtomicInteger());
                                runner.submit(rid, order(s.request(), s.kind() == Kind.AHEAD), done::incrementAndGet);
                            }
                            case ENGINE_DONE -> runner.prefillCompleted(rid, source(s.request()), 101, 7, 0, io.orbitkv.pd.tracing.Marks.nowMicros());
                            case ENGINE_FAILED -> runner.prefillFailed(rid, "out of memory", io.orbitkv.pd.tracing.Marks.nowMicros());
                            case ABORT -> runner.abort(rid + "/a1", 1, "cancelled by the client");
                        }
                    }
                    String context = "seed " + seed + ", steps " + steps;
                    await(context).atMost(Duration.ofSeconds(10)).pollDelay(Duration.ZERO).pollInterval(Duration.ofMillis(5)).untilAsserted(() -> {
                        for (int i = 0; i < requests; i++) {
                            int expectedDone = model.runnable(i) ? submits.getOrDefault(i, 0) : Math.max(0, submits.getOrDefault(i, 0) - 1);
                            assertThat(dones.getOrDefault(i, new AtomicInteger()).get()).as("%s: r%d's records done", context, i).isEqualTo(expectedDone);
                        }
                    });
                    Map<String, List<Object>> reports = reports(producer.history());
                    for (int i = 0; i < requests; i++) {
                        String why = context + ": r" + i + " (" + model.describe(i) + ")";
                        List<Object> facts = reports.getOrDefault("r" + i, List.of());
                        List<Object> terminal = facts.stream().filter(f -> f instanceof TransferCompleted || f instanceof TransferFailed).toList();
                        OrderRunner.State state = runner.stateOf("r" + i + "/a1", 1);
                        if (!model.runnable(i)) {
                            assertThat(terminal).as(why).isEmpty();
                            assertThat(state).as(why).isEqualTo(model.parked(i) ? OrderRunner.State.PARKED
                                    : model.aborted[i] ? OrderRunner.State.FENCED : null);
                            continue;
                        }
                        assertThat(terminal).as(why + ": one outcome").hasSize(1);
                        Object end = terminal.get(0);
                        switch (model.outcome(i)) {
                            case "aborted" -> assertThat(end).as(why).isInstanceOfSatisfying(TransferFailed.class,
                                    f -> assertThat(f.getReason()).contains("ABORTED").contains("cancelled by the client"));
                            case "prefill failed" -> assertThat(end).as(why).isInstanceOfSatisfying(TransferFailed.class,
                                    f -> assertThat(f.getReason()).contains("the engine's prefill failed: out of memory"));
                            case "pushed" -> assertThat(end).as(why).isInstanceOf(TransferCompleted.class);
                            default -> { // pushed, or aborted while pushing: either, never both
                                if (end instanceof TransferFailed f) {
                                    assertThat(f.getReason()).as(why).contains("cancelled by the client");
                                }
                            }
                        }
                        if (end instanceof TransferCompleted) {
                            assertThat(facts.indexOf(facts.stream().filter(f -> f instanceof TransferStarted).findFirst().orElseThrow()))
                                    .as(why + ": started before completed").isLessThan(facts.indexOf(end));
                            assertThat(state).as(why).isEqualTo(OrderRunner.State.LANDED);
                            assertThat(landed(src, dst, i)).as(why + ": the pages hold the source's bytes").isTrue();
                        } else {
                            assertThat(state).as(why).isIn(OrderRunner.State.ABORTED, OrderRunner.State.FAILED);
                        }
                    }
        });
    }

    /**
     * Fault drills ({@code worker.fault.hold-push-prefix}): a held push is reported started, and the decider's abort meets
     * it in flight — it ends aborted with no byte moved; a request without the prefix is pushed at once.
     */
    @Test
    void aHeldPushIsInFlightWhenTheAbortComesAndEndsAbortedWithNothingMoved() throws Exception {
        withRunner(7, r -> r.holdPushes("r0", Duration.ofSeconds(30)), (src, dst, producer, runner) -> {
            runner.submit("r0", order(0, false), () -> { });
            await().atMost(Duration.ofSeconds(10)).until(() -> reports(producer.history()).getOrDefault("r0", List.of()).stream()
                    .anyMatch(f -> f instanceof TransferStarted));
            assertThat(runner.stateOf("r0/a1", 1)).isEqualTo(OrderRunner.State.PUSHING);
            runner.submit("r1", order(1, false), () -> { });
            await().atMost(Duration.ofSeconds(10)).until(() -> runner.stateOf("r1/a1", 1) == OrderRunner.State.LANDED);
            assertThat(landed(src, dst, 1)).isTrue();
            assertThat(runner.stateOf("r0/a1", 1)).as("still held").isEqualTo(OrderRunner.State.PUSHING);
            runner.abort("r0/a1", 1, "cancelled by the client");
            await().atMost(Duration.ofSeconds(10)).until(() -> runner.stateOf("r0/a1", 1) == OrderRunner.State.ABORTED);
            assertThat(reports(producer.history()).get("r0")).filteredOn(f -> f instanceof TransferFailed).singleElement()
                    .satisfies(f -> assertThat(((TransferFailed) f).getReason()).contains("ABORTED").contains("held")
                            .contains("cancelled by the client"));
            for (int r = 0; r < G.regionCount(); r++) {
                for (int b = 0; b < 4; b++) {
                    assertThat(dst.page(r, 32 + b).get(java.lang.foreign.ValueLayout.JAVA_BYTE, 0)).as("no byte of r0 moved").isEqualTo((byte) 0x5A);
                }
            }
        });
    }

    @FunctionalInterface
    private interface RunnerTest {
        void run(HostKvPool src, HostKvPool dst, MockProducer<String, byte[]> producer, OrderRunner runner) throws Exception;
    }

    /** A runner pushing from a filled pool into a sentinel-filled one over a real local transport and receiving gate. */
    private static void withRunner(int seed, java.util.function.UnaryOperator<OrderRunner> configure, RunnerTest test) throws Exception {
        try (HostKvPool src = HostKvPool.allocate(G);
             HostKvPool dst = HostKvPool.allocate(G)) {
            KvTestData.fill(src, seed);
            KvTestData.sentinel(dst, (byte) 0x5A);
            PushGate gate = new PushGate("decode-0", () -> 5, dst, Pushes.TOKENS, 1024, 1000);
            LocalFabric fabric = new LocalFabric();
            MockProducer<String, byte[]> producer = new MockProducer<>(true, null, new StringSerializer(), new ByteArraySerializer());
            EventReporter reporter = new EventReporter(producer, TOPICS, "prefill-0", "worker-prefill-0", new SimpleMeterRegistry());
            try (LocalTransport receiver = new LocalTransport(fabric, "decode-0", gate);
                 LocalTransport sender = new LocalTransport(fabric, "prefill-0", null)) {
                EngineRegistration dest = EngineRegistration.newBuilder().setEngineId("decode-0").setRole(EngineRole.DECODE).setInstanceEpoch(5)
                        .setModel("m").setHttpUrl("").setEndpoints(List.of(receiver.endpoint().orElseThrow())).setRegions(List.of())
                        .setRegisteredAtMs(0).setDeregistered(false).setLayout(G.toLayout(0, 1)).build();
                OrderRunner.Peers peers = (id, epoch, timeout) -> Optional.of(dest);
                OrderRunner runner = configure.apply(new OrderRunner("prefill-0", 101, src, List.of(sender), peers, reporter, "worker-prefill-0",
                        2, 64, Duration.ofSeconds(1)));
                try {
                    test.run(src, dst, producer, runner);
                } finally {
                    runner.close();
                }
            }
        }
    }

    /**
     * What the inputs fed so far make of each request, by the rules the table implements: when it became runnable (an
     * order with pages; an order ahead with the engine's report, before or after it; an abort while parked) and whether
     * an abort or the engine's failure came first.
     */
    private static final class Model {
        private final String[] runnableBy;
        private final boolean[] parked;
        private final boolean[] aborted;
        private final boolean[] abortedLater;
        private final Kind[] engine;

        Model(int n) {
            runnableBy = new String[n];
            parked = new boolean[n];
            aborted = new boolean[n];
            abortedLater = new boolean[n];
            engine = new Kind[n];
        }

        void feed(Step s) {
            int i = s.request();
            switch (s.kind()) {
                case AHEAD -> {
                    if (runnableBy[i] == null) {
                        if (aborted[i]) {
                            runnableBy[i] = "aborted";
                        } else if (engine[i] != null) {
                            runnableBy[i] = engine[i] == Kind.ENGINE_DONE ? "pushed" : "prefill failed";
                        } else {
                            parked[i] = true;
                        }
                    }
                }
                case COPY -> {
                    if (runnableBy[i] == null) {
                        runnableBy[i] = aborted[i] ? "aborted" : "pushed";
                    }
                }
                case ENGINE_DONE, ENGINE_FAILED -> {
                    if (engine[i] == null) {
                        engine[i] = s.kind(); // the runner keeps the latest, but a scenario reports once
                    }
                    if (parked[i] && runnableBy[i] == null) {
                        runnableBy[i] = s.kind() == Kind.ENGINE_DONE ? "pushed" : "prefill failed";
                    }
                }
                case ABORT -> {
                    if (runnableBy[i] != null) {
                        abortedLater[i] = true;
                    } else if (parked[i]) {
                        runnableBy[i] = "aborted";
                    }
                    aborted[i] = true;
                }
            }
        }

        boolean runnable(int i) {
            return runnableBy[i] != null;
        }

        boolean parked(int i) {
            return parked[i] && runnableBy[i] == null;
        }

        /** "aborted", "prefill failed", "pushed", or "raced" (pushed, with an abort after it became runnable). */
        String outcome(int i) {
            return "pushed".equals(runnableBy[i]) && abortedLater[i] ? "raced" : runnableBy[i];
        }

        String describe(int i) {
            return "runnable by " + runnableBy[i] + (abortedLater[i] ? ", aborted after" : "") + (parked[i] ? ", parked" : "");
        }
    }

    /** Whether request {@code i}'s destination pages hold its source pages' bytes, in every region. */
    private static boolean landed(HostKvPool src, HostKvPool dst, int i) {
        for (int r = 0; r < G.regionCount(); r++) {
            for (int b = 0; b < 4; b++) {
                if (src.page(r, i * 4 + b).mismatch(dst.page(r, 32 + i * 4 + b)) != -1) {
                    return false;
                }
            }
        }
        return true;
    }

    private static List<BlockRun> source(int request) {
        return List.of(run(request * 4, 4));
    }

    private static List<BlockRun> dest(int request) {
        return List.of(run(32 + request * 4, 4));
    }

    private static TransferOrder order(int request, boolean ahead) {
        String id = "r" + request + "/a1";
        return TransferOrder.newBuilder().setOrderId(id).setAttempt(1).setSourceEngineId("prefill-0").setSourceInstanceEpoch(101)
                .setDestEngineId("decode-0").setDestInstanceEpoch(5).setSourceBlocks(ahead ? List.of() : source(request)).setDestBlocks(dest(request))
                .setLayout(G.toLayout(0, 1)).setLeaseId("lease-r" + request).setLeaseEpoch(1)
                .setAuthToken(ByteBuffer.wrap(Pushes.TOKENS.sign(id, 1, "decode-0", 5, dest(request))))
                .setDeadlineMs(System.currentTimeMillis() + 60_000).setTransport("auto").setAwaitPrefill(ahead).build();
    }

    /** The transfer facts the runner reported, per request, in the order they were sent. */
    private static Map<String, List<Object>> reports(List<ProducerRecord<String, byte[]>> sent) {
        Map<String, List<Object>> out = new HashMap<>();
        for (ProducerRecord<String, byte[]> r : sent) {
            RequestEvent e = TOPICS.requestEvents().valueSerde().deserializer().deserialize(r.topic(), r.value());
            out.computeIfAbsent(r.key(), k -> new ArrayList<>()).add(e.getPayload());
        }
        return out;
    }
}
