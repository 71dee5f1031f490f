package io.orbitkv.pd.tracing;

import java.nio.charset.StandardCharsets;
import java.util.Optional;
import java.util.function.Function;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;

/**
 * The header convention for trace context, the same name on both carriers: {@code traceparent} (and, passed through
 * untouched, {@code tracestate}) as an HTTP header and as a Kafka record header with the UTF-8 bytes of the value.
 * A Kafka record carries at most one {@code traceparent}: {@link #write} replaces an existing one, {@link #read} takes
 * the last one if a producer added several. A missing or malformed header reads as empty: the reader starts a new
 * trace instead of failing the record.
 */
public final class TraceHeaders {

    public static final String TRACEPARENT = "traceparent";
    public static final String TRACESTATE = "tracestate";

    private TraceHeaders() { }

    /** The trace context of a Kafka record, if it carries a valid one. */
    public static Optional<TraceContext> read(Headers headers) {
        if (headers == null) {
            return Optional.empty();
        }
        Header h = headers.lastHeader(TRACEPARENT);
        return h == null || h.value() == null ? Optional.empty() : TraceContext.parse(new String(h.value(), StandardCharsets.UTF_8));
    }

    /** Sets the record's {@code traceparent} to {@code context}, replacing any earlier one. */
    public static Headers write(Headers headers, TraceContext context) {
        headers.remove(TRACEPARENT);
        headers.add(TRACEPARENT, context.format().getBytes(StandardCharsets.UTF_8));
        return headers;
    }

    /** The trace context of an HTTP request, given a case-insensitive header lookup (e.g. {@code req::getHeader}). */
    public static Optional<TraceContext> fromHttp(Function<String, String> header) {
        return TraceContext.parse(header.apply(TRACEPARENT));
    }

    /** The context to continue with: a child of the incoming one, or a new root when there is none. */
    public static TraceContext continueOrStart(Optional<TraceContext> incoming) {
        return incoming.map(TraceContext::newChild).orElseGet(TraceContext::newRoot);
    }
}
