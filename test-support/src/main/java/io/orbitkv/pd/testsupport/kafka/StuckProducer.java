package io.orbitkv.pd.testsupport.kafka;

import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.Callback;
import org.apache.kafka.clients.producer.MockProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * A producer whose {@code send} blocks until {@link #released} counts down (30 s at most), as a real one does while it
 * has no metadata for the topic (the brokers unreachable): for tests that a caller's thread is never the one that sends.
 */
public final class StuckProducer extends MockProducer<String, byte[]> {

    /** Count it down to let every send through. */
    public final CountDownLatch released = new CountDownLatch(1);

    public StuckProducer() {
        super(true, null, new StringSerializer(), new ByteArraySerializer());
    }

    @Override
    public synchronized Future<RecordMetadata> send(ProducerRecord<String, byte[]> record, Callback callback) {
        try {
            released.await(30, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        return super.send(record, callback);
    }
}
