package io.orbitkv.pd.dashboard.internal;

import static io.orbitkv.pd.dashboard.internal.StatsKeys.*;

import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import io.orbitkv.pd.dashboard.DashboardConfig;
import io.orbitkv.pd.dashboard.stats.Aggregate;
import io.orbitkv.pd.dashboard.stats.ReasonClass;
import io.orbitkv.pd.dashboard.stats.StatsWindow;
import io.orbitkv.pd.events.DeadLetter;
import io.orbitkv.pd.events.Decision;
import io.orbitkv.pd.events.InputRejected;
import io.orbitkv.pd.events.OutcomeKind;
import io.orbitkv.pd.events.PhaseTimings;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.TransferCompleted;
import io.orbitkv.pd.events.TransferFailed;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.events.TransferStarted;
import io.orbitkv.pd.schemas.EventDecodingException;
import io.orbitkv.pd.schemas.RecordDecoding;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceContext;
import io.orbitkv.pd.tracing.TraceHeaders;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.function.Consumer;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.header.Headers;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.streams.KeyValue;
import org.apache.kafka.streams.processor.PunctuationType;
import org.apache.kafka.streams.processor.api.Processor;
import org.apache.kafka.streams.processor.api.ProcessorContext;
import org.apache.kafka.streams.processor.api.Record;
import org.apache.kafka.streams.processor.api.RecordMetadata;
import org.apache.kafka.streams.state.KeyValueIterator;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.WindowStore;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Keeps one task's statistics. Reads decisions and request events of one partition pair (a request's decisions and
 * facts meet in the same task), and for each record updates the 1 s and 1 min windows its timestamp falls in:
 * outcomes and phase durations from {@link RequestOutcome}, decision latency by matching each {@link TransferOrder}
 * with its worker's first report, transfer durations and bytes from {@link TransferCompleted}, failures by reason,
 * in-flight requests per engine (admitted, no outcome yet), and the recent failures. A record that does not decode
 * is dead-lettered with its reason and counted; the task keeps going.
 */
public final class StatsProcessor implements Processor<byte[], byte[], String, DeadLetter> {

    private static final Logger log = LoggerFactory.getLogger(StatsProcessor.class);
    private static final ObjectMapper JSON = new ObjectMapper();
    private static final String COMPONENT = "dashboard";
    private static final int MAX_REASON_TEXT = 300;

    private final DashboardConfig config;
    private final Topics topics;
    private final StatsObserver observer;
    private final Map<StatsWindow, WindowStore<String, Aggregate>> windows = new EnumMap<>(StatsWindow.class);
    private ProcessorContext<String, DeadLetter> context;
    private KeyValueStore<String, String> orders;
    private KeyValueStore<String, String> inflight;
    private KeyValueStore<String, String> failures;
    private KeyValueStore<String, String> hops;
    private long streamTime;

    public StatsProcessor(DashboardConfig config, Topics topics, StatsObserver observer) {
        this.config = config;
        this.topics = topics;
        this.observer = observer;
    }

    @Override
    public void init(ProcessorContext<String, DeadLetter> context) {
        this.context = context;
        for (StatsWindow w : StatsWindow.values()) {
            windows.put(w, context.getStateStore(w.storeName()));
        }
        orders = context.getStateStore(DashboardNames.ORDERS_STORE);
        inflight = context.getStateStore(DashboardNames.INFLIGHT_STORE);
        failures = context.getStateStore(DashboardNames.FAILURES_STORE);
        hops = context.getStateStore(DashboardNames.HOPS_STORE);
        // Housekeeping on stream time, so a replay purges exactly what the live run purged.
        context.schedule(Duration.ofSeconds(10), PunctuationType.STREAM_TIME, this::purge);
    }

