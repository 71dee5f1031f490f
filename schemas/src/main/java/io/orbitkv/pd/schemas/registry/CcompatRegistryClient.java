package io.orbitkv.pd.schemas.registry;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.net.URI;
import java.net.URLEncoder;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.avro.Schema;

/**
 * A small client for the Confluent Schema Registry REST API (also served by Apicurio under
 * {@code /apis/ccompat/v7}, by Karapace and by Redpanda). Uses only: {@code POST /subjects/{s}/versions},
 * {@code POST /subjects/{s}}, {@code GET /schemas/ids/{id}} and {@code GET/PUT /config/{s}}. Thread-safe; ids and
 * schemas are cached for the life of the client, which is safe because registry ids are immutable.
 *
 * <p>Checked against Apicurio Registry 3.3.3: it omits {@code schemaType} for Avro schemas (as Confluent does), its
 * ids are content ids shared across subjects and a refused registration may still consume one (ids can have gaps),
 * it answers some errors (a body it cannot parse: HTTP 400) with plain text under a JSON content type, and it
 * reports an incompatible schema as HTTP 409 with {@code error_code} 409. Requests use HTTP/1.1 so that no h2c
 * upgrade is attempted on plain {@code http://}.
 */
public final class CcompatRegistryClient implements SchemaRegistryClient {

    private static final String CONTENT_TYPE = "application/vnd.schemaregistry.v1+json";
    private static final ObjectMapper JSON = new ObjectMapper();

    private final URI base;
    private final Duration timeout;
    private final HttpClient http;
    private final Map<String, Integer> idsBySubjectAndSchema = new ConcurrentHashMap<>();
    private final Map<Integer, Schema> schemasById = new ConcurrentHashMap<>();

    /**
     * @param baseUrl base of the Confluent-compatible API, for Apicurio {@code http://host:port/apis/ccompat/v7}
     * @param timeout connect and per-request timeout
     */
    public CcompatRegistryClient(URI baseUrl, Duration timeout) {
        String s = baseUrl.toString();
        this.base = URI.create(s.endsWith("/") ? s : s + "/");
        this.timeout = timeout;
        this.http = HttpClient.newBuilder().version(HttpClient.Version.HTTP_1_1).connectTimeout(timeout).build();
    }

    /** The base URL requests are resolved against (always ending in {@code /}). */
    public URI baseUrl() {
        return base;
    }

    /**
     * Sets the compatibility level of one subject ({@code PUT /config/{subject}}), for example {@code BACKWARD},
     * {@code FULL_TRANSITIVE} or {@code NONE}.
     *
     * @return the level the registry answered it now has
     * @throws RegistryException when the registry refuses the level (HTTP 422 for an unknown one) or is unreachable
     */
    public String setCompatibility(String subject, String level) {
        String body = JSON.createObjectNode().put("compatibility", level).toString();
        JsonNode answer = call("PUT", "config/" + enc(subject), body, "setting compatibility of " + subject + " to " + level);
        return answer.path("compatibility").asText(level);
    }

    /**
     * The compatibility level of one subject ({@code GET /config/{subject}}); the answer's field is
     * {@code compatibilityLevel}, unlike the {@code compatibility} of the PUT.
     */
    public String compatibility(String subject) {
        JsonNode answer = call("GET", "config/" + enc(subject), null, "reading compatibility of " + subject);
        String level = answer.path("compatibilityLevel").asText(answer.path("compatibility").asText(""));
        if (level.isEmpty()) {
            throw new RegistryException("registry answered no compatibility level for " + subject + ": " + answer, 200, -1, null);
        }
        return level;
    }

    @Override
    public int register(String subject, Schema schema) {
        return idsBySubjectAndSchema.computeIfAbsent(subject + '\u0000' + schema, k -> {
            JsonNode body = call("POST", "subjects/" + enc(subject) + "/versions", schemaBody(schema), "registering " + subject);
            int id = body.path("id").asInt(-1);
            if (id < 0) {
                throw new RegistryException("registry answered no id when registering " + subject + ": " + body, 200, -1, null);
            }
            schemasById.putIfAbsent(id, schema);
            return id;
        });
    }

