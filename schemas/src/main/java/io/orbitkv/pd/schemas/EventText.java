package io.orbitkv.pd.schemas;

import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.RequestEvent;
import java.nio.ByteBuffer;
import java.util.Collection;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.generic.IndexedRecord;

/**
 * One-line, human-readable rendering of any event for terminals and logs:
 * {@code PrefillCompleted engine_id=prefill-0 instance_epoch=1 source_blocks=[0+64, 100+8] num_tokens=1000}.
 * Envelopes ({@link RequestEvent}, {@link Decision}) render as their payload; block runs as {@code start+count};
 * bytes as their length. Generic over the schema, so new fields show up without code changes.
 */
public final class EventText {

    private static final int MAX_LIST_ITEMS = 8;

    private EventText() { }

    /** The type name shown for an event: the payload's record name for envelopes. */
    public static String typeOf(Object event) {
        Object inner = unwrap(event);
        return inner instanceof IndexedRecord r ? r.getSchema().getName() : String.valueOf(inner);
    }

    /** The event's payload for envelopes, the event itself otherwise. */
    public static Object unwrap(Object event) {
        if (event instanceof RequestEvent e) {
            return e.getPayload();
        }
        if (event instanceof Decision d) {
            return d.getPayload();
        }
        if (event instanceof io.orbitkv.pd.events.KvCacheEvent k) {
            return k.getPayload();
        }
        return event;
    }

    public static String describe(Object event) {
        Object inner = unwrap(event);
        if (!(inner instanceof IndexedRecord r)) {
            return String.valueOf(inner);
        }
        StringBuilder b = new StringBuilder(r.getSchema().getName());
        appendFields(b, r);
        return b.toString();
    }

    private static void appendFields(StringBuilder b, IndexedRecord r) {
        for (Schema.Field f : r.getSchema().getFields()) {
            Object v = r.get(f.pos());
            if (v == null || (v instanceof Collection<?> c && c.isEmpty()) || (v instanceof Map<?, ?> m && m.isEmpty())) {
                continue;
            }
            b.append(' ').append(f.name()).append('=');
            value(b, v);
        }
    }

    /**
     * A routing decision in one line: policy, the rule that fired, the prompt's blocks, then per side each candidate's
     * cached prefix, load and score (the block keys themselves are left out: {@code --json} has them).
     */
    private static void routing(StringBuilder b, io.orbitkv.pd.events.RoutingDecision d) {
        b.append('{').append(d.getPolicy()).append(" rule=").append(d.getRule()).append(" prompt=").append(d.getPromptTokens()).append(" tokens/")
                .append(d.getBlockKeys().size()).append(" blocks");
        for (String role : new String[] {"prefill", "decode"}) {
            StringBuilder side = new StringBuilder();
            for (io.orbitkv.pd.events.RoutingCandidate c : d.getCandidates()) {
                if (!c.getRole().equals(role)) {
                    continue;
                }
                side.append(side.isEmpty() ? "" : ", ").append(c.getEngineId()).append(' ').append(c.getMatchedBlocks()).append(" cached, load ")
                        .append(c.getLoad());
                if (c.getScore() != null) {
                    side.append(String.format(java.util.Locale.ROOT, ", score %.3f", c.getScore()));
                }
                if (!"same".equals(c.getHashing())) {
                    side.append(", hashing: ").append(c.getHashing());
                }
            }
            if (!side.isEmpty()) {
                b.append(' ').append(role).append("=[").append(side).append(']');
            }
        }
        b.append('}');
    }

    private static void value(StringBuilder b, Object v) {
        if (v instanceof io.orbitkv.pd.events.RoutingDecision d) {
            routing(b, d);
        } else if (v instanceof BlockRun run) {
            b.append(run.getStart()).append('+').append(run.getCount());
        } else if (v instanceof IndexedRecord r) {
            b.append('{').append(r.getSchema().getName());
            appendFields(b, r);
            b.append('}');
        } else if (v instanceof ByteBuffer bb) {
            b.append('<').append(bb.remaining()).append(" bytes>");
        } else if (v instanceof Collection<?> c) {
            b.append('[');
            int i = 0;
            for (Object o : c) {
                if (i == MAX_LIST_ITEMS) {
                    b.append(", ... ").append(c.size() - i).append(" more");
                    break;
                }
                if (i++ > 0) {
                    b.append(", ");
                }
                value(b, o);
            }
            b.append(']');
        } else if (v instanceof CharSequence s && (s.isEmpty() || s.chars().anyMatch(Character::isWhitespace))) {
            b.append('"').append(s).append('"');
        } else {
            b.append(v);
        }
    }
}
