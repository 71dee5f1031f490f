package io.orbitkv.pd.schemas.config;

import io.orbitkv.pd.schemas.SerdeConfig;
import io.orbitkv.pd.schemas.SerdeMode;
import io.orbitkv.pd.schemas.TopicsConfig;
import java.io.IOException;
import java.io.Reader;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * Typed reads of a component's {@code --config} properties file. Every error names the key and the bad value;
 * keys nobody read are reported by {@link #unusedKeys()} so a typo does not silently fall back to a default.
 * Durations are written {@code 250ms}, {@code 30s}, {@code 2m}, {@code 1h}.
 */
public final class ConfigProps {

    private static final Pattern DURATION = Pattern.compile("(\\d+)\\s*(ms|s|m|h|d)");

    private final Properties props;
    private final Set<String> read = new HashSet<>();

    public ConfigProps(Properties props) {
        this.props = props;
    }

    public static ConfigProps load(Path file) {
        Properties p = new Properties();
        try (Reader r = Files.newBufferedReader(file, StandardCharsets.UTF_8)) {
            p.load(r);
        } catch (IOException e) {
            throw new IllegalArgumentException("--config: cannot read " + file + ": " + e.getMessage(), e);
        }
        return new ConfigProps(p);
    }

    public static ConfigProps empty() {
        return new ConfigProps(new Properties());
    }

    /** The properties in {@code file}, or none when it is null (a command run without {@code --config}). */
    public static ConfigProps loadOrEmpty(Path file) {
        return file == null ? empty() : load(file);
    }

    public ConfigProps with(String key, String value) {
        props.setProperty(key, value);
        return this;
    }

    /** Sets {@code key} to a command-line override when one was given ({@code value} not null); else keeps the file's value. */
    public ConfigProps override(String key, Object value) {
        if (value != null) {
            props.setProperty(key, value.toString());
        }
        return this;
    }

    public String string(String key, String def) {
        read.add(key);
        String v = props.getProperty(key);
        return v == null ? def : resolve(key, v.strip());
    }

    private static final Pattern ENV = Pattern.compile("\\$\\{env:([A-Za-z_][A-Za-z0-9_]*)}");

    /**
     * {@code ${env:NAME}} in a value is the environment variable {@code NAME}: how a secret reaches a config file that
     * may be committed or mounted from a ConfigMap (Kubernetes: an env var from a Secret). A missing variable is an
     * error naming the key and the variable.
     */
    private static String resolve(String key, String value) {
        if (!value.contains("${env:")) {
            return value;
        }
        java.util.regex.Matcher m = ENV.matcher(value);
        StringBuilder b = new StringBuilder();
        while (m.find()) {
            String env = System.getenv(m.group(1));
            if (env == null) {
                throw new IllegalArgumentException(key + ": environment variable " + m.group(1) + " is not set");
            }
            m.appendReplacement(b, java.util.regex.Matcher.quoteReplacement(env));
        }
        return m.appendTail(b).toString();
    }

    public String required(String key) {
        String v = string(key, null);
        if (v == null || v.isEmpty()) {
            throw new IllegalArgumentException(key + ": required");
        }
        return v;
    }

    public int integer(String key, int def) {
        String v = string(key, null);
        if (v == null) {
            return def;
        }
        try {
            return Integer.parseInt(v);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(key + ": must be an integer, got '" + v + "'");
        }
    }

    public long longValue(String key, long def) {
        String v = string(key, null);
        if (v == null) {
            return def;
        }
        try {
            return Long.parseLong(v);
        } catch (NumberFormatException e) {
            throw new IllegalArgumentException(key + ": must be an integer, got '" + v + "'");
        }
    }

    /** Refuses {@code v} outside {@code min..max}, naming the key. */
    public static void requireRange(String key, long v, long min, long max) {
        if (v < min || v > max) {
            throw new IllegalArgumentException(key + ": must be " + min + ".." + max + ", got " + v);
        }
    }

    /** Refuses a missing, zero or negative duration, naming the key. */
    public static void requirePositive(String key, java.time.Duration d) {
        if (d == null || d.isNegative() || d.isZero()) {
            throw new IllegalArgumentException(key + ": must be a positive duration, got " + d);
        }
    }

    /**
     * Refuses a port outside {@code 0} (any free port) and {@code 1..65535}, naming the key; with {@code mayBeOff},
     * {@code -1} (the endpoint is off) too.
     */
    public static void requirePort(String key, int port, boolean mayBeOff) {
        if (port < (mayBeOff ? -1 : 0) || port > 65_535) {
            throw new IllegalArgumentException(key + ": must be " + (mayBeOff ? "-1 (off), " : "") + "0 (any free port) or 1..65535, got " + port);
        }
    }

    public boolean bool(String key, boolean def) {
        String v = string(key, null);
        if (v == null) {
            return def;
        }
        if (!v.equalsIgnoreCase("true") && !v.equalsIgnoreCase("false")) {
            throw new IllegalArgumentException(key + ": must be true or false, got '" + v + "'");
        }
        return Boolean.parseBoolean(v);
    }

    public Duration duration(String key, Duration def) {
        String v = string(key, null);
        if (v == null) {
            return def;
        }
        Matcher m = DURATION.matcher(v);
        if (!m.matches()) {
            throw new IllegalArgumentException(key + ": must be a duration like 250ms, 30s, 2m or 1h, got '" + v + "'");
        }
        long n = Long.parseLong(m.group(1));
        return switch (m.group(2)) {
            case "ms" -> Duration.ofMillis(n);
            case "s" -> Duration.ofSeconds(n);
            case "m" -> Duration.ofMinutes(n);
            case "h" -> Duration.ofHours(n);
            default -> Duration.ofDays(n);
        };
    }

    public <E extends Enum<E>> E enumValue(String key, Class<E> type, E def) {
        String v = string(key, null);
        if (v == null) {
            return def;
        }
        try {
            return Enum.valueOf(type, v.toUpperCase().replace('-', '_'));
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException(key + ": must be one of " + java.util.Arrays.toString(type.getEnumConstants())
                    + ", got '" + v + "'");
        }
    }

    /** Every property under {@code prefix}, with the prefix removed (e.g. {@code kafka.} overrides for clients). */
    public Map<String, Object> withPrefix(String prefix) {
        Map<String, Object> out = new HashMap<>();
        for (String k : props.stringPropertyNames()) {
            if (k.startsWith(prefix)) {
                read.add(k);
                out.put(k.substring(prefix.length()), resolve(k, props.getProperty(k).strip()));
            }
        }
        return out;
    }

    /** Keys present in the file that no component read: most likely typos. */
    public Set<String> unusedKeys() {
        Set<String> unused = new HashSet<>(props.stringPropertyNames());
        unused.removeAll(read);
        return unused;
    }

    /**
     * Refuses a configuration with keys nobody read (a typo would otherwise fall back to a default in silence).
     *
     * @param doc where the valid keys are documented, e.g. {@code docs/decider.md}
     */
    public void requireAllKeysUsed(String doc) {
        if (!unusedKeys().isEmpty()) {
            throw new IllegalArgumentException("--config: unknown keys " + unusedKeys() + " (typos?); see " + doc);
        }
    }

    /** {@code topics.prefix}, {@code topics.partitions}, {@code topics.replication.factor}, {@code topics.retention}. */
    public TopicsConfig topics() {
        TopicsConfig d = TopicsConfig.defaults();
        String stamp = string("topics.facts.timestamp", "broker");
        if (!stamp.equals("broker") && !stamp.equals("producer")) {
            throw new IllegalArgumentException("topics.facts.timestamp: broker or producer, got " + stamp);
        }
        return new TopicsConfig(string("topics.prefix", d.prefix()), integer("topics.partitions", d.partitions()),
                (short) integer("topics.replication.factor", d.replicationFactor()), duration("topics.retention", d.retention()),
                stamp.equals("broker"));
    }

    /** {@code serde.mode} (embedded|registry), {@code serde.registry.url}, {@code serde.max.record.bytes}. */
    public SerdeConfig serde() {
        SerdeMode mode = enumValue("serde.mode", SerdeMode.class, SerdeMode.EMBEDDED);
        String url = string("serde.registry.url", null);
        URI uri;
        try {
            uri = url == null ? null : URI.create(url);
        } catch (IllegalArgumentException e) {
            throw new IllegalArgumentException("serde.registry.url: not a URL: '" + url + "'");
        }
        return new SerdeConfig(mode, uri, bool("serde.registry.auto-register", true),
                integer("serde.max.record.bytes", SerdeConfig.DEFAULT_MAX_RECORD_BYTES), duration("serde.registry.timeout", Duration.ofSeconds(10)));
    }
}