    @Override
    public void process(Record<byte[], byte[]> record) {
        RecordMetadata md = context.recordMetadata().orElseThrow();
        streamTime = Math.max(streamTime, Math.max(record.timestamp(), context.currentStreamTimeMs()));
        observer.streamTime(streamTime);
        ConsumerRecord<byte[], byte[]> raw = new ConsumerRecord<>(md.topic(), md.partition(), md.offset(), record.timestamp(),
                TimestampType.CREATE_TIME, -1, -1, record.key(), record.value(), record.headers(), Optional.empty());
        boolean decision = md.topic().equals(topics.decisions().name());
        Object value;
        try {
            value = decision ? RecordDecoding.decodeValue(raw, topics.decisions().valueSerde().deserializer())
                    : RecordDecoding.decodeValue(raw, topics.requestEvents().valueSerde().deserializer());
            if (value == null) {
                throw new EventDecodingException(EventDecodingException.Reason.EMPTY, md.topic(), "null value (tombstone)").at(md.partition(), md.offset());
            }
        } catch (EventDecodingException e) {
            deadLetter(raw, "UNDECODABLE", e.getMessage());
            return;
        }
        try {
            hops(value, Marks.read(record.headers()), record.timestamp());
            if (value instanceof Decision d) {
                observer.consumed("decisions", d.getPayload().getClass().getSimpleName());
                onDecision(d, record.timestamp(), record.headers());
            } else if (value instanceof RequestEvent e) {
                observer.consumed("request-events", e.getPayload().getClass().getSimpleName());
                onEvent(e, record.timestamp());
            }
        } catch (KafkaException e) {
            throw e; // store and task failures are Streams' business (task migration, fencing...)
        } catch (RuntimeException e) {
            // A record that decodes but cannot be counted (a field out of any sensible range) is bad input too.
            log.atError().setCause(e).addKeyValue("topic", md.topic()).addKeyValue("offset", md.offset()).log("record could not be counted");
            deadLetter(raw, "UNPROCESSABLE", e.toString());
        }
    }

    // ------------------------------------------------------------------------------------------ hops

    /** The hops this record completes, into the {@code hops} windows and the hop meters. */
    private void hops(Object value, Marks marks, long ts) {
        if (marks.isEmpty()) {
            return;
        }
        String requestId = value instanceof Decision d ? d.getRequestId() : value instanceof RequestEvent e ? e.getRequestId() : null;
        if (requestId == null) {
            return;
        }
        HopJoin.Step step = HopJoin.apply(hops.get(requestId), value, marks, ts);
        if (step.state() == null) {
            hops.delete(requestId);
        } else {
            hops.put(requestId, step.state());
        }
        if (!step.hops().isEmpty()) {
            update(HOPS, ts, a -> step.hops().forEach(h -> a.record(h.hop().key(), h.micros())));
            step.hops().forEach(h -> observer.hop(h.hop().key(), h.micros()));
        }
    }

    // ------------------------------------------------------------------------------------------ decisions

    private void onDecision(Decision d, long ts, Headers headers) {
        switch (d.getPayload()) {
            case TransferOrder o -> onOrder(d, o, ts);
            case RequestOutcome o -> onOutcome(d, o, ts, headers);
            case InputRejected r -> update(INPUTS, ts, a -> a.add(REJECTED_INPUTS, 1));
            default -> { }
        }
    }

    private void onOrder(Decision d, TransferOrder o, long ts) {
        if (o.getAwaitPrefill()) {
            // An order ahead of the prefill: counted, and timed, by its copy with the source pages (the decider sends it
            // when PrefillCompleted arrives); a worker that started on its engine's own fact reported before that copy.
            return;
        }
        update(ORDERS, ts, a -> {
            a.add(ORDERS_COUNT, 1);
            if (o.getAttempt() > 1) {
                a.add(RETRIES, 1);
            }
        });
        OrderEntry e = OrderEntry.parse(orders.get(o.getOrderId()));
        long orderMs = d.getStreamTimeMs();
        // The worker's TransferStarted names the transport it used; the order may only say "auto".
        String transport = e != null && !e.transport().isEmpty() ? e.transport() : o.getTransport();
        OrderEntry next = new OrderEntry(orderMs, e == null ? -1 : e.reportMs(), transport, o.getSourceEngineId(),
                o.getDestEngineId(), e != null && e.done());
        if (e != null && e.reportMs() >= 0 && e.reportMs() >= orderMs) {
            decisionLatency(orderMs, e.reportMs()); // the worker's report was processed first
        }
        if (e != null && e.failedMs() >= 0) {
            engineTransferFailure(o.getSourceEngineId(), e.failedMs(), e.failure()); // and its failure too
        }
        if (next.done()) {
            orders.delete(o.getOrderId());
        } else {
            orders.put(o.getOrderId(), next.format());
        }
    }

