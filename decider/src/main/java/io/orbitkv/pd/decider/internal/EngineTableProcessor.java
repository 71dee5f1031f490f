package io.orbitkv.pd.decider.internal;

import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.schemas.EngineRegistrations;
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
 * decode, or that {@link EngineRegistrations#check} refuses (keyed by another engine, an invalid layout, an instance
 * epoch older than the one stored: an older epoch never replaces a newer one), is logged with its offset and not
 * stored; a global-store processor cannot forward to the dead-letter topic: the engine's own worker dead-letters it and
 * announces its engine again (docs/worker.md). A null value (tombstone) removes the engine.
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
        this.store = context.getStateStore(DeciderNames.ENGINES_STORE);
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
        String refused;
        try {
            EngineRegistration r = topics.engines().valueSerde().deserializer().deserialize(topics.engines().name(), record.value());
            byte[] had = store.get(record.key());
            EngineRegistration current = null;
            if (had != null) {
                try {
                    current = topics.engines().valueSerde().deserializer().deserialize(topics.engines().name(), had);
                } catch (EventDecodingException e) {
                    current = null; // what was stored before a restore is replaced by a valid record
                }
            }
            EngineRegistrations.Refusal bad = EngineRegistrations.check(record.key(), r, current);
            if (bad == null) {
                store.put(record.key(), record.value());
                return;
            }
            refused = bad.errorType() + ": " + bad.reason();
        } catch (EventDecodingException e) {
            refused = "UNDECODABLE: " + e.getMessage();
        }
        var md = context.recordMetadata();
        log.atWarn().addKeyValue("engineId", record.key()).addKeyValue("offset", md.map(m -> m.offset()).orElse(-1L))
                .addKeyValue("reason", refused).log("engine registration refused");
    }
}
