package io.orbitkv.pd.bench.gpu;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.SerializationFeature;
import java.io.UncheckedIOException;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/** The GPU suite's result files (maps, lists, numbers, strings) as indented JSON, through Jackson. */
final class Json {

    private static final ObjectMapper MAPPER = new ObjectMapper().enable(SerializationFeature.INDENT_OUTPUT);

    private Json() { }

    /** {@code v} as JSON; a non-finite number (a measurement that did not happen) is written as null. */
    static String write(Object v) {
        try {
            return MAPPER.writeValueAsString(finite(v)) + "\n";
        } catch (JsonProcessingException e) {
            throw new UncheckedIOException(e);
        }
    }

    private static Object finite(Object v) {
        return switch (v) {
            case Double d when !Double.isFinite(d) -> null;
            case Float f when !Float.isFinite(f) -> null;
            case Map<?, ?> m -> {
                Map<String, Object> out = new LinkedHashMap<>();
                m.forEach((k, x) -> out.put(String.valueOf(k), finite(x)));
                yield out;
            }
            case List<?> l -> l.stream().map(Json::finite).toList();
            case null, default -> v;
        };
    }
}
