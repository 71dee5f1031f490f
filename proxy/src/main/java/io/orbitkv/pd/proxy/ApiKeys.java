package io.orbitkv.pd.proxy;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.function.LongSupplier;

/**
 * The proxy's API keys ({@code proxy.auth.keys-file}): who may call {@code /v1/*}, each key with a rate limit of its
 * own. A request names its key as {@code Authorization: Bearer <key>}; without a valid one it is answered 401, beyond its
 * key's rate 429 with {@code Retry-After}. Keys are compared by their SHA-256 in constant time, and only the key's
 * name ever reaches a log or a metric.
 *
 * <p>The file holds one key a line: {@code <name> <key> <requests per second>} ({@code #} comments); the rate is a
 * token bucket of that many requests a second with a burst of as many (at least one).
 */
public final class ApiKeys {

    /** What {@link #check} says about a request. */
    public sealed interface Verdict {
        /** Let through, as {@code name}. */
        record Allowed(String name) implements Verdict { }

        /** 401: no key, or not one of ours. */
        record Unauthorized(String reason) implements Verdict { }

        /** 429: over the key's rate; retry after that many seconds (at least 1). */
        record Limited(String name, long retryAfterSeconds) implements Verdict { }
    }

    /** One key: its name, the SHA-256 of its secret, and its bucket. */
    private static final class Key {
        final String name;
        final byte[] hash;
        final double rate;
        final double burst;
        double tokens;
        long lastNanos;

        Key(String name, byte[] hash, double rate, long now) {
            this.name = name;
            this.hash = hash;
            this.rate = rate;
            this.burst = Math.max(1, rate);
            this.tokens = burst;
            this.lastNanos = now;
        }
    }

    private final List<Key> keys;
    private final LongSupplier nanos;

    private ApiKeys(List<Key> keys, LongSupplier nanos) {
        this.keys = keys;
        this.nanos = nanos;
    }

    /**
     * Reads {@code file}.
     *
     * @throws IllegalArgumentException naming the file and line of a malformed entry, a duplicate name or key
     */
    public static ApiKeys load(Path file) {
        try {
            return parse(Files.readString(file), file.toString(), System::nanoTime);
        } catch (IOException e) {
            throw new IllegalArgumentException("proxy.auth.keys-file: cannot read " + file + ": " + e.getMessage(), e);
        }
    }

    /** As {@link #load}, from text, on the given clock (tests). */
    public static ApiKeys parse(String text, String where, LongSupplier nanos) {
        List<Key> keys = new ArrayList<>();
        Map<String, Integer> names = new LinkedHashMap<>();
        String[] lines = text.split("\n");
        for (int i = 0; i < lines.length; i++) {
            String line = lines[i].strip();
            if (line.isEmpty() || line.startsWith("#")) {
                continue;
            }
            String at = "proxy.auth.keys-file: " + where + " line " + (i + 1) + ": ";
            String[] f = line.split("\\s+");
            if (f.length != 3) {
                throw new IllegalArgumentException(at + "expected '<name> <key> <requests per second>', got " + f.length + " fields");
            }
            if (!f[0].matches("[A-Za-z0-9._-]+")) {
                throw new IllegalArgumentException(at + "a name is letters, digits, '.', '_' and '-', got '" + f[0] + "'");
            }
            if (f[1].length() < 16) {
                throw new IllegalArgumentException(at + "key of " + f[0] + " is shorter than 16 characters");
            }
            double rate;
            try {
                rate = Double.parseDouble(f[2]);
            } catch (NumberFormatException e) {
                rate = -1;
            }
            if (!(rate > 0) || Double.isInfinite(rate)) {
                throw new IllegalArgumentException(at + "requests per second of " + f[0] + " must be a positive number, got '" + f[2] + "'");
            }
            if (names.put(f[0], i + 1) != null) {
                throw new IllegalArgumentException(at + "name " + f[0] + " is used twice");
            }
            byte[] hash = sha256(f[1]);
            for (Key k : keys) {
                if (MessageDigest.isEqual(k.hash, hash)) {
                    throw new IllegalArgumentException(at + "the key of " + f[0] + " is also " + k.name + "'s");
                }
            }
            keys.add(new Key(f[0], hash, rate, nanos.getAsLong()));
        }
        if (keys.isEmpty()) {
            throw new IllegalArgumentException("proxy.auth.keys-file: " + where + " holds no key");
        }
        return new ApiKeys(List.copyOf(keys), nanos);
    }

    /** The names of the keys, in file order. */
    public List<String> names() {
        return keys.stream().map(k -> k.name).toList();
    }

    /** Judges a request by its {@code Authorization} header (null when absent), and takes one token from its key. */
    public Verdict check(String authorization) {
        if (authorization == null || !authorization.regionMatches(true, 0, "Bearer ", 0, 7)) {
            return new Verdict.Unauthorized("an API key is required: Authorization: Bearer <key>");
        }
        byte[] hash = sha256(authorization.substring(7).strip());
        Key found = null;
        for (Key k : keys) {
            if (MessageDigest.isEqual(k.hash, hash)) { // every key compared: the time says nothing about which matched
                found = k;
            }
        }
        if (found == null) {
            return new Verdict.Unauthorized("the API key is not valid");
        }
        synchronized (found) {
            long now = nanos.getAsLong();
            found.tokens = Math.min(found.burst, found.tokens + (now - found.lastNanos) / 1e9 * found.rate);
            found.lastNanos = now;
            if (found.tokens >= 1) {
                found.tokens -= 1;
                return new Verdict.Allowed(found.name);
            }
            return new Verdict.Limited(found.name, Math.max(1, (long) Math.ceil((1 - found.tokens) / found.rate)));
        }
    }

    private static byte[] sha256(String s) {
        try {
            return MessageDigest.getInstance("SHA-256").digest(s.getBytes(StandardCharsets.UTF_8));
        } catch (NoSuchAlgorithmException e) {
            throw new IllegalStateException(e);
        }
    }
}
