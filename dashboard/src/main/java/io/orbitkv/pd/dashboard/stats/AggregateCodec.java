package io.orbitkv.pd.dashboard.stats;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.Map;
import org.apache.kafka.common.serialization.Deserializer;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.serialization.Serializer;

/**
 * The binary form of an {@link Aggregate}: the window stores' values, their changelog, and what instances send each
 * other when a query fans out. Version byte, then varint-coded counters (name, value) and histograms (name, sum, min,
 * max, sparse buckets as index deltas and counts). A few dozen bytes for a typical window. Internal state, not an
 * event contract: a new version must still read version 1 (restoring an older changelog).
 */
public final class AggregateCodec {

    static final int VERSION = 1;
    /** Decoding refuses counts beyond this: a corrupted length must not become a huge allocation. */
    private static final int MAX_ENTRIES = 1 << 16;

    private AggregateCodec() { }

    public static byte[] encode(Aggregate a) {
        Out out = new Out();
        out.write(VERSION);
        out.varLong(a.counters().size());
        for (Map.Entry<String, Long> e : a.counters().entrySet()) {
            out.string(e.getKey());
            out.zigzag(e.getValue());
        }
        out.varLong(a.histograms().size());
        for (Map.Entry<String, LogHistogram> e : a.histograms().entrySet()) {
            LogHistogram h = e.getValue();
            out.string(e.getKey());
            out.varLong(h.buckets());
            int prev = 0;
            for (int i = 0; i < h.buckets(); i++) {
                out.varLong(h.bucketIndex(i) - prev);
                out.varLong(h.bucketCount(i));
                prev = h.bucketIndex(i);
            }
            if (h.count() > 0) {
                out.varLong(h.sum());
                out.varLong(h.min());
                out.varLong(h.max());
            }
        }
        return out.toByteArray();
    }

    public static Aggregate decode(byte[] bytes) {
        In in = new In(bytes);
        int version = in.read();
        if (version != VERSION) {
            throw new IllegalArgumentException("aggregate: unknown version " + version);
        }
        Aggregate a = new Aggregate();
        int counters = in.count();
        for (int i = 0; i < counters; i++) {
            String name = in.string();
            a.add(name, in.zigzag());
        }
        int histograms = in.count();
        for (int i = 0; i < histograms; i++) {
            String name = in.string();
            int buckets = in.count();
            int[] idx = new int[buckets];
            long[] counts = new long[buckets];
            long prev = 0;
            for (int b = 0; b < buckets; b++) {
                prev += in.varLong();
                if (prev > LogHistogram.MAX_INDEX) {
                    throw new IllegalArgumentException("aggregate: bucket index out of range");
                }
                idx[b] = (int) prev;
                counts[b] = in.varLong();
            }
            long sum = 0;
            long min = 0;
            long max = 0;
            if (buckets > 0) {
                sum = in.varLong();
                min = in.varLong();
                max = in.varLong();
            }
            a.putHistogram(name, LogHistogram.of(idx, counts, sum, min, max));
        }
        if (in.pos != bytes.length) {
            throw new IllegalArgumentException("aggregate: " + (bytes.length - in.pos) + " trailing bytes");
        }
        return a;
    }

    /** Serde for the window stores. */
    public static Serde<Aggregate> serde() {
        Serializer<Aggregate> ser = (topic, a) -> a == null ? null : encode(a);
        Deserializer<Aggregate> de = (topic, b) -> b == null ? null : decode(b);
        return Serdes.serdeFrom(ser, de);
    }

    private static final class Out extends ByteArrayOutputStream {
        Out() {
            super(64);
        }

        void varLong(long v) {
            if (v < 0) {
                throw new IllegalArgumentException("negative varint " + v);
            }
            while ((v & ~0x7FL) != 0) {
                write((int) ((v & 0x7F) | 0x80));
                v >>>= 7;
            }
            write((int) v);
        }

        void zigzag(long v) {
            long z = (v << 1) ^ (v >> 63);
            while ((z & ~0x7FL) != 0) {
                write((int) ((z & 0x7F) | 0x80));
                z >>>= 7;
            }
            write((int) z);
        }

        void string(String s) {
            byte[] b = s.getBytes(StandardCharsets.UTF_8);
            varLong(b.length);
            write(b, 0, b.length);
        }
    }

    private static final class In {
        final byte[] b;
        int pos;

        In(byte[] b) {
            this.b = b;
        }

        int read() {
            if (pos >= b.length) {
                throw new IllegalArgumentException("aggregate: truncated");
            }
            return b[pos++] & 0xff;
        }

        long raw() {
            long v = 0;
            for (int shift = 0; shift < 64; shift += 7) {
                int x = read();
                v |= (long) (x & 0x7F) << shift;
                if ((x & 0x80) == 0) {
                    return v;
                }
            }
            throw new IllegalArgumentException("aggregate: varint too long");
        }

        long varLong() {
            long v = raw();
            if (v < 0) {
                throw new IllegalArgumentException("aggregate: negative value");
            }
            return v;
        }

        long zigzag() {
            long z = raw();
            return (z >>> 1) ^ -(z & 1);
        }

        int count() {
            long n = varLong();
            if (n > MAX_ENTRIES) {
                throw new IllegalArgumentException("aggregate: count " + n + " too large");
            }
            return (int) n;
        }

        String string() {
            int n = count();
            if (n > b.length - pos) {
                throw new IllegalArgumentException("aggregate: truncated string");
            }
            String s = new String(b, pos, n, StandardCharsets.UTF_8);
            pos += n;
            return s;
        }
    }
}
