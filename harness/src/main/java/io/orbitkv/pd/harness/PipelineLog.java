package io.orbitkv.pd.harness;

import io.orbitkv.pd.events.CancelRequested;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.ReleaseDecided;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestAnswered;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferStarted;
import io.orbitkv.pd.logtools.trace.HandoffAnatomy;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.RecordDecoding;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceContext;
import io.orbitkv.pd.tracing.TraceHeaders;
import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * What the log says about a run — the product's memory: every request's facts and decisions, read back from
 * {@code request-events} and {@code decisions} from the beginning. The demo's summary and the end-to-end tests'
 * invariants come from here, not from any component's word.
 */
public final class PipelineLog {

    /** One request's story as far as these checks need it. */
    public static final class Story {
        public final String requestId;
        public final List<Object> facts = new ArrayList<>();
        public final List<Object> decisions = new ArrayList<>();
        /** The trace context each fact and each decision carried (its {@code traceparent} header; null: none), in step with them. */
        public final List<TraceContext> factTraces = new ArrayList<>();
        public final List<TraceContext> decisionTraces = new ArrayList<>();
        public final List<RequestOutcome> outcomes = new ArrayList<>();
        public final List<ReleaseDecided> releases = new ArrayList<>();
        /** Index in {@link #facts} of the first CancelRequested, and which transfer facts came before it. */
        public boolean transferStartedBeforeCancel;
        public boolean transferCompletedBeforeCancel;
        /** The decode engine reported the request done before any cancel was logged (a cancel then comes too late). */
        public boolean decodeCompletedBeforeCancel;
        public boolean cancelled;
        /** Every record of the request with its timing marks, answers included: what {@link #anatomy()} is built from. */
        public final List<HandoffAnatomy.Observation> observations = new ArrayList<>();
        /** What the proxy answered (null: no answer record). */
        public RequestAnswered answer;

        Story(String requestId) {
            this.requestId = requestId;
        }

        /** The request's handoff on the wall clock, hop by hop. */
        public HandoffAnatomy anatomy() {
            return HandoffAnatomy.of(observations);
        }
    }

    public final Map<String, Story> stories = new HashMap<>();
    public final Map<OutcomeKind, Integer> outcomes = new EnumMap<>(OutcomeKind.class);
    public long transferBytes;
    public long transferMicros;
    public int transfers;

    /**
     * The log once every request of {@code requestIds} has its outcome, read again every 300 ms until {@code timeout}
     * (read committed: the last outcomes may still sit in the decider's open transaction); what is still missing then
     * counts as not completed for the caller.
     */
    public static PipelineLog readUntilOutcomes(String bootstrap, java.util.Collection<String> requestIds, Duration timeout)
            throws InterruptedException {
        long until = System.nanoTime() + timeout.toNanos();
        while (true) {
            PipelineLog log = read(bootstrap);
            boolean all = requestIds.stream().allMatch(id -> log.stories.get(id) != null && !log.stories.get(id).outcomes.isEmpty());
            if (all || System.nanoTime() > until) {
                return log;
            }
            Thread.sleep(300);
        }
    }

    /** Reads the facts, decisions and answers topics to their current end. */
    public static PipelineLog read(String bootstrap) {
        PipelineLog log = new PipelineLog();
        try (EventSerdes serdes = EventSerdes.embedded()) {
            Topics topics = new Topics(TopicsConfig.defaults(), serdes);
            Map<String, Object> c = Map.of(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap, ConsumerConfig.ISOLATION_LEVEL_CONFIG, "read_committed",
                    ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 5000);
            try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(c, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
                for (String topic : List.of(topics.requestEvents().name(), topics.decisions().name(), topics.answers().name())) {
                    List<TopicPartition> parts = consumer.partitionsFor(topic, Duration.ofSeconds(10)).stream()
                            .map(p -> new TopicPartition(topic, p.partition())).toList();
                    if (parts.isEmpty()) {
                        continue; // no answers topic: nothing answered through a proxy yet
                    }
                    consumer.assign(parts);
                    consumer.seekToBeginning(parts);
                    Map<TopicPartition, Long> end = consumer.endOffsets(parts);
                    while (parts.stream().anyMatch(p -> consumer.position(p) < end.get(p))) {
                        for (ConsumerRecord<byte[], byte[]> r : consumer.poll(Duration.ofMillis(200))) {
                            Marks marks = Marks.read(r.headers());
                            if (topic.equals(topics.requestEvents().name())) {
                                log.fact(RecordDecoding.decodeValue(r, topics.requestEvents().valueSerde().deserializer()),
                                        TraceHeaders.read(r.headers()).orElse(null), marks);
                            } else if (topic.equals(topics.decisions().name())) {
                                log.decision(RecordDecoding.decodeValue(r, topics.decisions().valueSerde().deserializer()),
                                        TraceHeaders.read(r.headers()).orElse(null), marks);
                            } else {
                                log.answer(RecordDecoding.decodeValue(r, topics.answers().valueSerde().deserializer()), marks);
                            }
                        }
                    }
                }
            }
        }
        return log;
    }

    private Story story(String id) {
        return stories.computeIfAbsent(id, Story::new);
    }

    private void answer(RequestAnswered a, Marks marks) {
        if (a != null) {
            Story s = story(a.getRequestId());
            s.answer = a;
            s.observations.add(new HandoffAnatomy.Observation(a, marks));
        }
    }

    private void fact(RequestEvent e, TraceContext trace, Marks marks) {
        if (e == null || e.getPayload() instanceof io.orbitkv.pd.events.Tick || e.getPayload() instanceof io.orbitkv.pd.events.EngineEpochChanged) {
            return; // the decider's own clock and engine-epoch facts: about a partition or an engine, not a request
        }
        Story s = story(e.getRequestId());
        Object p = e.getPayload();
        s.facts.add(p);
        s.factTraces.add(trace);
        s.observations.add(new HandoffAnatomy.Observation(e, marks));
        switch (p) {
            case CancelRequested c -> s.cancelled = true;
            case TransferStarted t when !s.cancelled -> s.transferStartedBeforeCancel = true;
            case io.orbitkv.pd.events.DecodeCompleted d when !s.cancelled -> s.decodeCompletedBeforeCancel = true;
            case TransferCompleted t -> {
                if (!s.cancelled) {
                    s.transferCompletedBeforeCancel = true;
                }
                transferBytes += t.getBytes();
                transferMicros += t.getDurationUs();
                transfers++;
            }
            default -> { }
        }
    }

    private void decision(Decision d, TraceContext trace, Marks marks) {
        if (d == null) {
            return;
        }
        Story s = story(d.getRequestId());
        s.observations.add(new HandoffAnatomy.Observation(d, marks));
        s.decisions.add(d.getPayload());
        s.decisionTraces.add(trace);
        if (d.getPayload() instanceof RequestOutcome o) {
            s.outcomes.add(o);
            outcomes.merge(o.getKind(), 1, Integer::sum);
        } else if (d.getPayload() instanceof ReleaseDecided r) {
            s.releases.add(r);
        }
    }

    /** Requests the proxy admitted. */
    public long admitted() {
        return stories.values().stream().filter(s -> s.facts.stream().anyMatch(f -> f instanceof RequestAdmitted)).count();
    }

    /** Outcomes decided so far. */
    public int outcomeCount() {
        return outcomes.values().stream().mapToInt(Integer::intValue).sum();
    }
}
