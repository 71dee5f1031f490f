package io.orbitkv.pd.tracing;

import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.Map;
import java.util.OptionalLong;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.Headers;

/**
 * Wall-clock marks of what one process did for one record: when it received the input that made it act
 * ({@link #IN}), the steps in between, and when it handed the result to Kafka ({@link #OUT}). Carried as the
 * {@code orbitkv-timing} header of the record it produced (and as the {@code x-orbitkv-timing} HTTP header where the
 * next hop is HTTP), so {@code trace}, the dashboard and {@code bench e2e} can lay a handoff out on the wall clock,
 * hop by hop (docs/topics.md, "Timing marks").
 *
 * <p>The value is ASCII: {@code name=micros} pairs separated by commas, in the order they were marked, each
 * {@code micros} counted since the Unix epoch on the writer's host clock ({@code in=1764855278123456,out=…}). Names
 * are short lower-case identifiers ({@code [a-z0-9_.]+}). Marks are observations, not part of the event: two copies
 * of one decision differ in them, and replay and audit ignore them. A malformed header reads as no marks: timing
 * never fails a record.
 *
 * <p>Intervals between two marks of one header are on one clock and exact. A hop between two processes compares two
 * clocks: on one host they are the same clock; across hosts the hop carries the hosts' skew (NTP keeps it near a
 * millisecond, PTP near microseconds), which {@code trace} states beside every cross-process hop.
 *
 * <p>Not thread-safe: one instance belongs to the code that handles one record.
 */
public final class Marks {

    /** The Kafka record header. */
    public static final String HEADER = "orbitkv-timing";
    /** The HTTP header with the same value (an engine's marks to the proxy). */
    public static final String HTTP_HEADER = "x-orbitkv-timing";
    /** When the input that made the process act was received (polled record, HTTP request, …). */
    public static final String IN = "in";
    /** When the produced record was handed to the producer (or the HTTP answer written). */
    public static final String OUT = "out";
    /** Engine: the prompt's compute started (a batch slot free). */
    public static final String COMPUTE_START = "c0";
    /** Engine: the prompt's KV is computed into its pages. */
    public static final String COMPUTE_END = "c1";
    /** Decode engine: the {@code KvReady} was read. */
    public static final String KV_READY = "kv";
    /** Decode engine: the first token was written on the HTTP answer; proxy: its first byte was read. */
    public static final String FIRST_TOKEN = "first";
    /** Proxy: the prefill engine's answer was read. */
    public static final String PREFILL_ANSWERED = "pf";
    /** Proxy: the request ended there. */
    public static final String END = "end";
    /** Worker: an order slot took the order up. */
    public static final String RUN = "run";
    /** Worker: every connection of the push is ready (pooled, or connected and through its handshake). */
    public static final String CONNECTED = "conn";
    /** Worker: the receiver admitted the push (token, epochs, fences, bounds checked). */
    public static final String ADMITTED = "adm";
    /** Worker: the last page byte was handed to the wire (or the copy engine). */
    public static final String WRITTEN = "w1";
    /** Worker: the receiver acknowledged every byte in place. */
    public static final String ACKED = "ack";
    /** Worker's engine API: the engine's fact frame was read (its {@code out} is when the worker handed it to Kafka). */
    public static final String API = "api";
    /** Worker: an order issued ahead of the prefill started from its engine's own PrefillCompleted, read at this time. */
    public static final String ENGINE_FACT = "ef";
    /**
     * Receiving worker: every byte of the push in place; the kv_ready it hands its engine on the engine API carries it,
     * and a decode engine that decoded on it carries it on to its {@code DecodeCompleted} (the handoff's path).
     */
    public static final String LANDED = "land";

    private static final int MAX = 32;

    private String[] names = new String[8];
    private long[] micros = new long[8];
    private int size;

    private Marks() { }

    /** No marks yet. */
    public static Marks empty() {
        return new Marks();
    }

    /** Marks starting with {@link #IN} at {@code inMicros} (a time taken with {@link #nowMicros()} on receipt). */
    public static Marks receivedAt(long inMicros) {
        return new Marks().at(IN, inMicros);
    }

