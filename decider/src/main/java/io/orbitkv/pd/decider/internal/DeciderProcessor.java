package io.orbitkv.pd.decider.internal;

import io.orbitkv.pd.decider.DeciderMetrics;
import io.orbitkv.pd.decider.DeciderPolicy;
import io.orbitkv.pd.decider.RequestStateMachine;
import io.orbitkv.pd.decider.RequestStateMachine.Emit;
import io.orbitkv.pd.decider.RequestStateMachine.Step;
import io.orbitkv.pd.events.DeadLetter;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.Tick;
import io.orbitkv.pd.schemas.EventDecodingException;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.state.DeciderState;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.tracing.Hop;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceHeaders;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.processor.api.RecordMetadata;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Runs the state machine for the requests of one partition (one task). Stream time is the largest record
 * timestamp seen in the partition, kept by Streams across restarts); after every record the
 * timers due at that stream time fire. Decisions get deterministic ids {@code <request>/<seq>}; each goes to
 * the decisions topic and, once per engine that must act, to the engine-commands topic.
 */
public final class DeciderProcessor implements Processor<byte[], byte[], String, Object> {

    private static final Logger log = LoggerFactory.getLogger(DeciderProcessor.class);
    /** Bounds the timer loop per record: a state that keeps rescheduling into the past is a bug, not a hang. */
    private static final int MAX_TIMER_FIRINGS = 10_000;

    private final RequestStateMachine machine;
    private final Topics topics;
    private final DeciderMetrics metrics;
    /**
     * The trace headers for decisions caused by the fact being processed: a child of the fact's {@code traceparent},
     * or null (no header: decisions of timers, and of facts that carry none). Computed at most once per fact.
     */
    private Headers traceHeaders;
    /** When the stream thread took up the record being processed (wall clock, µs): the {@code in} mark of its decisions. */
    private long inMicros;
    private ProcessorContext<String, Object> context;
    /** Request states as live objects, written to the Streams store once per commit (see {@link RequestStore}). */
    private RequestStore requests;
    /** This task's timers (derived from the states; rebuilt in {@link #init}). */
    private final TimerIndex timers = new TimerIndex();
    /** Requests counted in the engine load (derived from the states; rebuilt in {@link #init}). */
    private final java.util.Set<String> counted = new java.util.HashSet<>();
    private final DueTimers dueTimers;
    private long publishedEarliest = -1;
    private KeyValueStore<String, Long> load;
    private int partition;
    private long streamTime = Long.MIN_VALUE;

    public DeciderProcessor(DeciderPolicy policy, Topics topics, DeciderMetrics metrics, DueTimers dueTimers) {
        this.machine = new RequestStateMachine(policy);
        this.topics = topics;
        this.metrics = metrics;
        this.dueTimers = dueTimers;
    }

    @Override
    public void init(ProcessorContext<String, Object> context) {
        this.context = context;
        this.requests = RequestStore.of(context.getStateStore(DeciderNames.REQUESTS_STORE));
        this.load = context.getStateStore(DeciderNames.LOAD_STORE);
        this.partition = context.taskId().partition();
        rebuildDerivedState();
        // Write-behind: changed states older than the configured age go to the store between commits, so a commit
        // has only the last few milliseconds of changes left to write (each write blocks the stream thread there). Wall
        // clock, not stream time: it decides when bytes are written, never what is decided.
        long age = requests.writeBehind().toNanos();
        if (age > 0) {
            context.schedule(Duration.ofNanos(Math.max(1_000_000L, age / 2)), PunctuationType.WALL_CLOCK_TIME,
                    ignored -> requests.writeBehind(System.nanoTime() - age)); // takes the store's lock itself
        }
        publishEarliest();
    }

    @Override
    public void close() {
        dueTimers.forget(partition);
    }

    /**
     * The timer index and the engine load are derived from the request states, so they are not changelogged
     * (that would triple the records written per fact); each task rebuilds them from its restored states.
     */
    private void rebuildDerivedState() {
        timers.clear();
        counted.clear();
        List<String> staleLoad = new ArrayList<>();
        try (KeyValueIterator<String, Long> it = load.all()) {
            it.forEachRemaining(kv -> staleLoad.add(kv.key));
        }
        staleLoad.forEach(load::delete);
        try (KeyValueIterator<String, DeciderState> it = requests.all()) {
            while (it.hasNext()) {
                KeyValue<String, DeciderState> kv = it.next();
                if (kv.value.getNextTimerMs() > 0) {
                    timers.add(kv.value.getNextTimerMs(), kv.key);
                }
                updateLoad(kv.value);
            }
        }
    }

