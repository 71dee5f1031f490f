package io.orbitkv.pd.schemas;

import io.orbitkv.pd.events.DeadLetter;
import java.nio.ByteBuffer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.serialization.Deserializer;

/**
 * Decoding consumed raw records with the failure located at topic, partition and offset, and turning a failure
 * into a {@link DeadLetter} event. Consumers read {@code byte[]} and decode through here so one bad record is
 * dead-lettered and the rest of the partition still flows.
 */
public final class RecordDecoding {

    private RecordDecoding() { }

    /** Decodes the value of {@code record}; on failure the exception names topic, partition and offset. */
    public static <T> T decodeValue(ConsumerRecord<byte[], byte[]> record, Deserializer<T> deserializer) {
        try {
            return deserializer.deserialize(record.topic(), record.headers(), record.value());
        } catch (EventDecodingException e) {
            throw e.at(record.partition(), record.offset());
        } catch (RuntimeException e) {
            throw new EventDecodingException(EventDecodingException.Reason.MALFORMED, record.topic(), e.toString(), e)
                    .at(record.partition(), record.offset());
        }
    }

    /** The dead letter for a record that {@code component} refused. */
    public static DeadLetter deadLetter(String component, ConsumerRecord<byte[], byte[]> record, String errorType, String reason,
                                        long nowMs) {
        return DeadLetter.newBuilder()
                .setComponent(component)
                .setTopic(record.topic())
                .setPartition(record.partition())
                .setOffset(record.offset())
                .setOriginalKey(record.key() == null ? null : ByteBuffer.wrap(record.key()))
                .setOriginalValue(record.value() == null ? null : ByteBuffer.wrap(record.value()))
                .setReason(reason)
                .setErrorType(errorType)
                .setDeadLetteredAtMs(nowMs)
                .build();
    }
}
