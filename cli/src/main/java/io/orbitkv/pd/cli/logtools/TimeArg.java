package io.orbitkv.pd.cli.logtools;

import java.time.Instant;
import java.time.format.DateTimeParseException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/** Parses --from / --to: an ISO-8601 instant ({@code 2025-01-01T10:00:00Z}), epoch milliseconds, or a time ago ({@code 15m}, {@code 2h}). */
final class TimeArg {

    private static final Pattern AGO = Pattern.compile("-?(\\d+)\\s*(ms|s|m|h|d)");

    private TimeArg() { }

    static Long parse(String option, String v, long nowMs) {
        if (v == null) {
            return null;
        }
        String s = v.strip();
        if (s.matches("\\d{10,}")) {
            return Long.parseLong(s);
        }
        Matcher m = AGO.matcher(s);
        if (m.matches()) {
            long n = Long.parseLong(m.group(1));
            long ms = switch (m.group(2)) {
                case "ms" -> n;
                case "s" -> n * 1000;
                case "m" -> n * 60_000;
                case "h" -> n * 3_600_000;
                default -> n * 86_400_000;
            };
            return nowMs - ms;
        }
        try {
            return Instant.parse(s).toEpochMilli();
        } catch (DateTimeParseException e) {
            throw new IllegalArgumentException(option + ": expected an ISO-8601 instant (2025-01-01T10:00:00Z), epoch milliseconds or a"
                    + " time ago (15m, 2h), got '" + v + "'");
        }
    }
}