    @Override
    public void process(Record<byte[], byte[]> record) {
        long start = System.nanoTime();
        inMicros = Marks.nowMicros();
        String eventId = null;
        try {
            // A step mutates the request's state in place; queries from other threads read under the same lock.
            synchronized (requests.lock()) {
                try {
                    eventId = processFact(record);
                } finally {
                    traceHeaders = null;
                    publishEarliest();
                }
            }
        } finally {
            metrics.processed(eventId, start, System.nanoTime());
        }
    }

    /** Processes one record; returns its event id, or null when it did not decode. */
    private String processFact(Record<byte[], byte[]> record) {
        // Streams keeps the task's stream time (the largest record timestamp seen) and restores it from the
        // committed offset metadata after a restart, so the clock continues where the committed state left it.
        streamTime = Math.max(streamTime, Math.max(record.timestamp(), context.currentStreamTimeMs()));
        RequestEvent event;
        try {
            event = topics.requestEvents().valueSerde().deserializer().deserialize(topics.requestEvents().name(), record.value());
            if (event == null) {
                throw new EventDecodingException(EventDecodingException.Reason.EMPTY, topics.requestEvents().name(), "null value (tombstone)");
            }
        } catch (EventDecodingException e) {
            RecordMetadata md = context.recordMetadata().orElseThrow();
            deadLetter(record, "UNDECODABLE", e.at(md.partition(), md.offset()).getMessage());
            fireTimers();
            return null;
        }
        String key = record.key() == null ? null : new String(record.key(), StandardCharsets.UTF_8);
        if (key == null || !key.equals(event.getRequestId())) {
            deadLetter(record, "KEY_MISMATCH", "record key '" + key + "' is not the event's request_id '" + event.getRequestId()
                    + "': facts about a request must be keyed by its id so they share one partition");
        } else if (!(event.getPayload() instanceof Tick)) {
            metrics.fact(event.getPayload());
            long factOut = Marks.read(record.headers()).get(Marks.OUT).orElse(0);
            metrics.hop(event.getPayload() instanceof TransferCompleted ? Hop.REPORT_TO_DECIDER : Hop.FACT_TO_DECIDER, factOut, inMicros);
            traceHeaders = TraceHeaders.read(record.headers()).map(t -> TraceHeaders.write(new RecordHeaders(), t.newChild())).orElse(null);
            DeciderState before = state(key);
            Step step = machine.onEvent(before, event, streamTime);
            apply(key, before, step, event.getEventId());
            if (step.rejection() != null) {
                deadLetter(record, step.rejection().errorType(), step.rejection().reason());
            }
        }
        fireTimers();
        return event.getEventId();
    }

    /** Tells the ticker when this partition next needs a tick (only when that changed). */
    private void publishEarliest() {
        long earliest = timers.earliest();
        if (earliest != publishedEarliest) {
            publishedEarliest = earliest;
            dueTimers.publish(partition, earliest);
        }
    }

    private void fireTimers() {
        for (int firings = 0; firings < MAX_TIMER_FIRINGS; ) {
            List<TimerIndex.Timer> due = timers.due(streamTime, 1000);
            if (due.isEmpty()) {
                return;
            }
            for (TimerIndex.Timer timer : due) {
                long deadline = timer.deadline();
                String key = timer.requestId();
                DeciderState state = state(key);
                traceHeaders = null; // a timer's decisions are not caused by the fact being processed
                if (state == null || state.getNextTimerMs() != deadline) {
                    timers.remove(deadline, key); // stale index entry
                    continue;
                }
                firings++;
                apply(key, state, machine.onTimer(state, streamTime), null);
            }
        }
        log.atError().addKeyValue("partition", partition).addKeyValue("streamTime", streamTime)
                .log("timer loop stopped after " + MAX_TIMER_FIRINGS + " firings in one step; state machine keeps rescheduling due timers");
    }

