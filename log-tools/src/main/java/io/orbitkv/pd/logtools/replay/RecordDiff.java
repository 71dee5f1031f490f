package io.orbitkv.pd.logtools.replay;

import io.orbitkv.pd.events.BlockRun;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collection;
import java.util.HexFormat;
import java.util.List;
import java.util.Objects;
import org.apache.avro.Schema;
import org.apache.avro.generic.IndexedRecord;

/**
 * Field-by-field differences of two Avro records of the same schema, as {@code path: recorded → replayed} lines:
 * what a user reads to see <em>how</em> a replayed decision differs from the recorded one.
 */
public final class RecordDiff {

    private static final int MAX = 12;

    private RecordDiff() { }

    public static List<String> of(IndexedRecord recorded, IndexedRecord replayed) {
        List<String> out = new ArrayList<>();
        diff("", recorded, replayed, out);
        return out;
    }

    private static void diff(String path, Object a, Object b, List<String> out) {
        if (out.size() >= MAX || Objects.equals(a, b)) {
            return;
        }
        if (a instanceof IndexedRecord ra && b instanceof IndexedRecord rb) {
            if (!ra.getSchema().getFullName().equals(rb.getSchema().getFullName())) {
                out.add(name(path) + ": " + ra.getSchema().getName() + " → " + rb.getSchema().getName());
                return;
            }
            for (Schema.Field f : ra.getSchema().getFields()) {
                diff(path.isEmpty() ? f.name() : path + "." + f.name(), ra.get(f.pos()), rb.get(f.pos()), out);
            }
            return;
        }
        out.add(name(path) + ": " + show(a) + " → " + show(b));
    }

    private static String name(String path) {
        return path.isEmpty() ? "(record)" : path;
    }

    static String show(Object v) {
        return switch (v) {
            case null -> "null";
            case ByteBuffer bb -> {
                ByteBuffer d = bb.duplicate();
                byte[] bytes = new byte[Math.min(8, d.remaining())];
                d.get(bytes);
                yield "<" + bb.remaining() + " bytes " + HexFormat.of().formatHex(bytes) + (bb.remaining() > 8 ? "…" : "") + ">";
            }
            case BlockRun r -> r.getStart() + "+" + r.getCount();
            case Collection<?> c -> c.stream().map(RecordDiff::show).toList().toString();
            case IndexedRecord r -> r.getSchema().getName() + r;
            default -> String.valueOf(v);
        };
    }
}