    /** The host's wall clock in microseconds since the epoch (the JDK reads it at microsecond resolution on Linux). */
    public static long nowMicros() {
        Instant i = Instant.now();
        return i.getEpochSecond() * 1_000_000L + i.getNano() / 1_000;
    }

    /** Marks {@code name} now. */
    public Marks mark(String name) {
        return at(name, nowMicros());
    }

    /** Marks {@code name} at {@code atMicros}; a name marked twice keeps its last time. Ignored past 32 marks. */
    public Marks at(String name, long atMicros) {
        for (int i = 0; i < size; i++) {
            if (names[i].equals(name)) {
                micros[i] = atMicros;
                return this;
            }
        }
        if (size == MAX || !validName(name)) {
            return this;
        }
        if (size == names.length) {
            names = Arrays.copyOf(names, size * 2);
            micros = Arrays.copyOf(micros, size * 2);
        }
        names[size] = name;
        micros[size++] = atMicros;
        return this;
    }

    /** Adds every mark of {@code other}, each name prefixed with {@code prefix}. */
    public Marks addAll(String prefix, Marks other) {
        for (int i = 0; i < other.size; i++) {
            at(prefix + other.names[i], other.micros[i]);
        }
        return this;
    }

    /** The time of {@code name}, if marked. */
    public OptionalLong get(String name) {
        for (int i = 0; i < size; i++) {
            if (names[i].equals(name)) {
                return OptionalLong.of(micros[i]);
            }
        }
        return OptionalLong.empty();
    }

    public boolean isEmpty() {
        return size == 0;
    }

    public int size() {
        return size;
    }

    /** The marks in the order they were made. */
    public Map<String, Long> asMap() {
        Map<String, Long> m = new LinkedHashMap<>();
        for (int i = 0; i < size; i++) {
            m.put(names[i], micros[i]);
        }
        return m;
    }

    /** A copy, so one set of marks can go on several records. */
    public Marks copy() {
        Marks m = new Marks();
        m.names = Arrays.copyOf(names, names.length);
        m.micros = Arrays.copyOf(micros, micros.length);
        m.size = size;
        return m;
    }

    /** The header value. */
    public String format() {
        StringBuilder b = new StringBuilder(size * 22);
        for (int i = 0; i < size; i++) {
            if (i > 0) {
                b.append(',');
            }
            b.append(names[i]).append('=').append(micros[i]);
        }
        return b.toString();
    }

    /** Marks {@link #OUT} now and sets the record's {@code orbitkv-timing} header (replacing an earlier one). */
    public Headers writeOut(Headers headers) {
        mark(OUT);
        return write(headers);
    }

    /** Sets the record's {@code orbitkv-timing} header to these marks as they are, replacing an earlier one. */
    public Headers write(Headers headers) {
        headers.remove(HEADER);
        headers.add(HEADER, format().getBytes(StandardCharsets.US_ASCII));
        return headers;
    }

    /** The marks a record carries (none when it has no header, or a malformed one). */
    public static Marks read(Headers headers) {
        if (headers == null) {
            return empty();
        }
        Header h = headers.lastHeader(HEADER);
        return h == null || h.value() == null ? empty() : parse(new String(h.value(), StandardCharsets.US_ASCII));
    }

    /** Parses a header value; anything malformed gives no marks. */
    public static Marks parse(String value) {
        Marks m = new Marks();
        if (value == null || value.isEmpty() || value.length() > 2048) {
            return m;
        }
        for (String pair : value.split(",")) {
            int eq = pair.indexOf('=');
            if (eq <= 0) {
                return empty();
            }
            String name = pair.substring(0, eq);
            long us;
            try {
                us = Long.parseLong(pair.substring(eq + 1));
            } catch (NumberFormatException e) {
                return empty();
            }
            if (!validName(name) || us < 0) {
                return empty();
            }
            m.at(name, us);
        }
        return m;
    }

    private static boolean validName(String name) {
        if (name == null || name.isEmpty() || name.length() > 24) {
            return false;
        }
        for (int i = 0; i < name.length(); i++) {
            char c = name.charAt(i);
            if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '.')) {
                return false;
            }
        }
        return true;
    }

    @Override
    public String toString() {
        return format();
    }
}
