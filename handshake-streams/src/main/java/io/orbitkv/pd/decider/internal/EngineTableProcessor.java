package io.orbitkv.pd.decider.internal;

import io.orbitkv.pd.decider.DeciderTopology;
import io.orbitkv.pd.schemas.EventDecodingException;
import io.orbitkv.pd.schemas.Topics;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.state.KeyValueStore;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Keeps the engines global store: the latest registration bytes per engine id. A registration that does not
 * decode is logged with its offset and not stored (a global-store processor cannot forward to the dead-letter
 * topic); a null value (tombstone) removes the engine.
 */
public final class EngineTableProcessor implements Processor<String, byte[], Void, Void> {

    private static final Logger log = LoggerFactory.getLogger(EngineTableProcessor.class);
    private final Topics topics;
    private ProcessorContext<Void, Void> context;
    private KeyValueStore<String, byte[]> store;

    public EngineTableProcessor(Topics topics) {
        this.topics = topics;
    }

    @Override
    public void init(ProcessorContext<Void, Void> context) {
        this.context = context;
        this.store = context.getStateStore(DeciderTopology.ENGINES_STORE);
    }

    @Override
    public void process(Record<String, byte[]> record) {
        if (record.key() == null) {
            return;
        }
        if (record.value() == null) {
            store.delete(record.key());
            return;
        }
        try {
            topics.engines().valueSerde().deserializer().deserialize(topics.engines().name(), record.value());
            store.put(record.key(), record.value());
        } catch (EventDecodingException e) {
            var md = context.recordMetadata();
            log.atWarn().addKeyValue("engineId", record.key())
                    .addKeyValue("offset", md.map(m -> m.offset()).orElse(-1L))
                    .addKeyValue("reason", e.getMessage()).log("engine registration refused");
        }
    }
}