    @Override
    public int idOf(String subject, Schema schema) {
        return idsBySubjectAndSchema.computeIfAbsent(subject + '\u0000' + schema, k -> {
            JsonNode body = call("POST", "subjects/" + enc(subject), schemaBody(schema), "looking up " + subject);
            int id = body.path("id").asInt(-1);
            if (id < 0) {
                throw new RegistryException("registry answered no id when looking up " + subject + ": " + body, 200, -1, null);
            }
            schemasById.putIfAbsent(id, schema);
            return id;
        });
    }

    @Override
    public Schema schemaById(int id) {
        Schema cached = schemasById.get(id);
        if (cached != null) {
            return cached;
        }
        JsonNode body = call("GET", "schemas/ids/" + id, null, "looking up schema id " + id);
        String type = body.path("schemaType").asText("AVRO");
        if (!"AVRO".equals(type)) {
            throw new RegistryException("schema id " + id + " is " + type + ", not AVRO", 200, -1, null);
        }
        Schema schema;
        try {
            schema = new Schema.Parser().parse(body.path("schema").asText());
        } catch (RuntimeException e) {
            throw new RegistryException("schema id " + id + " from the registry does not parse: " + e.getMessage(), 200, -1, e);
        }
        Schema prev = schemasById.putIfAbsent(id, schema);
        return prev == null ? schema : prev;
    }

    private static String schemaBody(Schema schema) {
        return JSON.createObjectNode().put("schemaType", "AVRO").put("schema", schema.toString()).toString();
    }

    private JsonNode call(String method, String path, String body, String what) {
        HttpRequest.Builder req = HttpRequest.newBuilder(base.resolve(path)).timeout(timeout)
                .header("Accept", CONTENT_TYPE + ", application/json");
        if (body != null) {
            req.header("Content-Type", CONTENT_TYPE).method(method, HttpRequest.BodyPublishers.ofString(body));
        } else {
            req.method(method, HttpRequest.BodyPublishers.noBody());
        }
        HttpResponse<String> resp;
        try {
            resp = http.send(req.build(), HttpResponse.BodyHandlers.ofString());
        } catch (IOException e) {
            throw new RegistryException("schema registry at " + base + " unreachable while " + what + ": " + e, -1, -1, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new RegistryException("interrupted while " + what, -1, -1, e);
        }
        int status = resp.statusCode();
        String text = resp.body() == null ? "" : resp.body();
        if (status / 100 != 2) {
            // Error bodies are {"error_code":..., "message":...}, but Apicurio answers some (HTTP 400 for a body it
            // cannot read) with plain text under a JSON content type: keep the status and the raw text then.
            JsonNode err = parseOrNull(text);
            String message = err != null && err.hasNonNull("message") ? err.path("message").asText() : abbreviate(text);
            int errorCode = err != null ? err.path("error_code").asInt(-1) : -1;
            throw new RegistryException("schema registry refused " + what + ": HTTP " + status
                    + (errorCode >= 0 ? " (error " + errorCode + ")" : "") + " " + message, status, errorCode, null);
        }
        JsonNode json = text.isBlank() ? JSON.createObjectNode() : parseOrNull(text);
        if (json == null) {
            throw new RegistryException("schema registry answered non-JSON (HTTP " + status + ") while " + what + ": "
                    + abbreviate(text), status, -1, null);
        }
        return json;
    }

    private static JsonNode parseOrNull(String text) {
        try {
            return JSON.readTree(text);
        } catch (IOException e) {
            return null;
        }
    }

    private static String abbreviate(String text) {
        String t = text.strip();
        return t.length() <= 300 ? t : t.substring(0, 300) + "...";
    }

    /** Percent-encodes one path segment (URLEncoder is for forms: it would turn a space into a literal '+'). */
    private static String enc(String s) {
        return URLEncoder.encode(s, StandardCharsets.UTF_8).replace("+", "%20");
    }

    /** Releases the HTTP client's threads and connections. */
    @Override
    public void close() {
        http.close();
    }
}