    private void onOutcome(Decision d, RequestOutcome o, long ts, Headers headers) {
        String kind = o.getKind().name();
        boolean completed = o.getKind() == OutcomeKind.COMPLETED;
        PhaseTimings t = o.getTimings();
        long prefill = micros(t.getAdmittedMs(), t.getPrefillCompletedMs());
        long decodeReady = micros(t.getAdmittedMs(), t.getDecodeReadyMs());
        long handoff = micros(t.getOrderIssuedMs(), t.getTransferCompletedMs());
        long decode = completed ? micros(t.getTransferCompletedMs(), t.getFinishedMs()) : -1;
        long endToEnd = completed ? micros(t.getAdmittedMs(), t.getFinishedMs()) : -1;
        long kvBytes = Math.max(0, o.getKvBytes());
        String reasonClass = ReasonClass.of(o.getReason());
        update(OUTCOMES, ts, a -> {
            a.add(kind, 1).add(KV_BYTES, kvBytes).add(ATTEMPTS, Math.max(0, o.getAttempts()));
            recordIf(a, H_PREFILL, prefill);
            recordIf(a, H_DECODE_READY, decodeReady);
            recordIf(a, H_HANDOFF, handoff);
            recordIf(a, H_DECODE, decode);
            recordIf(a, H_END_TO_END, endToEnd);
        });
        String p = o.getPrefillEngineId();
        String dd = o.getDecodeEngineId();
        java.util.Set<String> engines = new java.util.LinkedHashSet<>(); // one engine in both roles counts once
        for (String engine : new String[] {p, dd}) {
            if (engine != null && !engine.isEmpty()) {
                engines.add(engine);
            }
        }
        for (String engine : engines) {
            boolean asPrefill = engine.equals(p);
            boolean asDecode = engine.equals(dd);
            update(ENGINE_PREFIX + engine, ts, a -> {
                a.add(AS_PREFILL, asPrefill ? 1 : 0).add(AS_DECODE, asDecode ? 1 : 0).add(kind, 1).add(KV_BYTES, kvBytes);
                recordIf(a, H_HANDOFF, handoff);
                if (!completed) {
                    a.addCapped(FAIL_PREFIX, reasonClass, 1, MAX_ENGINE_REASONS);
                }
            });
        }
        if (!completed) {
            update(FAILURES, ts, a -> a.addCapped("outcome|" + kind + "|", reasonClass, 1, MAX_REASONS));
            ObjectNode f = failure(ts, d.getRequestId(), "outcome", kind, o.getReason(), reasonClass, headers);
            f.put("prefill_engine", p).put("decode_engine", dd).put("attempt", o.getAttempts());
            failures.put(failureKey(ts, d.getRequestId(), "outcome"), f.toString());
        }
        endInflight(d.getRequestId(), ts);
        observer.outcome(kind, prefill, decodeReady, handoff, decode, endToEnd);
    }

    // ------------------------------------------------------------------------------------------ facts

