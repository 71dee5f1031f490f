package io.orbitkv.pd.schemas.registry;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.DeadLetter;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.Dtype;
import io.orbitkv.pd.events.EngineRegistration;
import io.orbitkv.pd.events.EngineRole;
import io.orbitkv.pd.events.FailurePolicy;
import io.orbitkv.pd.events.KvLayout;
import io.orbitkv.pd.events.KvSplit;
import io.orbitkv.pd.events.MemoryRegion;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.PhaseTimings;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.events.TransportEndpoint;
import io.orbitkv.pd.schemas.AvroEventSerde;
import io.orbitkv.pd.schemas.EventDecodingException;
import io.orbitkv.pd.schemas.EventDecodingException.Reason;
import io.orbitkv.pd.schemas.EventSchemas;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.SerdeConfig;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.schemas.TopicsConfig;
import io.orbitkv.pd.schemas.registry.SchemaRegistryClient.RegistryException;
import io.orbitkv.pd.testsupport.registry.ApicurioRegistry;
import io.orbitkv.pd.testsupport.registry.WithApicurio;
import java.io.IOException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.UUID;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.apache.avro.Schema;
import org.apache.avro.specific.SpecificRecord;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.MethodSource;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Registry mode (Confluent wire format) against a real Apicurio Registry 3 through its ccompat API: every
 * top-level event round-trips, ids are the registry's, a cold client resolves ids over REST, and every failure
 * ends in the documented {@link Reason} or {@link RegistryException}.
 */
@WithApicurio
class RegistrySerdeIT {

    private static final Logger LOG = LoggerFactory.getLogger(RegistrySerdeIT.class);
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Topics TOPICS = new Topics(TopicsConfig.defaults(), EventSerdes.embedded());

    private static URI ccompat;
    private static EventSerdes writerSerdes;
    private static HttpClient raw;

