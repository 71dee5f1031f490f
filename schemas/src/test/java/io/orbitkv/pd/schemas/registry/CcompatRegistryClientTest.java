package io.orbitkv.pd.schemas.registry;

import static org.assertj.core.api.Assertions.assertThat;
import static org.assertj.core.api.Assertions.assertThatThrownBy;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;
import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.schemas.AvroEventSerde;
import io.orbitkv.pd.schemas.EventDecodingException;
import io.orbitkv.pd.schemas.EventDecodingException.Reason;
import io.orbitkv.pd.schemas.EventSerdes;
import io.orbitkv.pd.schemas.SerdeConfig;
import io.orbitkv.pd.schemas.registry.SchemaRegistryClient.RegistryException;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import org.apache.avro.Schema;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * {@link CcompatRegistryClient} against a scripted JDK HTTP server: the paths and bodies it sends, what it caches,
 * and how registry answers (including Apicurio's) map to {@link RegistryException} and decoding reasons.
 */
class CcompatRegistryClientTest {

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final Schema SCHEMA = BlockRun.getClassSchema();
    private static final String CT = "application/vnd.schemaregistry.v1+json";

    /** One request as the server saw it. */
    record Seen(String method, String rawPath, String contentType, String body) { }

    /** One scripted answer. */
    record Answer(int status, String contentType, String body) {
        static Answer json(int status, String body) {
            return new Answer(status, "application/json", body);
        }
    }

    private final List<Seen> seen = new CopyOnWriteArrayList<>();
    private volatile java.util.function.Function<Seen, Answer> script = s -> Answer.json(500, "{\"message\":\"unscripted\"}");
    private HttpServer server;
    private CcompatRegistryClient client;

    @BeforeEach
    void startServer() throws IOException {
        server = HttpServer.create(new InetSocketAddress(InetAddress.getByName("127.0.0.1"), 0), 0);
        server.createContext("/", this::handle);
        server.start();
        client = new CcompatRegistryClient(URI.create("http://127.0.0.1:" + server.getAddress().getPort() + "/apis/ccompat/v7"),
                Duration.ofSeconds(5));
    }

    @AfterEach
    void stopServer() {
        client.close();
        server.stop(0);
    }

    private void handle(HttpExchange ex) throws IOException {
        try (ex) {
            String body = new String(ex.getRequestBody().readAllBytes(), StandardCharsets.UTF_8);
            Seen s = new Seen(ex.getRequestMethod(), ex.getRequestURI().getRawPath(), ex.getRequestHeaders().getFirst("Content-Type"), body);
            seen.add(s);
            Answer a = script.apply(s);
            byte[] out = a.body().getBytes(StandardCharsets.UTF_8);
            ex.getResponseHeaders().set("Content-Type", a.contentType());
            ex.sendResponseHeaders(a.status(), out.length == 0 ? -1 : out.length);
            if (out.length > 0) {
                try (OutputStream os = ex.getResponseBody()) {
                    os.write(out);
                }
            }
        }
    }

    @Test
    void registerPostsTheSchemaToVersionsAndCachesTheId() throws IOException {
        script = s -> Answer.json(200, "{\"id\":42}");

        assertThat(client.register("orbitkv.engines-value", SCHEMA)).isEqualTo(42);
        assertThat(client.register("orbitkv.engines-value", SCHEMA)).isEqualTo(42);
        assertThat(client.schemaById(42)).isSameAs(SCHEMA);

        assertThat(seen).hasSize(1);
        Seen s = seen.getFirst();
        assertThat(s.method()).isEqualTo("POST");
        assertThat(s.rawPath()).isEqualTo("/apis/ccompat/v7/subjects/orbitkv.engines-value/versions");
        assertThat(s.contentType()).isEqualTo(CT);
        JsonNode body = JSON.readTree(s.body());
        assertThat(body.path("schemaType").asText()).isEqualTo("AVRO");
        assertThat(new Schema.Parser().parse(body.path("schema").asText())).isEqualTo(SCHEMA);
    }

    @Test
    void theSameSchemaUnderAnotherSubjectIsAnotherRequest() {
        script = s -> Answer.json(200, "{\"id\":3}");

        client.register("a-value", SCHEMA);
        client.register("b-value", SCHEMA);

        assertThat(seen).extracting(Seen::rawPath)
                .containsExactly("/apis/ccompat/v7/subjects/a-value/versions", "/apis/ccompat/v7/subjects/b-value/versions");
    }

    @Test
    void idOfPostsToTheSubjectWithoutRegistering() {
        script = s -> Answer.json(200, "{\"subject\":\"t-value\",\"version\":1,\"id\":7,\"schema\":\"{}\"}");

        assertThat(client.idOf("t-value", SCHEMA)).isEqualTo(7);
        assertThat(client.idOf("t-value", SCHEMA)).isEqualTo(7);

        assertThat(seen).singleElement().satisfies(s -> {
            assertThat(s.method()).isEqualTo("POST");
            assertThat(s.rawPath()).isEqualTo("/apis/ccompat/v7/subjects/t-value");
        });
    }

    @Test
    void schemaByIdGetsItOnceAndAcceptsAnAnswerWithoutSchemaType() throws IOException {
        // Apicurio (like Confluent) leaves schemaType out for Avro.
        String answer = JSON.createObjectNode().put("schema", SCHEMA.toString()).toString();
        script = s -> Answer.json(200, answer);

        assertThat(client.schemaById(9)).isEqualTo(SCHEMA);
        assertThat(client.schemaById(9)).isEqualTo(SCHEMA);

        assertThat(seen).singleElement().satisfies(s -> {
            assertThat(s.method()).isEqualTo("GET");
            assertThat(s.rawPath()).isEqualTo("/apis/ccompat/v7/schemas/ids/9");
        });
    }

    @Test
    void aSubjectIsPercentEncodedAsAPathSegment() {
        script = s -> Answer.json(200, "{\"id\":1}");

        client.register("odd subject/+x", SCHEMA);

        assertThat(seen.getFirst().rawPath()).isEqualTo("/apis/ccompat/v7/subjects/odd%20subject%2F%2Bx/versions");
    }

    @Test
    void setCompatibilityPutsTheLevelAndCompatibilityReadsCompatibilityLevel() throws IOException {
        script = s -> s.method().equals("PUT")
                ? Answer.json(200, "{\"compatibility\":\"BACKWARD\",\"normalize\":false}")
                : Answer.json(200, "{\"compatibilityLevel\":\"BACKWARD\"}");

        assertThat(client.setCompatibility("t-value", "BACKWARD")).isEqualTo("BACKWARD");
        assertThat(client.compatibility("t-value")).isEqualTo("BACKWARD");

        assertThat(seen).extracting(Seen::method, Seen::rawPath).containsExactly(
                org.assertj.core.groups.Tuple.tuple("PUT", "/apis/ccompat/v7/config/t-value"),
                org.assertj.core.groups.Tuple.tuple("GET", "/apis/ccompat/v7/config/t-value"));
        assertThat(seen.getFirst().contentType()).isEqualTo(CT);
        assertThat(JSON.readTree(seen.getFirst().body())).isEqualTo(JSON.readTree("{\"compatibility\":\"BACKWARD\"}"));
    }

    @Test
    void anErrorAnswerCarriesStatusErrorCodeAndMessage() {
        script = s -> Answer.json(409, "{\"error_code\":409,\"message\":\"Incompatible artifact: t-value [AVRO]\"}");

        assertThatThrownBy(() -> client.register("t-value", SCHEMA))
                .isInstanceOfSatisfying(RegistryException.class, e -> {
                    assertThat(e.status()).isEqualTo(409);
                    assertThat(e.errorCode()).isEqualTo(409);
                    assertThat(e.getMessage()).contains("registering t-value").contains("HTTP 409").contains("Incompatible artifact");
                });
    }

    @Test
    void aPlainTextErrorUnderAJsonContentTypeKeepsItsStatusAndText() {
        // What Apicurio 3.3.3 answers to a body it cannot deserialize.
        script = s -> Answer.json(400, "Not able to deserialize data provided.");

        assertThatThrownBy(() -> client.register("t-value", SCHEMA))
                .isInstanceOfSatisfying(RegistryException.class, e -> {
                    assertThat(e.status()).isEqualTo(400);
                    assertThat(e.errorCode()).isEqualTo(-1);
                    assertThat(e.getMessage()).contains("HTTP 400").contains("Not able to deserialize data provided.");
                });
    }

    @Test
    void aFailedCallIsNotCached() {
        script = s -> Answer.json(503, "{\"error_code\":50003,\"message\":\"busy\"}");
        assertThatThrownBy(() -> client.register("t-value", SCHEMA)).isInstanceOf(RegistryException.class);

        script = s -> Answer.json(200, "{\"id\":5}");
        assertThat(client.register("t-value", SCHEMA)).isEqualTo(5);
        assertThat(seen).hasSize(2);
    }

    @Test
    void anAnswerWithoutAnIdIsAnError() {
        script = s -> Answer.json(200, "{}");

        assertThatThrownBy(() -> client.register("t-value", SCHEMA))
                .isInstanceOfSatisfying(RegistryException.class, e -> assertThat(e.getMessage()).contains("no id"));
    }

    @Test
    void aNonAvroSchemaIsRefused() {
        script = s -> Answer.json(200, "{\"schemaType\":\"PROTOBUF\",\"schema\":\"syntax = \\\"proto3\\\";\"}");

        assertThatThrownBy(() -> client.schemaById(4))
                .isInstanceOfSatisfying(RegistryException.class, e -> assertThat(e.getMessage()).contains("PROTOBUF"));
    }

    @Test
    void anUnreachableRegistryIsStatusMinusOne() throws IOException {
        int port;
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getByName("127.0.0.1"))) {
            port = s.getLocalPort();
        }
        try (CcompatRegistryClient down = new CcompatRegistryClient(URI.create("http://127.0.0.1:" + port + "/apis/ccompat/v7"),
                Duration.ofSeconds(2))) {
            assertThatThrownBy(() -> down.schemaById(1))
                    .isInstanceOfSatisfying(RegistryException.class, e -> {
                        assertThat(e.status()).isEqualTo(-1);
                        assertThat(e.getMessage()).contains("unreachable");
                    });
        }
    }

    @Test
    void decodingMapsANotFoundIdToUnknownSchemaAndAServerErrorToRegistryUnavailable() {
        script = s -> s.rawPath().endsWith("/404")
                ? Answer.json(404, "{\"error_code\":40403,\"message\":\"Schema 404 not found.\"}")
                : Answer.json(500, "{\"error_code\":50001,\"message\":\"storage down\"}");
        try (EventSerdes serdes = EventSerdes.withRegistry(SerdeConfig.registry(URI.create("http://unused.invalid")), client)) {
            AvroEventSerde<BlockRun> serde = serdes.forType(BlockRun.class);

            assertThatThrownBy(() -> serde.deserialize("t", new byte[] {0, 0, 0, 0x01, (byte) 0x94, 2, 2}))
                    .isInstanceOfSatisfying(EventDecodingException.class, e -> assertThat(e.reason()).isEqualTo(Reason.UNKNOWN_SCHEMA));
            assertThatThrownBy(() -> serde.deserialize("t", new byte[] {0, 0, 0, 0x01, (byte) 0xF4, 2, 2}))
                    .isInstanceOfSatisfying(EventDecodingException.class, e -> assertThat(e.reason()).isEqualTo(Reason.REGISTRY_UNAVAILABLE));
            assertThatThrownBy(() -> serde.deserialize("t", new byte[] {0, (byte) 0xff, 0, 0, 0, 2, 2}))
                    .isInstanceOfSatisfying(EventDecodingException.class, e -> assertThat(e.reason()).isEqualTo(Reason.UNKNOWN_SCHEMA));
        }
        assertThat(seen).extracting(Seen::rawPath)
                .containsExactly("/apis/ccompat/v7/schemas/ids/404", "/apis/ccompat/v7/schemas/ids/500");
    }
}
