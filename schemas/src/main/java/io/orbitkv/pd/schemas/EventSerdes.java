package io.orbitkv.pd.schemas;

import io.orbitkv.pd.events.DeadLetter;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.KvCacheEvent;
import io.orbitkv.pd.events.RequestAnswered;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.schemas.internal.ConfluentFormat;
import io.orbitkv.pd.schemas.internal.SingleObjectFormat;
import io.orbitkv.pd.schemas.internal.WireFormat;
import io.orbitkv.pd.schemas.registry.CcompatRegistryClient;
import io.orbitkv.pd.schemas.registry.SchemaRegistryClient;
import org.apache.avro.specific.SpecificRecord;

/**
 * The serdes of every event type, in one wire format chosen by {@link SerdeConfig}. Owns the registry client
 * in registry mode; close it when the process ends.
 */
public final class EventSerdes implements AutoCloseable {

    private final SerdeConfig config;
    private final WireFormat format;
    private final SchemaRegistryClient client;
    private final AvroEventSerde<EngineRegistration> engineRegistration;
    private final AvroEventSerde<RequestEvent> requestEvent;
    private final AvroEventSerde<Decision> decision;
    private final AvroEventSerde<DeadLetter> deadLetter;
    private final AvroEventSerde<RequestAnswered> requestAnswered;
    private final AvroEventSerde<KvCacheEvent> kvCacheEvent;

    private EventSerdes(SerdeConfig config, WireFormat format, SchemaRegistryClient client) {
        this.config = config;
        this.format = format;
        this.client = client;
        this.engineRegistration = forType(EngineRegistration.class);
        this.requestEvent = forType(RequestEvent.class);
        this.decision = forType(Decision.class);
        this.deadLetter = forType(DeadLetter.class);
        this.requestAnswered = forType(RequestAnswered.class);
        this.kvCacheEvent = forType(KvCacheEvent.class);
    }

    public static EventSerdes create(SerdeConfig config) {
        return switch (config.mode()) {
            case EMBEDDED -> new EventSerdes(config, new SingleObjectFormat(EventSchemas.get()), null);
            case REGISTRY -> {
                SchemaRegistryClient c = new CcompatRegistryClient(config.registryUrl(), config.registryTimeout());
                yield new EventSerdes(config, new ConfluentFormat(c, config.autoRegister()), c);
            }
        };
    }

    /** Registry mode with a caller-supplied client (the caller keeps ownership). */
    public static EventSerdes withRegistry(SerdeConfig config, SchemaRegistryClient client) {
        return new EventSerdes(config, new ConfluentFormat(client, config.autoRegister()), null);
    }

    public static EventSerdes embedded() {
        return create(SerdeConfig.embedded());
    }

    public <T extends SpecificRecord> AvroEventSerde<T> forType(Class<T> type) {
        return new AvroEventSerde<>(type, format, config.maxRecordBytes(), false);
    }

    public SerdeConfig config() {
        return config;
    }

    public AvroEventSerde<EngineRegistration> engineRegistration() {
        return engineRegistration;
    }

    public AvroEventSerde<RequestEvent> requestEvent() {
        return requestEvent;
    }

    public AvroEventSerde<Decision> decision() {
        return decision;
    }

    public AvroEventSerde<DeadLetter> deadLetter() {
        return deadLetter;
    }

    public AvroEventSerde<RequestAnswered> requestAnswered() {
        return requestAnswered;
    }

    public AvroEventSerde<KvCacheEvent> kvCacheEvent() {
        return kvCacheEvent;
    }

    @Override
    public void close() {
        if (client != null) {
            try {
                client.close();
            } catch (Exception e) {
                throw new IllegalStateException("closing schema registry client", e);
            }
        }
    }
}