    private void onEvent(RequestEvent e, long ts) {
        switch (e.getPayload()) {
            case RequestAdmitted a -> {
                update(REQUESTS, ts, x -> x.add(ADMITTED, 1));
                admitInflight(e.getRequestId(), a.getPrefillEngineId(), a.getDecodeEngineId(), ts);
            }
            case TransferStarted s -> report(s.getOrderId(), ts, false, s.getTransport(), null);
            case TransferCompleted c -> {
                OrderEntry order = report(c.getOrderId(), ts, true, null, null);
                long bytes = Math.max(0, c.getBytes());
                long duration = Math.max(0, c.getDurationUs());
                update(TRANSFERS, ts, a -> a.add(COMPLETED, 1).add(BYTES, bytes).record(H_TRANSFER, duration));
                observer.transferCompleted(transport(order), duration, bytes);
            }
            case TransferFailed f -> {
                String reasonClass = ReasonClass.of(f.getReason());
                OrderEntry order = report(f.getOrderId(), ts, true, null, reasonClass);
                update(TRANSFERS, ts, a -> a.add(FAILED, 1).add(FAILED_RETRIABLE, f.getRetriable() ? 1 : 0));
                update(FAILURES, ts, a -> a.addCapped("transfer|" + (f.getRetriable() ? "RETRIABLE" : "FATAL") + "|", reasonClass, 1, MAX_REASONS));
                if (order != null && order.orderMs() >= 0) {
                    engineTransferFailure(order.source(), ts, reasonClass); // else counted when the order arrives
                }
                ObjectNode n = failure(ts, e.getRequestId(), "transfer", "TRANSFER_FAILED", f.getReason(), reasonClass, null);
                n.put("attempt", f.getAttempt()).put("retriable", f.getRetriable()).put("worker", f.getWorkerId());
                if (order != null && order.orderMs() >= 0) {
                    n.put("prefill_engine", order.source()).put("decode_engine", order.dest());
                }
                failures.put(failureKey(ts, e.getRequestId(), "transfer-" + f.getAttempt()), n.toString());
                observer.transferFailed(transport(order), reasonClass, f.getRetriable());
            }
            default -> { }
        }
    }

    /**
     * A worker reported on an order. The first report of an order closes its decision latency; a terminal report
     * (completed, failed) ends the order's entry. Either side may be processed first (two partitions of one task).
     */
    private OrderEntry report(String orderId, long ts, boolean terminal, String startedTransport, String failure) {
        OrderEntry e = OrderEntry.parse(orders.get(orderId));
        if (e == null) {
            // Decisions are read committed, worker reports are not: a report often arrives before its order.
            orders.put(orderId, new OrderEntry(-1, ts, startedTransport == null ? "" : startedTransport, "", "", terminal,
                    failure == null ? -1 : ts, failure == null ? "" : failure).format());
            return null;
        }
        if (startedTransport != null && !startedTransport.isEmpty()) {
            e = e.withTransport(startedTransport);
        }
        long reportMs = e.reportMs();
        if (reportMs < 0 && e.orderMs() >= 0) {
            decisionLatency(e.orderMs(), ts);
            reportMs = ts;
        }
        if (terminal && e.orderMs() >= 0) {
            orders.delete(orderId);
        } else {
            orders.put(orderId, new OrderEntry(e.orderMs(), reportMs, e.transport(), e.source(), e.dest(), e.done() || terminal,
                    failure == null ? e.failedMs() : ts, failure == null ? e.failure() : failure).format());
        }
        return e;
    }

    private static String transport(OrderEntry order) {
        return order == null || order.transport().isEmpty() ? "unknown" : order.transport();
    }

    /** A transfer of this engine's order failed: counted on the source engine (the worker that pushes). */
    private void engineTransferFailure(String engine, long ts, String reasonClass) {
        if (engine != null && !engine.isEmpty()) {
            update(ENGINE_PREFIX + engine, ts, a -> a.add(TRANSFER_FAILED, 1).addCapped(FAIL_PREFIX, reasonClass, 1, MAX_ENGINE_REASONS));
        }
    }

    private void decisionLatency(long orderMs, long reportMs) {
        long us = Math.max(0, reportMs - orderMs) * 1000;
        update(ORDERS, reportMs, a -> a.record(H_DECISION, us));
        observer.decisionLatency(us);
    }

    // ------------------------------------------------------------------------------------------ in flight

    /** The in-flight marker of a request whose outcome was read before its admission. */
    private static final String ENDED = "ended";

