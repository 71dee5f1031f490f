package io.orbitkv.pd.dashboard.internal;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.dashboard.stats.Aggregate;
import io.orbitkv.pd.dashboard.stats.AggregateCodec;
import io.orbitkv.pd.dashboard.stats.StatsWindow;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.StoreQueryParameters;
import org.apache.kafka.streams.kstream.Windowed;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.QueryableStoreTypes;
import org.apache.kafka.streams.state.ReadOnlyKeyValueStore;
import org.apache.kafka.streams.state.ReadOnlyWindowStore;

/**
 * This instance's share of the statistics: the partial aggregates of every task it runs, read through interactive
 * queries, and their wire form for the fan-out ({@code GET /internal/partials}). Range queries ({@code fetchAll},
 * {@code all}, {@code range}) span every local task's store, unlike a single-key fetch, which stops at the first task
 * that has the key: here every task holds the same keys.
 */
public final class LocalView {

    private static final ObjectMapper JSON = new ObjectMapper();

    /** What one instance contributes to a query. */
    public record Part(List<Overview.Partial> partials, Map<String, Long> inflight, List<JsonNode> failures) { }

    private final KafkaStreams streams;

    public LocalView(KafkaStreams streams) {
        this.streams = streams;
    }

    public Part read(StatsWindow window, long from, long to) {
        return new Part(partials(window, from, to), inflight(), failures(from, to));
    }

    private List<Overview.Partial> partials(StatsWindow window, long from, long to) {
        ReadOnlyWindowStore<String, Aggregate> store = streams.store(StoreQueryParameters
                .fromNameAndType(window.storeName(), QueryableStoreTypes.<String, Aggregate>windowStore()));
        List<Overview.Partial> out = new ArrayList<>();
        try (KeyValueIterator<Windowed<String>, Aggregate> it = store.fetchAll(Instant.ofEpochMilli(from), Instant.ofEpochMilli(to - 1))) {
            while (it.hasNext()) {
                KeyValue<Windowed<String>, Aggregate> kv = it.next();
                out.add(new Overview.Partial(kv.key.window().start(), kv.key.key(), kv.value));
            }
        }
        return out;
    }

    /** In-flight requests per engine over this instance's tasks. */
    public Map<String, Long> inflight() {
        Map<String, Long> out = new TreeMap<>();
        try (KeyValueIterator<String, String> it = kv(DashboardNames.INFLIGHT_STORE).all()) {
            while (it.hasNext()) {
                KeyValue<String, String> e = it.next();
                if (e.key.startsWith(StatsKeys.ENGINE_PREFIX)) {
                    out.merge(e.key.substring(StatsKeys.ENGINE_PREFIX.length()), Long.parseLong(e.value), Long::sum);
                }
            }
        }
        return out;
    }

    private List<JsonNode> failures(long from, long to) {
        List<JsonNode> out = new ArrayList<>();
        try (KeyValueIterator<String, String> it = kv(DashboardNames.FAILURES_STORE)
                .range(StatsProcessor.failureKey(from, "", ""), StatsProcessor.failureKey(to, "", ""))) {
            while (it.hasNext()) {
                try {
                    out.add(JSON.readTree(it.next().value));
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            }
        }
        return out;
    }

    private ReadOnlyKeyValueStore<String, String> kv(String name) {
        return streams.store(StoreQueryParameters.fromNameAndType(name, QueryableStoreTypes.<String, String>keyValueStore()));
    }

    /** The wire form of a part (aggregates in their binary codec, base64). */
    public static ObjectNode toJson(Part part) {
        ObjectNode out = JSON.createObjectNode();
        ArrayNode ws = out.putArray("windows");
        Base64.Encoder b64 = Base64.getEncoder();
        for (Overview.Partial p : part.partials()) {
            ws.addObject().put("s", p.start()).put("k", p.key()).put("a", b64.encodeToString(AggregateCodec.encode(p.aggregate())));
        }
        ObjectNode inflight = out.putObject("inflight");
        part.inflight().forEach(inflight::put);
        ArrayNode fs = out.putArray("failures");
        part.failures().forEach(fs::add);
        return out;
    }

    public static Part fromJson(JsonNode n) {
        List<Overview.Partial> partials = new ArrayList<>();
        Base64.Decoder b64 = Base64.getDecoder();
        for (JsonNode w : n.path("windows")) {
            partials.add(new Overview.Partial(w.path("s").asLong(), w.path("k").asText(), AggregateCodec.decode(b64.decode(w.path("a").asText()))));
        }
        Map<String, Long> inflight = new TreeMap<>();
        n.path("inflight").properties().forEach(e -> inflight.put(e.getKey(), e.getValue().asLong()));
        List<JsonNode> failures = new ArrayList<>();
        n.path("failures").forEach(failures::add);
        return new Part(partials, inflight, failures);
    }
}
