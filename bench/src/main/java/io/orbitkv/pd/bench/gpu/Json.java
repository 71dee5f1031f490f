package io.orbitkv.pd.bench.gpu;

import java.util.List;
import java.util.Locale;
import java.util.Map;

/** Just enough JSON writing for result files (the GPU machine carries no JSON library). */
final class Json {

    private Json() { }

    static String write(Object v) {
        StringBuilder b = new StringBuilder();
        write(b, v, 0);
        return b.append('\n').toString();
    }

    private static void write(StringBuilder b, Object v, int indent) {
        switch (v) {
            case null -> b.append("null");
            case String s -> quote(b, s);
            case Double d -> b.append(Double.isFinite(d) ? String.format(Locale.ROOT, "%.6g", d) : "null");
            case Float f -> write(b, f.doubleValue(), indent);
            case Number n -> b.append(n);
            case Boolean x -> b.append(x);
            case Map<?, ?> m -> {
                b.append('{');
                boolean first = true;
                for (Map.Entry<?, ?> e : m.entrySet()) {
                    b.append(first ? "\n" : ",\n").append("  ".repeat(indent + 1));
                    quote(b, String.valueOf(e.getKey()));
                    b.append(": ");
                    write(b, e.getValue(), indent + 1);
                    first = false;
                }
                b.append(first ? "}" : "\n" + "  ".repeat(indent) + "}");
            }
            case List<?> l -> {
                b.append('[');
                boolean first = true;
                for (Object o : l) {
                    b.append(first ? "\n" : ",\n").append("  ".repeat(indent + 1));
                    write(b, o, indent + 1);
                    first = false;
                }
                b.append(first ? "]" : "\n" + "  ".repeat(indent) + "]");
            }
            default -> quote(b, v.toString());
        }
    }

    private static void quote(StringBuilder b, String s) {
        b.append('"');
        for (char c : s.toCharArray()) {
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20) {
                        b.append(String.format("\\u%04x", (int) c));
                    } else {
                        b.append(c);
                    }
                }
            }
        }
        b.append('"');
    }
}
