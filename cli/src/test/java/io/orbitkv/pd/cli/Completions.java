package io.orbitkv.pd.cli;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.orbitkv.pd.harness.Pipeline;
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;

/** Streamed completions through a pipeline's proxy, and the answer text out of their events: for the pipeline ITs. */
final class Completions {

    private static final ObjectMapper JSON = new ObjectMapper();
    private static final HttpClient HTTP = HttpClient.newHttpClient();

    private Completions() { }

    /** A streamed completion of {@code prompt} for the tiny simulated model, {@code maxTokens} tokens. */
    static HttpResponse<String> complete(Pipeline p, String prompt, int maxTokens) throws Exception {
        return HTTP.send(HttpRequest.newBuilder(URI.create(p.proxyUrl() + "/v1/completions")).header("content-type", "application/json")
                .POST(HttpRequest.BodyPublishers.ofString(JSON.createObjectNode().put("model", "orbitkv-sim-tiny").put("prompt", prompt)
                        .put("max_tokens", maxTokens).put("stream", true).toString())).build(), HttpResponse.BodyHandlers.ofString());
    }

    /** The answer's text: every streamed chunk's {@code choices[0].text}, joined. */
    static String text(String sse) throws Exception {
        StringBuilder b = new StringBuilder();
        for (String line : sse.split("\n")) {
            if (line.startsWith("data: {")) {
                JsonNode c = JSON.readTree(line.substring(6)).path("choices");
                if (c.size() > 0) {
                    b.append(c.get(0).path("text").asText());
                }
            }
        }
        return b.toString();
    }
}
