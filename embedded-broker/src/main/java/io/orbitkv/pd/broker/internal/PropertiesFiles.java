package io.orbitkv.pd.broker.internal;

import java.io.IOException;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.Map;
import java.util.Properties;
import java.util.SortedMap;
import java.util.TreeMap;

/**
 * Writes {@code .properties} files readable by {@link Properties#load(InputStream)} (ISO-8859-1, as Kafka
 * reads them) but sorted and without {@link Properties#store}'s escaping of every colon, so a human can read
 * {@code server.properties} while debugging.
 */
public final class PropertiesFiles {

    private PropertiesFiles() {
    }

    public static void write(Path file, String comment, Map<String, String> values) throws IOException {
        SortedMap<String, String> sorted = new TreeMap<>(values);
        StringBuilder sb = new StringBuilder();
        sb.append("# ").append(comment).append('\n');
        sorted.forEach((k, v) -> sb.append(escape(k, true)).append('=').append(escape(v, false)).append('\n'));
        Path tmp = file.resolveSibling(file.getFileName() + ".tmp");
        Files.writeString(tmp, sb, StandardCharsets.ISO_8859_1);
        // Replace atomically so a crash never leaves a half-written file behind in a persistent dir.
        Files.move(tmp, file, StandardCopyOption.REPLACE_EXISTING,
                StandardCopyOption.ATOMIC_MOVE);
    }

    public static Properties read(Path file) throws IOException {
        Properties p = new Properties();
        try (InputStream in = Files.newInputStream(file)) {
            p.load(in);
        }
        return p;
    }

    private static String escape(String s, boolean key) {
        StringBuilder sb = new StringBuilder(s.length());
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                case '\r' -> sb.append("\\r");
                case '\t' -> sb.append("\\t");
                case '\f' -> sb.append("\\f");
                case ' ' -> sb.append(key || i == 0 ? "\\ " : " ");
                case '=', ':', '#', '!' -> sb.append(key || i == 0 ? "\\" + c : String.valueOf(c));
                default -> {
                    if (c < 0x20 || c > 0x7e) {
                        sb.append(String.format("\\u%04x", (int) c));
                    } else {
                        sb.append(c);
                    }
                }
            }
        }
        return sb.toString();
    }
}