    private void admitInflight(String requestId, String prefill, String decode, long ts) {
        String marker = "req/" + requestId;
        if (inflight.get(marker) != null) {
            return; // a repeated admission (at-least-once upstream) is counted once; an ended request not at all
        }
        inflight.put(marker, ts + "|" + prefill + "|" + decode);
        addLoad(prefill, 1);
        if (!decode.equals(prefill)) {
            addLoad(decode, 1);
        }
    }

    private void endInflight(String requestId, long ts) {
        String marker = "req/" + requestId;
        String v = inflight.get(marker);
        if (v == null) {
            // The outcome came first: decisions and facts are two topics, read as they arrive. Remember the end so the
            // admission read later is not counted (the marker goes with dashboard.inflight.ttl, like any other).
            inflight.put(marker, ts + "|" + ENDED);
            return;
        }
        if (v.endsWith("|" + ENDED)) {
            return;
        }
        String[] parts = v.split("\\|", 3);
        addLoad(parts[1], -1);
        if (!parts[2].equals(parts[1])) {
            addLoad(parts[2], -1);
        }
        inflight.delete(marker);
    }

    private void addLoad(String engine, long delta) {
        String key = ENGINE_PREFIX + engine;
        String v = inflight.get(key);
        long n = Math.max(0, (v == null ? 0 : Long.parseLong(v)) + delta);
        if (n == 0) {
            inflight.delete(key);
        } else {
            inflight.put(key, Long.toString(n));
        }
    }

    // ------------------------------------------------------------------------------------------ windows

    /** Applies {@code change} to {@code key}'s aggregate in the 1 s and the 1 min window that hold {@code ts}. */
    private void update(String key, long ts, Consumer<Aggregate> change) {
        for (Map.Entry<StatsWindow, WindowStore<String, Aggregate>> w : windows.entrySet()) {
            long start = w.getKey().start(ts);
            if (w.getKey().closed(start, config.grace().toMillis(), streamTime)) {
                observer.late(w.getKey());
                continue;
            }
            Aggregate a = w.getValue().fetch(key, start);
            if (a == null) {
                a = new Aggregate();
            }
            change.accept(a);
            w.getValue().put(key, a, start);
        }
    }

    private static void recordIf(Aggregate a, String histogram, long micros) {
        if (micros >= 0) {
            a.record(histogram, micros);
        }
    }

    /** Microseconds between two milestones in ms; -1 if either is missing; 0 if the log says they are out of order. */
    static long micros(Long fromMs, Long toMs) {
        if (fromMs == null || toMs == null) {
            return -1;
        }
        return Math.max(0, toMs - fromMs) * 1000;
    }

    // ------------------------------------------------------------------------------------------ failures, housekeeping

    private ObjectNode failure(long ts, String requestId, String source, String kind, String reason, String reasonClass, Headers headers) {
        ObjectNode f = JSON.createObjectNode();
        f.put("time", ts).put("request_id", requestId).put("source", source).put("kind", kind)
                .put("reason", reason == null ? "" : reason.length() > MAX_REASON_TEXT ? reason.substring(0, MAX_REASON_TEXT) + "…" : reason)
                .put("class", reasonClass);
        TraceHeaders.read(headers).map(TraceContext::traceId).ifPresent(id -> f.put("trace_id", id));
        return f;
    }

    /** Sorts by time: 13 digits of epoch ms last until the year 2286. */
    static String failureKey(long ts, String requestId, String what) {
        return String.format("%013d/%s/%s", Math.max(0, ts), requestId, what);
    }

