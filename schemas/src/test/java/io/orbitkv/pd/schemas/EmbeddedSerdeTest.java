package io.orbitkv.pd.schemas;

import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.FailurePolicy;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.schemas.EventSchemas.Released;
import io.orbitkv.pd.schemas.internal.SingleObjectFormat;
import io.orbitkv.pd.schemas.internal.WireFormat;
import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.stream.Collectors;
import org.apache.avro.Schema;
import org.apache.avro.SchemaNormalization;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.avro.io.EncoderFactory;
import org.apache.avro.message.BinaryMessageDecoder;
import org.apache.avro.message.BinaryMessageEncoder;
import org.apache.avro.specific.SpecificData;
import org.apache.avro.specific.SpecificRecord;
import org.junit.jupiter.api.Test;

/** The embedded (single-object encoding) serde: round trips, header layout, released and older writer schemas. */
class EmbeddedSerdeTest {

    private static final String TOPIC = "orbitkv.test";
    private final EventSerdes serdes = EventSerdes.embedded();

    @Test
    void everyTopLevelTypeRoundTripsWithEveryUnionBranch() {
        // given a realistic instance of every type and every payload branch
        for (SpecificRecord sample : Samples.all()) {
            AvroEventSerde<SpecificRecord> serde = serdeFor(sample);
            // when
            byte[] bytes = serde.serialize(TOPIC, sample);
            SpecificRecord back = serde.deserialize(TOPIC, bytes);
            // then
            assertThat(back).as("round trip of %s", sample).isEqualTo(sample);
        }
    }

    @Test
    void samplesCoverEveryBranchOfTheEnvelopes() {
        // given the payload unions as compiled (a new branch must get a sample, or this fails)
        Set<String> requestBranches = branchNames(RequestEvent.getClassSchema());
        Set<String> decisionBranches = branchNames(Decision.getClassSchema());
        // when
        Set<String> sampledRequest = Samples.requestEvents().stream().map(e -> e.getPayload().getClass().getSimpleName()).collect(Collectors.toSet());
        Set<String> sampledDecision = Samples.decisions().stream().map(d -> d.getPayload().getClass().getSimpleName()).collect(Collectors.toSet());
        // then
        assertThat(sampledRequest).isEqualTo(requestBranches);
        assertThat(sampledDecision).isEqualTo(decisionBranches);
        assertThat(Samples.all()).extracting(Object::getClass).map(Class::getSimpleName)
                .containsAll(EventSchemas.topLevelTypes().stream().map(Class::getSimpleName).toList());
    }

    @Test
    void headerIsC301AndTheLittleEndianFingerprintOfTheWriterSchema() {
        for (SpecificRecord sample : Samples.all()) {
            // given
            Schema schema = sample.getSchema();
            long expected = SchemaNormalization.parsingFingerprint64(schema);
            // when
            byte[] bytes = serdeFor(sample).serialize(TOPIC, sample);
            // then
            assertThat(bytes[0] & 0xff).isEqualTo(0xC3);
            assertThat(bytes[1] & 0xff).isEqualTo(0x01);
            assertThat(ByteBuffer.wrap(bytes, 2, 8).order(ByteOrder.LITTLE_ENDIAN).getLong()).isEqualTo(expected);
        }
    }

    @Test
    void bytesAreExactlyAvrosOwnSingleObjectEncodingBothWays() throws IOException {
        // given Avro's reference implementation of single-object encoding
        for (SpecificRecord sample : Samples.all()) {
            BinaryMessageEncoder<SpecificRecord> avroEncoder = new BinaryMessageEncoder<>(SpecificData.get(), sample.getSchema());
            BinaryMessageDecoder<SpecificRecord> avroDecoder = new BinaryMessageDecoder<>(SpecificData.get(), sample.getSchema());
            // when
            byte[] ours = serdeFor(sample).serialize(TOPIC, sample);
            byte[] theirs = avroEncoder.encode(sample).array();
            // then: any Avro client can read our records and we can read theirs
            assertThat(ours).isEqualTo(theirs);
            assertThat(avroDecoder.decode(ours)).isEqualTo(sample);
            assertThat(serdeFor(sample).deserialize(TOPIC, theirs)).isEqualTo(sample);
        }
    }