    @BeforeAll
    static void connect(ApicurioRegistry registry) {
        LOG.info("Apicurio Registry started in {} ms, ccompat API at {}", registry.startupTime().toMillis(), registry.ccompatUrl());
        ccompat = registry.ccompatUrl();
        writerSerdes = EventSerdes.create(SerdeConfig.registry(ccompat));
        raw = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).build();
    }

    @AfterAll
    static void disconnect() {
        if (writerSerdes != null) {
            writerSerdes.close();
        }
        if (raw != null) {
            raw.close();
        }
    }

    /** One realistic instance of each top-level type (and of the main payload variants), with its real topic. */
    static Stream<TopicEvent> events() {
        return Stream.of(
                new TopicEvent(TOPICS.engines().name(), engineRegistration()),
                new TopicEvent(TOPICS.requestEvents().name(), requestAdmitted()),
                new TopicEvent(TOPICS.requestEvents().name(), prefillCompleted()),
                new TopicEvent(TOPICS.decisions().name(), transferOrder()),
                new TopicEvent(TOPICS.decisions().name(), requestOutcome()),
                new TopicEvent(TOPICS.deadLetters().name(), deadLetter()),
                new TopicEvent(TOPICS.answers().name(), io.orbitkv.pd.schemas.Samples.requestAnswered()),
                new TopicEvent(TOPICS.kvEvents().name(), io.orbitkv.pd.schemas.Samples.kvCacheEvents().get(0)));
    }

    @Test
    void theSamplesCoverEveryTopLevelType() {
        Set<Class<?>> sampled = events().map(e -> e.event().getClass()).collect(Collectors.toSet());
        assertThat(sampled).containsExactlyInAnyOrderElementsOf(EventSchemas.topLevelTypes());
    }

    @ParameterizedTest
    @MethodSource("events")
    void everyTopLevelTypeRoundTripsWithAnIdTheRegistryKnows(TopicEvent sample) throws Exception {
        byte[] bytes = serialize(writerSerdes, sample);

        assertThat(bytes[0]).as("Confluent magic byte").isEqualTo((byte) 0);
        int id = ByteBuffer.wrap(bytes, 1, 4).getInt();
        assertThat(id).isPositive();
        // Asked over plain REST, not through the client under test.
        JsonNode byId = getJson("schemas/ids/" + id);
        assertThat(new Schema.Parser().parse(byId.path("schema").asText()))
                .isEqualTo(EventSchemas.schemaOf(sample.event().getClass()));
        JsonNode versions = getJson("subjects/" + sample.topic() + "-value/versions");
        assertThat(versions.isArray() && !versions.isEmpty()).as("versions of %s-value: %s", sample.topic(), versions).isTrue();

        SpecificRecord decoded = deserialize(writerSerdes, sample, bytes);
        assertThat(decoded).isEqualTo(sample.event());
    }

    @Test
    void aColdClientLooksTheIdUpOverRestAndDecodes() {
        TopicEvent sample = new TopicEvent(TOPICS.decisions().name(), transferOrder());
        byte[] bytes = serialize(writerSerdes, sample);
        int id = ByteBuffer.wrap(bytes, 1, 4).getInt();

        List<String> calls = new CopyOnWriteArrayList<>();
        try (CcompatRegistryClient fresh = new CcompatRegistryClient(ccompat, Duration.ofSeconds(5));
             EventSerdes reader = EventSerdes.withRegistry(SerdeConfig.registry(ccompat), recording(fresh, calls))) {
            SpecificRecord decoded = deserialize(reader, sample, bytes);
            assertThat(decoded).isEqualTo(sample.event());
        }
        assertThat(calls).containsExactly("schemaById " + id);
    }

    @Test
    void anUnknownSchemaIdIsUnknownSchema() {
        TopicEvent sample = new TopicEvent(TOPICS.engines().name(), engineRegistration());
        byte[] bytes = serialize(writerSerdes, sample);
        ByteBuffer.wrap(bytes).put(1, new byte[] {0x00, 0x7f, 0x12, 0x34}); // id 8329780: never handed out here

        assertThatThrownBy(() -> deserialize(writerSerdes, sample, bytes))
                .isInstanceOfSatisfying(EventDecodingException.class, e -> {
                    assertThat(e.reason()).isEqualTo(Reason.UNKNOWN_SCHEMA);
                    assertThat(e.topic()).isEqualTo(sample.topic());
                    assertThat(e.getCause()).isInstanceOfSatisfying(RegistryException.class, c -> {
                        assertThat(c.status()).isEqualTo(404);
                        assertThat(c.errorCode()).isEqualTo(40403);
                    });
                });
    }

    @Test
    void aRegistryThatIsDownIsRegistryUnavailable() throws IOException {
        TopicEvent sample = new TopicEvent(TOPICS.requestEvents().name(), requestAdmitted());
        byte[] bytes = serialize(writerSerdes, sample);
        URI down = URI.create("http://127.0.0.1:" + closedPort() + "/apis/ccompat/v7");
        SerdeConfig config = new SerdeConfig(SerdeConfig.registry(down).mode(), down, true, SerdeConfig.DEFAULT_MAX_RECORD_BYTES, Duration.ofSeconds(2));

        try (EventSerdes cold = EventSerdes.create(config)) {
            assertThatThrownBy(() -> deserialize(cold, sample, bytes))
                    .isInstanceOfSatisfying(EventDecodingException.class,
                            e -> assertThat(e.reason()).isEqualTo(Reason.REGISTRY_UNAVAILABLE));
            assertThatThrownBy(() -> serialize(cold, sample))
                    .isInstanceOfSatisfying(RegistryException.class, e -> {
                        assertThat(e.status()).isEqualTo(-1);
                        assertThat(e.getMessage()).contains("unreachable");
                    });
        }
    }

    @Test
    void singleObjectBytesAreABadHeaderWithAHint() {
        TopicEvent sample = new TopicEvent(TOPICS.deadLetters().name(), deadLetter());
        byte[] embedded = serialize(EventSerdes.embedded(), sample);
        assertThat(embedded[0]).isEqualTo((byte) 0xC3);

        assertThatThrownBy(() -> deserialize(writerSerdes, sample, embedded))
                .isInstanceOfSatisfying(EventDecodingException.class, e -> {
                    assertThat(e.reason()).isEqualTo(Reason.BAD_HEADER);
                    assertThat(e.getMessage()).contains("single-object encoding").contains("serde.mode");
                });
    }

    @Test
    void anIncompatibleSchemaIsRefusedUnderBackwardCompatibility() throws IOException {
        String subject = "compat-" + UUID.randomUUID() + "-value";
        Schema v1 = EngineRegistration.getClassSchema();
        try (CcompatRegistryClient client = new CcompatRegistryClient(ccompat, Duration.ofSeconds(5))) {
            int id1 = client.register(subject, v1);
            assertThat(client.setCompatibility(subject, "BACKWARD")).isEqualTo("BACKWARD");
            assertThat(client.compatibility(subject)).isEqualTo("BACKWARD");

            // A new required field without a default: the new reader cannot read old records.
            Schema incompatible = withExtraField(v1, "rack", JSON.createObjectNode().put("name", "rack").put("type", "string"));
            assertThatThrownBy(() -> client.register(subject, incompatible))
                    .isInstanceOfSatisfying(RegistryException.class, e -> {
                        assertThat(e.status()).isEqualTo(409);
                        assertThat(e.getMessage()).contains("HTTP 409").contains(subject);
                    });

            // The same change with a default is backward compatible: accepted as a new version.
            Schema compatible = withExtraField(v1, "rack",
                    JSON.createObjectNode().put("name", "rack").put("type", "string").put("default", "rack-0"));
            int id2 = client.register(subject, compatible);
            assertThat(id2).isNotEqualTo(id1);
            assertThat(getJson("subjects/" + subject + "/versions")).hasSize(2);
        }
    }

    @Test
    void anUnknownCompatibilityLevelIsRefusedWithItsStatus() {
        String subject = "level-" + UUID.randomUUID() + "-value";
        try (CcompatRegistryClient client = new CcompatRegistryClient(ccompat, Duration.ofSeconds(5))) {
            client.register(subject, DeadLetter.getClassSchema());
            assertThatThrownBy(() -> client.setCompatibility(subject, "SIDEWAYS"))
                    .isInstanceOfSatisfying(RegistryException.class, e -> {
                        assertThat(e.status()).isEqualTo(422);
                        assertThat(e.errorCode()).isEqualTo(42203);
                    });
        }
    }

    // ---------------------------------------------------------------------------------------------------------

    /** An event and the topic it is written to. */
    record TopicEvent(String topic, SpecificRecord event) {
        @Override
        public String toString() {
            return event.getClass().getSimpleName() + " on " + topic;
        }
    }

    @SuppressWarnings("unchecked")
    private static <T extends SpecificRecord> byte[] serialize(EventSerdes serdes, TopicEvent sample) {
        AvroEventSerde<T> serde = serdes.forType((Class<T>) sample.event().getClass());
        return serde.serialize(sample.topic(), (T) sample.event());
    }

    @SuppressWarnings("unchecked")
    private static <T extends SpecificRecord> T deserialize(EventSerdes serdes, TopicEvent sample, byte[] bytes) {
        AvroEventSerde<T> serde = serdes.forType((Class<T>) sample.event().getClass());
        return serde.deserialize(sample.topic(), bytes);
    }

    private static JsonNode getJson(String path) throws IOException {
        HttpRequest req = HttpRequest.newBuilder(URI.create(ccompat + "/" + path)).timeout(Duration.ofSeconds(5)).GET().build();
        try {
            HttpResponse<String> resp = raw.send(req, HttpResponse.BodyHandlers.ofString());
            assertThat(resp.statusCode()).as("GET %s: %s", path, resp.body()).isEqualTo(200);
            return JSON.readTree(resp.body());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted", e);
        }
    }

    private static Schema withExtraField(Schema base, String name, ObjectNode field) throws IOException {
        ObjectNode json = (ObjectNode) JSON.readTree(base.toString());
        ((ArrayNode) json.get("fields")).add(field);
        Schema evolved = new Schema.Parser().parse(json.toString());
        assertThat(evolved.getField(name)).isNotNull();
        return evolved;
    }

    private static int closedPort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getByName("127.0.0.1"))) {
            return s.getLocalPort();
        }
    }

    private static SchemaRegistryClient recording(SchemaRegistryClient delegate, List<String> calls) {
        return new SchemaRegistryClient() {
            @Override
            public int register(String subject, Schema schema) {
                calls.add("register " + subject);
                return delegate.register(subject, schema);
            }

            @Override
            public int idOf(String subject, Schema schema) {
                calls.add("idOf " + subject);
                return delegate.idOf(subject, schema);
            }

            @Override
            public Schema schemaById(int id) {
                calls.add("schemaById " + id);
                return delegate.schemaById(id);
            }
        };
    }

    // --- realistic samples --------------------------------------------------------------------------------------

    private static KvLayout layout() {
        // Llama-3-8B-like, TP 2: 32 layers, 4 KV heads per rank, head_dim 128, 16-token blocks, BF16.
        return KvLayout.newBuilder().setNumLayers(32).setKvSplit(KvSplit.SEPARATE).setBlockSizeTokens(16)
                .setNumKvHeads(4).setHeadDim(128).setDtype(Dtype.BF16).setTpRank(1).setTpSize(2)
                .setPageBytes(16 * 4 * 128 * 2).setNumBlocks(8192).build();
    }

    private static List<BlockRun> runs(int... startCount) {
        List<BlockRun> out = new ArrayList<>();
        for (int i = 0; i < startCount.length; i += 2) {
            out.add(new BlockRun(startCount[i], startCount[i + 1]));
        }
        return out;
    }

    static EngineRegistration engineRegistration() {
        return EngineRegistration.newBuilder()
                .setEngineId("decode-0")
                .setRole(EngineRole.DECODE)
                .setInstanceEpoch(1_767_225_600_123L)
                .setModel("meta-llama/Meta-Llama-3-8B-Instruct")
                .setHttpUrl("http://10.0.4.17:8000/v1")
                .setEndpoints(List.of(
                        new TransportEndpoint("tcp", "10.0.4.17:7400", Map.of("mtu", "9000", "streams", "4")),
                        new TransportEndpoint("cuda", "node-17", Map.of())))
                .setLayout(layout())
                .setRegions(List.of(
                        new MemoryRegion(0, "K", 0x7f3a_0000_0000L, 8192L * 16 * 4 * 128 * 2, "cuda:1",
                                ByteBuffer.wrap("ipc-handle-bytes-0123456789abcdef".getBytes(StandardCharsets.US_ASCII))),
                        new MemoryRegion(0, "V", 0x7f3b_0000_0000L, 8192L * 16 * 4 * 128 * 2, "host", null)))
                .setRegisteredAtMs(1_767_225_601_000L)
                .setDeregistered(false)
                .build();
    }

    static RequestEvent requestAdmitted() {
        return RequestEvent.newBuilder()
                .setRequestId("req-7f9c2e")
                .setEventId("req-7f9c2e/admitted/0")
                .setSource("proxy-1")
                .setEventTimeMs(1_767_225_700_000L)
                .setPayload(RequestAdmitted.newBuilder().setModel("meta-llama/Meta-Llama-3-8B-Instruct")
                        .setPromptTokens(3_210).setMaxTokens(512).setPrefillEngineId("prefill-0")
                        .setDecodeEngineId("decode-0").setFailurePolicy(FailurePolicy.RECOMPUTE)
                        .setDeadlineMs(1_767_225_730_000L).build())
                .build();
    }

    static RequestEvent prefillCompleted() {
        return RequestEvent.newBuilder()
                .setRequestId("req-7f9c2e")
                .setEventId("req-7f9c2e/prefill-completed/0")
                .setSource("engine:prefill-0")
                .setEventTimeMs(1_767_225_700_420L)
                .setPayload(PrefillCompleted.newBuilder().setEngineId("prefill-0").setInstanceEpoch(1_767_225_500_000L)
                        .setSourceBlocks(runs(128, 150, 4000, 51)).setNumTokens(3_210).setFirstToken(791)
                        .setLayout(layout()).build())
                .build();
    }

    static Decision transferOrder() {
        return Decision.newBuilder()
                .setRequestId("req-7f9c2e")
                .setDecisionId("req-7f9c2e/order/1")
                .setSeq(2)
                .setStreamTimeMs(1_767_225_700_450L)
                .setCauseEventId("req-7f9c2e/decode-ready/0")
                .setPayload(TransferOrder.newBuilder().setOrderId("req-7f9c2e/order").setAttempt(1)
                        .setSourceEngineId("prefill-0").setSourceInstanceEpoch(1_767_225_500_000L)
                        .setDestEngineId("decode-0").setDestInstanceEpoch(1_767_225_600_123L)
                        .setSourceBlocks(runs(128, 150, 4000, 51)).setDestBlocks(runs(77, 201))
                        .setLayout(layout()).setLeaseId("lease-decode-0-9912").setLeaseEpoch(3)
                        .setAuthToken(ByteBuffer.wrap(sha256Like()))
                        .setDeadlineMs(1_767_225_705_450L).setTransport("tcp").build())
                .build();
    }

    static Decision requestOutcome() {
        return Decision.newBuilder()
                .setRequestId("req-7f9c2e")
                .setDecisionId("req-7f9c2e/outcome")
                .setSeq(6)
                .setStreamTimeMs(1_767_225_709_000L)
                .setCauseEventId(null)
                .setPayload(RequestOutcome.newBuilder().setKind(OutcomeKind.COMPLETED).setReason("decode completed")
                        .setAttempts(1).setPrefillEngineId("prefill-0").setDecodeEngineId("decode-0")
                        .setKvBytes(201L * 32 * 2 * 16 * 4 * 128 * 2)
                        .setTimings(new PhaseTimings(1_767_225_700_000L, 1_767_225_700_420L, 1_767_225_700_440L,
                                1_767_225_700_450L, 1_767_225_700_610L, 1_767_225_709_000L))
                        .build())
                .build();
    }

    static DeadLetter deadLetter() {
        return DeadLetter.newBuilder()
                .setComponent("decider")
                .setTopic(TOPICS.requestEvents().name())
                .setPartition(5)
                .setOffset(918_273L)
                .setOriginalKey(ByteBuffer.wrap("req-7f9c2e".getBytes(StandardCharsets.UTF_8)))
                .setOriginalValue(ByteBuffer.wrap(new byte[] {(byte) 0xC3, 0x01, 0x00, 0x13, 0x37}))
                .setReason("cannot decode record (TRUNCATED): payload ends at byte 5")
                .setErrorType("UNDECODABLE")
                .setDeadLetteredAtMs(1_767_225_710_000L)
                .build();
    }

    private static byte[] sha256Like() {
        byte[] token = new byte[32];
        for (int i = 0; i < token.length; i++) {
            token[i] = (byte) (i * 37 + 11);
        }
        return token;
    }
}
