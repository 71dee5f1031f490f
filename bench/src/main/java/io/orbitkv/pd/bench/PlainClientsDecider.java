package io.orbitkv.pd.bench;

import io.orbitkv.pd.decider.DeciderMetrics;
import io.orbitkv.pd.decider.DeciderPolicy;
import io.orbitkv.pd.decider.RequestStateMachine;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.Tick;
import io.orbitkv.pd.schemas.TopicAdmin;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.state.DeciderState;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * The floor under the decider, for the benchmark only: the same {@link RequestStateMachine}, the same decisions
 * (ids, payloads, one serialization per topic, one engine-commands copy per engine) over one plain consumer and one
 * plain producer — no Kafka Streams, no state store, no changelog, no transactions, states in a HashMap, offsets
 * auto-committed. It is not a decider (a crash loses its states; timers never fire): it measures what the
 * handoff's message pattern costs on this machine, so the Streams decider's numbers can be read against it.
 */
final class PlainClientsDecider extends ClientsLoop<byte[]> {

    private final Topics topics;
    private final RequestStateMachine machine;
    private final Map<String, DeciderState> states = new HashMap<>();
    private final java.util.concurrent.CountDownLatch assigned = new java.util.concurrent.CountDownLatch(1);
    private volatile DeciderMetrics.FactTimings timings;
    private long clock = Long.MIN_VALUE;

    PlainClientsDecider(String bootstrap, Topics topics, DeciderPolicy policy, String groupId) {
        try (Admin admin = Admin.create(Map.of("bootstrap.servers", bootstrap))) {
            TopicAdmin.ensureTopics(admin, topics);
        }
        // The Streams decider's client settings that matter for latency: linger 0, fetch wait 100 ms, acks all.
        super("plain-decider", new KafkaProducer<>(Map.of(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap, ProducerConfig.LINGER_MS_CONFIG, 0,
                        ProducerConfig.ACKS_CONFIG, "all"), new StringSerializer(), new ByteArraySerializer()),
                new KafkaConsumer<>(Map.of(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap, ConsumerConfig.GROUP_ID_CONFIG, groupId,
                        ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest", ConsumerConfig.FETCH_MAX_WAIT_MS_CONFIG, 100,
                        ConsumerConfig.MAX_POLL_RECORDS_CONFIG, 1000), new StringDeserializer(), new ByteArrayDeserializer()),
                topics.requestEvents().name());
        this.topics = topics;
        this.machine = new RequestStateMachine(policy);
    }

    @Override
    PlainClientsDecider start() {
        super.start();
        return this;
    }

    /** Waits until the consumer owns its partitions (a poll joined the group). */
    boolean awaitAssigned(Duration timeout) throws InterruptedException {
        return assigned.await(timeout.toMillis(), java.util.concurrent.TimeUnit.MILLISECONDS);
    }

    void factTimings(DeciderMetrics.FactTimings listener) {
        this.timings = listener;
    }

    Topics topics() {
        return topics;
    }

    @Override
    void loop() {
        while (running) {
            var records = consumer.poll(Duration.ofMillis(10));
            if (assigned.getCount() > 0 && !consumer.assignment().isEmpty()) {
                assigned.countDown();
            }
            for (ConsumerRecord<String, byte[]> r : records) {
                long start = System.nanoTime();
                RequestEvent event = topics.requestEvents().valueSerde().deserializer().deserialize(r.topic(), r.value());
                if (event == null || event.getPayload() instanceof Tick || !event.getRequestId().equals(r.key())) {
                    continue;
                }
                clock = Math.max(clock, r.timestamp());
                decide(r.key(), event);
                DeciderMetrics.FactTimings t = timings;
                if (t != null) {
                    t.fact(event.getEventId(), start, System.nanoTime());
                }
            }
        }
    }

    private void decide(String key, RequestEvent event) {
        RequestStateMachine.Step step = machine.onEvent(states.get(key), event, clock);
        DeciderState after = step.state();
        for (RequestStateMachine.Emit emit : step.emits()) {
            Decision d = RequestStateMachine.decision(key, after, emit, clock, event.getEventId());
            producer.send(new ProducerRecord<>(topics.decisions().name(), key, topics.decisions().valueSerde().serializer()
                    .serialize(topics.decisions().name(), d)));
            if (!emit.engines().isEmpty()) {
                byte[] command = topics.engineCommands().valueSerde().serializer().serialize(topics.engineCommands().name(), d);
                for (String engine : emit.engines()) {
                    producer.send(new ProducerRecord<>(topics.engineCommands().name(), engine, command));
                }
            }
        }
        if (after == null || RequestStateMachine.isTerminal(after.getPhase())) {
            states.remove(key);
        } else {
            states.put(key, after);
        }
    }}