    @Test
    void everyReleasedV1FingerprintResolvesAndV1DataDecodes() throws IOException {
        // given the released versions on the class path
        List<Released> v1 = EventSchemas.get().released().stream().filter(r -> r.version().equals("v1")).toList();
        // (types added later, like RequestAnswered in v2, are held to their own releases by SchemaCompatibilityTest)
        assertThat(v1).extracting(Released::name).containsExactlyInAnyOrder("EngineRegistration", "RequestEvent", "Decision", "DeadLetter");
        for (Released r : v1) {
            long fp = EventSchemas.fingerprint(r.schema());
            // when
            Schema resolved = EventSchemas.get().byFingerprint(fp).orElseThrow(() -> new AssertionError(r.name() + " v1 fingerprint unresolved"));
            // then
            assertThat(SchemaNormalization.toParsingForm(resolved)).isEqualTo(SchemaNormalization.toParsingForm(r.schema()));
        }
        // and records written by a v1 writer decode (every type v1 has)
        for (SpecificRecord sample : Samples.all()) {
            java.util.Optional<Released> released = v1.stream().filter(r -> r.name().equals(sample.getSchema().getName())).findFirst();
            if (released.isEmpty()) {
                continue;
            }
            Schema v1Writer = released.get().schema();
            byte[] bytes = frame(v1Writer, encode(v1Writer, sample));
            assertThat(serdeFor(sample).deserialize(TOPIC, bytes)).isEqualTo(sample);
        }
    }

    @Test
    void dataFromAnOlderWriterWithoutADefaultedFieldReadsWithTheDefault() throws IOException {
        // given an older release, loaded by the released-index loader from a test class loader, whose Decision
        // lacks cause_event_id and whose RequestAdmitted lacks failure_policy (both defaulted today)
        Schema oldDecision = SchemaJson.edit(Decision.getClassSchema(), "Decision", r -> SchemaJson.removeField(r, "cause_event_id"));
        Schema oldRequest = SchemaJson.edit(RequestEvent.getClassSchema(), "RequestAdmitted", r -> SchemaJson.removeField(r, "failure_policy"));
        Map<String, String> files = new HashMap<>();
        files.put("test/released/index.txt", "# test release\nv0/Decision.avsc\r\n\nv0/RequestEvent.avsc\n");
        files.put("test/released/v0/Decision.avsc", oldDecision.toString(true));
        files.put("test/released/v0/RequestEvent.avsc", oldRequest.toString(true));
        List<Released> older = EventSchemas.loadReleased(new MapClassLoader(files), "test/released/");
        assertThat(older).extracting(Released::version, Released::name)
                .containsExactly(org.assertj.core.groups.Tuple.tuple("v0", "Decision"), org.assertj.core.groups.Tuple.tuple("v0", "RequestEvent"));
        WireFormat format = new OlderWriters(older);
        AvroEventSerde<Decision> decisions = new AvroEventSerde<>(Decision.class, format, SerdeConfig.DEFAULT_MAX_RECORD_BYTES, false);
        AvroEventSerde<RequestEvent> requests = new AvroEventSerde<>(RequestEvent.class, format, SerdeConfig.DEFAULT_MAX_RECORD_BYTES, false);

        // when records written by the old writers are read by the current serde
        Decision decision = Samples.decisions().get(0);
        Decision readDecision = decisions.deserialize(TOPIC, frame(older.get(0).schema(), asOlder(decision, older.get(0).schema())));
        RequestEvent admitted = Samples.requestEvents().get(0);
        assertThat(((RequestAdmitted) admitted.getPayload()).getFailurePolicy()).isEqualTo(FailurePolicy.RECOMPUTE);
        RequestEvent readAdmitted = requests.deserialize(TOPIC, frame(older.get(1).schema(), asOlder(admitted, older.get(1).schema())));

        // then every other field survives and the missing ones take their defaults
        assertThat(readDecision.getCauseEventId()).isNull();
        assertThat(readDecision).usingRecursiveComparison().ignoringFields("cause_event_id").isEqualTo(decision);
        assertThat(((RequestAdmitted) readAdmitted.getPayload()).getFailurePolicy()).isEqualTo(FailurePolicy.FAIL);
        assertThat(readAdmitted.getPayload()).usingRecursiveComparison().ignoringFields("failure_policy").isEqualTo(admitted.getPayload());
        assertThat(readAdmitted.getRequestId()).isEqualTo(admitted.getRequestId());
    }

