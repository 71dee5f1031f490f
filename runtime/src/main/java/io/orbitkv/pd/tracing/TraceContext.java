package io.orbitkv.pd.tracing;

import java.util.Optional;
import java.util.concurrent.ThreadLocalRandom;

/**
 * A W3C Trace Context position (<a href="https://www.w3.org/TR/trace-context/">traceparent</a>): the trace one request
 * belongs to, the span that is current, and the flags. Carried as the {@code traceparent} header of HTTP requests and
 * of Kafka records ({@link TraceHeaders}); each component that acts on a request continues the trace with
 * {@link #newChild()} and writes the child onto what it sends, so proxy, decider, workers and engines can be followed
 * as one trace. Immutable; ids are lower-case hex as the specification requires.
 *
 * @param traceId 32 lower-case hex digits, not all zero
 * @param spanId  16 lower-case hex digits, not all zero (the {@code parent-id} field of the header)
 * @param flags   trace flags; bit 0 is "sampled"
 */
public record TraceContext(String traceId, String spanId, int flags) {

    /** The only version this code writes. */
    public static final String VERSION = "00";
    public static final int SAMPLED = 0x01;

    private static final String ZERO_TRACE = "0".repeat(32);
    private static final String ZERO_SPAN = "0".repeat(16);

    public TraceContext {
        if (!isHex(traceId, 32) || ZERO_TRACE.equals(traceId)) {
            throw new IllegalArgumentException("traceparent trace-id: 32 lower-case hex digits, not all zero, got " + traceId);
        }
        if (!isHex(spanId, 16) || ZERO_SPAN.equals(spanId)) {
            throw new IllegalArgumentException("traceparent parent-id: 16 lower-case hex digits, not all zero, got " + spanId);
        }
        if (flags < 0 || flags > 0xff) {
            throw new IllegalArgumentException("traceparent trace-flags: 0..255, got " + flags);
        }
    }

    /** A new trace (a request that arrives without a {@code traceparent}), sampled. */
    public static TraceContext newRoot() {
        return new TraceContext(randomHex(32), randomHex(16), SAMPLED);
    }

    /** The same trace, a new span: what a component writes on the records and calls it makes for this request. */
    public TraceContext newChild() {
        return new TraceContext(traceId, randomHex(16), flags);
    }

    public boolean sampled() {
        return (flags & SAMPLED) != 0;
    }

    /** The header value, version 00: {@code 00-<trace-id>-<parent-id>-<flags>}. */
    public String format() {
        return VERSION + "-" + traceId + "-" + spanId + "-" + String.format("%02x", flags);
    }

    @Override
    public String toString() {
        return format();
    }

    /**
     * Parses a {@code traceparent} value by the specification's rules: version {@code ff} and malformed fields are
     * refused (empty result: start a new trace); a version above 00 is read by its first four fields, and must have
     * nothing or a {@code -} after them; version 00 must be exactly 55 characters.
     */
    public static Optional<TraceContext> parse(String header) {
        if (header == null) {
            return Optional.empty();
        }
        String h = header.strip();
        if (h.length() < 55 || h.charAt(2) != '-' || h.charAt(35) != '-' || h.charAt(52) != '-') {
            return Optional.empty();
        }
        String version = h.substring(0, 2);
        if (!isHex(version, 2) || "ff".equals(version)) {
            return Optional.empty();
        }
        if ("00".equals(version) ? h.length() != 55 : h.length() > 55 && h.charAt(55) != '-') {
            return Optional.empty();
        }
        String trace = h.substring(3, 35);
        String span = h.substring(36, 52);
        String flags = h.substring(53, 55);
        if (!isHex(trace, 32) || !isHex(span, 16) || !isHex(flags, 2) || ZERO_TRACE.equals(trace) || ZERO_SPAN.equals(span)) {
            return Optional.empty();
        }
        return Optional.of(new TraceContext(trace, span, Integer.parseInt(flags, 16)));
    }

    private static boolean isHex(String s, int length) {
        if (s == null || s.length() != length) {
            return false;
        }
        for (int i = 0; i < length; i++) {
            char c = s.charAt(i);
            if (!(c >= '0' && c <= '9' || c >= 'a' && c <= 'f')) {
                return false;
            }
        }
        return true;
    }

    private static String randomHex(int digits) {
        ThreadLocalRandom rnd = ThreadLocalRandom.current();
        StringBuilder b = new StringBuilder(digits);
        while (b.length() < digits) {
            b.append(String.format("%016x", rnd.nextLong()));
        }
        String s = b.substring(0, digits);
        return s.chars().allMatch(c -> c == '0') ? randomHex(digits) : s;
    }
}