    /** Persists the step's state, keeps the timer index and engine load in step, and emits its decisions. */
    private void apply(String key, DeciderState before, Step step, String causeEventId) {
        long oldTimer = before == null ? 0 : before.getNextTimerMs();
        DeciderState after = step.state();
        // The machine mutates the state in place, so "was active" is remembered in `counted`, not in `before`.
        for (Emit emit : step.emits()) {
            Decision d = RequestStateMachine.decision(key, after, emit, streamTime, causeEventId);
            // Serialized once per topic (a registry may give each topic's subject its own id), not once per copy.
            metrics.decision(emit.payload());
            // Each forward gets its own Headers instance: a sink may add to them (serializers can), copies never share.
            // The actors' copies go first: a broker serves one connection's requests in order, so the copy an engine or
            // worker waits for does not queue behind the append of the log copy (measured: order → worker hop).
            // Every copy carries the same `out` mark, taken before the first is handed over: the copies are one decision,
            // and an actor must never appear to have received its copy before the log copy says it was sent.
            Headers marked = traceHeaders();
            if (!emit.engines().isEmpty()) {
                byte[] command = topics.engineCommands().valueSerde().serializer().serialize(topics.engineCommands().name(), d);
                for (String engine : emit.engines()) {
                    context.forward(new Record<>(engine, command, streamTime, new RecordHeaders(marked.toArray())), DeciderNames.COMMANDS_SINK);
                }
            }
            context.forward(new Record<>(key, topics.decisions().valueSerde().serializer().serialize(topics.decisions().name(), d),
                    streamTime, marked), DeciderNames.DECISIONS_SINK);
            if (emit.payload() instanceof TransferOrder) {
                metrics.hop(Hop.DECIDER_ORDER, inMicros, Marks.nowMicros());
            } else if (emit.payload() instanceof KvReady) {
                metrics.hop(Hop.DECIDER_KV_READY, inMicros, Marks.nowMicros());
            }
        }
        if (after == null) {
            if (oldTimer > 0) {
                timers.remove(oldTimer, key);
            }
            requests.delete(key);
            return;
        }
        updateLoad(after);
        long newTimer = machine.nextDeadline(after);
        if (newTimer != oldTimer) {
            if (oldTimer > 0) {
                timers.remove(oldTimer, key);
            }
            if (newTimer > 0) {
                timers.add(newTimer, key);
            }
            after.setNextTimerMs(newTimer);
        }
        requests.put(key, after);
    }

    /**
     * A fresh copy of the current fact's trace headers (empty when there is none), with the timing marks: when the
     * record that led to the decision was taken up, and now, as the decision is handed to Kafka. Marks are
     * observations, not decisions: a re-sent decision carries other marks, and replay compares values only.
     */
    private Headers traceHeaders() {
        Headers h = traceHeaders == null ? new RecordHeaders() : new RecordHeaders(traceHeaders.toArray());
        return Marks.receivedAt(inMicros).writeOut(h);
    }

    private DeciderState state(String key) {
        return requests.live(key);
    }

    /** In-flight requests per engine, for routing: counted once when a request becomes active and once when it ends. */
    private void updateLoad(DeciderState s) {
        if (s.getAdmission() == null) {
            return;
        }
        boolean active = !RequestStateMachine.isTerminal(s.getPhase());
        if (active == counted.contains(s.getRequestId())) {
            return;
        }
        long delta = active ? 1 : -1;
        for (String engine : new String[] {s.getAdmission().getPrefillEngineId(), s.getAdmission().getDecodeEngineId()}) {
            Long n = load.get("engine/" + engine);
            load.put("engine/" + engine, Math.max(0, (n == null ? 0 : n) + delta));
        }
        if (active) {
            counted.add(s.getRequestId());
        } else {
            counted.remove(s.getRequestId());
        }
    }

    private void deadLetter(Record<byte[], byte[]> record, String type, String reason) {
        metrics.deadLetter(type);
        RecordMetadata md = context.recordMetadata().orElseThrow();
        log.atWarn().addKeyValue("partition", md.partition()).addKeyValue("offset", md.offset()).addKeyValue("errorType", type)
                .log(reason);
        DeadLetter dl = DeadLetter.newBuilder().setComponent("decider").setTopic(md.topic()).setPartition(md.partition())
                .setOffset(md.offset()).setOriginalKey(record.key() == null ? null : ByteBuffer.wrap(record.key()))
                .setOriginalValue(record.value() == null ? null : ByteBuffer.wrap(record.value())).setReason(reason).setErrorType(type)
                .setDeadLetteredAtMs(streamTime).build();
        String key = record.key() == null ? "" : new String(record.key(), StandardCharsets.UTF_8);
        context.forward(new Record<>(key, (Object) dl, streamTime), DeciderNames.DEAD_LETTER_SINK);
    }
}