    @Test
    void nullIsATombstoneBothWays() {
        for (SpecificRecord sample : Samples.all()) {
            AvroEventSerde<SpecificRecord> serde = serdeFor(sample);
            assertThat(serde.serialize(TOPIC, null)).isNull();
            assertThat(serde.deserialize(TOPIC, null)).isNull();
        }
    }

    @SuppressWarnings("unchecked")
    static AvroEventSerde<SpecificRecord> serdeFor(EventSerdes serdes, SpecificRecord sample) {
        return (AvroEventSerde<SpecificRecord>) (AvroEventSerde<?>) serdes.forType(sample.getClass());
    }

    private AvroEventSerde<SpecificRecord> serdeFor(SpecificRecord sample) {
        return serdeFor(serdes, sample);
    }

    private static Set<String> branchNames(Schema envelope) {
        return envelope.getField("payload").schema().getTypes().stream().map(Schema::getName).collect(Collectors.toSet());
    }

    /** C3 01, the writer's fingerprint (little-endian), then the payload: what an older producer put on the topic. */
    static byte[] frame(Schema writer, byte[] payload) {
        ByteBuffer b = ByteBuffer.allocate(10 + payload.length).order(ByteOrder.LITTLE_ENDIAN);
        b.put((byte) 0xC3).put((byte) 0x01).putLong(EventSchemas.fingerprint(writer)).put(payload);
        return b.array();
    }

    private static byte[] encode(Schema writer, Object datum) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        BinaryEncoder enc = EncoderFactory.get().binaryEncoder(out, null);
        new GenericDatumWriter<>(writer, SpecificData.get()).write(datum, enc);
        enc.flush();
        return out.toByteArray();
    }

    /**
     * The payload an old producer would have written: the current record resolved to the old schema (which drops
     * the fields it lacks) and written with it. Writing the specific record with the old schema directly would
     * take fields by the old positions, which shift when a field is removed.
     */
    private static byte[] asOlder(SpecificRecord current, Schema old) throws IOException {
        byte[] now = encode(current.getSchema(), current);
        GenericRecord asOld = new GenericDatumReader<GenericRecord>(current.getSchema(), old)
                .read(null, DecoderFactory.get().binaryDecoder(now, null));
        ByteArrayOutputStream out = new ByteArrayOutputStream();
        BinaryEncoder enc = EncoderFactory.get().binaryEncoder(out, null);
        new GenericDatumWriter<GenericRecord>(old).write(asOld, enc);
        enc.flush();
        byte[] bytes = out.toByteArray();
        assertThat(bytes).as("old payload differs from the current one").isNotEqualTo(now);
        return bytes;
    }

    /** Serves resources from memory, so the released-index loader can be pointed at a test release. */
    private static final class MapClassLoader extends ClassLoader {
        private final Map<String, String> files;

        MapClassLoader(Map<String, String> files) {
            super(null);
            this.files = files;
        }

        @Override
        public InputStream getResourceAsStream(String name) {
            String text = files.get(name);
            return text == null ? null : new ByteArrayInputStream(text.getBytes(StandardCharsets.UTF_8));
        }
    }

    /** The embedded format with extra (older) writer schemas registered by fingerprint, as a release would. */
    private static final class OlderWriters implements WireFormat {
        private final SingleObjectFormat current = new SingleObjectFormat(EventSchemas.get());
        private final Map<Long, Schema> older = new HashMap<>();

        OlderWriters(List<Released> released) {
            released.forEach(r -> older.put(EventSchemas.fingerprint(r.schema()), r.schema()));
        }

        @Override
        public byte[] header(String subject, Schema writer) {
            return current.header(subject, writer);
        }

        @Override
        public Located locate(String topic, String subject, byte[] data) {
            if (data.length >= 10) {
                long fp = ByteBuffer.wrap(data, 2, 8).order(ByteOrder.LITTLE_ENDIAN).getLong();
                Schema old = older.get(fp);
                if (old != null) {
                    return new Located(old, fp, 10);
                }
            }
            return current.locate(topic, subject, data);
        }
    }
}
