package io.orbitkv.pd.bench;

import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.common.Metric;
import org.apache.kafka.common.MetricName;

/**
 * One consumer and one producer driven by one platform thread until closed, for the benchmark: its load (what
 * plays the proxy, engines and workers) and its plain-clients floor are both this shape.
 */
abstract class ClientsLoop<V> implements AutoCloseable {
    final KafkaProducer<String, V> producer;
    final KafkaConsumer<String, byte[]> consumer;
    /** The topic {@link #consumer} reads. */
    private final String reads;
    private final Thread thread;
    volatile boolean running = true;

    ClientsLoop(String threadName, KafkaProducer<String, V> producer, KafkaConsumer<String, byte[]> consumer, String reads) {
        this.producer = producer;
        this.consumer = consumer;
        this.reads = reads;
        this.thread = Thread.ofPlatform().name(threadName).unstarted(this::loop);
    }

    /** Subscribes the consumer and starts the thread. */
    ClientsLoop<V> start() {
        consumer.subscribe(List.of(reads));
        thread.start();
        return this;
    }

    /** The thread's work: poll and act while {@link #running}. */
    abstract void loop();

    /** The two clients' metrics (for the requests each sends). */
    List<Map<MetricName, ? extends Metric>> clientMetrics() {
        return List.of(producer.metrics(), consumer.metrics());
    }

    @Override
    public void close() throws InterruptedException {
        running = false;
        thread.join(5_000);
        consumer.close();
        producer.close();
    }
}