    private void purge(long now) {
        long orderCutoff = now - config.orderTtl().toMillis();
        List<String> stale = new ArrayList<>();
        try (KeyValueIterator<String, String> it = orders.all()) {
            while (it.hasNext()) {
                KeyValue<String, String> kv = it.next();
                OrderEntry e = OrderEntry.parse(kv.value);
                if (e == null || Math.max(e.orderMs(), e.reportMs()) < orderCutoff) {
                    stale.add(kv.key);
                }
            }
        }
        stale.forEach(orders::delete);

        long inflightCutoff = now - config.inflightTtl().toMillis();
        List<String> expired = new ArrayList<>();
        try (KeyValueIterator<String, String> it = inflight.prefixScan("req/", org.apache.kafka.common.serialization.Serdes.String().serializer())) {
            while (it.hasNext()) {
                KeyValue<String, String> kv = it.next();
                if (Long.parseLong(kv.value.substring(0, kv.value.indexOf('|'))) < inflightCutoff) {
                    expired.add(kv.key.substring("req/".length()));
                }
            }
        }
        int unfinished = 0;
        for (String requestId : expired) {
            String v = inflight.get("req/" + requestId);
            if (v != null && v.endsWith("|" + ENDED)) {
                inflight.delete("req/" + requestId); // an outcome whose admission never came: nothing to uncount
            } else {
                unfinished++;
                endInflight(requestId, now);
            }
        }
        if (unfinished > 0) {
            log.atWarn().addKeyValue("requests", unfinished).log("admitted requests without an outcome for dashboard.inflight.ttl; no longer counted in flight");
        }

        List<String> joins = new ArrayList<>();
        try (KeyValueIterator<String, String> it = hops.all()) {
            it.forEachRemaining(kv -> {
                if (HopJoin.seen(kv.value) < inflightCutoff) {
                    joins.add(kv.key); // a hop whose other end never came (the request ended early)
                }
            });
        }
        joins.forEach(hops::delete);

        List<String> keys = new ArrayList<>();
        try (KeyValueIterator<String, String> it = failures.all()) {
            it.forEachRemaining(kv -> keys.add(kv.key)); // sorted by time
        }
        String cutoff = failureKey(now - config.retentionMinutes().toMillis(), "", "");
        int excess = keys.size() - config.failuresKept();
        for (int i = 0; i < keys.size(); i++) {
            if (i < excess || keys.get(i).compareTo(cutoff) < 0) {
                failures.delete(keys.get(i));
            }
        }
    }

    private void deadLetter(ConsumerRecord<byte[], byte[]> raw, String errorType, String reason) {
        log.atWarn().addKeyValue("topic", raw.topic()).addKeyValue("partition", raw.partition()).addKeyValue("offset", raw.offset())
                .addKeyValue("errorType", errorType).log(reason);
        observer.rejected(errorType);
        DeadLetter dl = RecordDecoding.deadLetter(COMPONENT, raw, errorType, reason, streamTime);
        String key = raw.key() == null ? "" : new String(raw.key(), StandardCharsets.UTF_8);
        context.forward(new Record<>(key, dl, streamTime), DashboardNames.DEAD_LETTER_SINK);
    }

    /**
     * A transfer order waiting for (or matched with) its worker's reports: when it was decided, when the first report
     * came, and what the metrics need to label the transfer. {@code orderMs} -1: only a report has been seen.
     */
    record OrderEntry(long orderMs, long reportMs, String transport, String source, String dest, boolean done, long failedMs, String failure) {
        OrderEntry(long orderMs, long reportMs, String transport, String source, String dest, boolean done) {
            this(orderMs, reportMs, transport, source, dest, done, -1, "");
        }

        OrderEntry withTransport(String t) {
            return new OrderEntry(orderMs, reportMs, t, source, dest, done, failedMs, failure);
        }

        String format() {
            return orderMs + "|" + reportMs + "|" + (done ? 1 : 0) + "|" + failedMs + "|" + failure.replace('|', '/') + "|" + transport + "|"
                    + source + "|" + dest;
        }

        static OrderEntry parse(String s) {
            if (s == null) {
                return null;
            }
            String[] p = s.split("\\|", 8);
            return new OrderEntry(Long.parseLong(p[0]), Long.parseLong(p[1]), p[5], p[6], p[7], p[2].equals("1"), Long.parseLong(p[3]), p[4]);
        }
    }
}
