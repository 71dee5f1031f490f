package io.orbitkv.pd.engine.client;

import io.orbitkv.pd.events.CancelRequested;
import io.orbitkv.pd.events.DecodeCompleted;
import io.orbitkv.pd.events.DecodeReady;
import io.orbitkv.pd.events.DecodeRejected;
import io.orbitkv.pd.events.KvLayout;
import io.orbitkv.pd.events.LeaseHeartbeat;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.events.PrefillFailed;
import io.orbitkv.pd.events.RequestEvent;
import io.orbitkv.pd.kv.BlockRuns;
import io.orbitkv.pd.schemas.Topics;
import io.orbitkv.pd.tracing.Marks;
import io.orbitkv.pd.tracing.TraceContext;
import io.orbitkv.pd.tracing.TraceHeaders;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * The facts one engine reports, exactly as the decider expects them: payload, source ({@code engine:<id>}) and the
 * deterministic event id of each kind ({@code <request>/prefill-completed}, {@code <request>/heartbeat/<seq>}, ...)
 * by which a repeated report is recognized. Shared by the Java {@link EngineClient} and the worker's local engine
 * API, so an engine in any language produces the same records (docs/engine-integration.md, "The contract").
 */
public final class EngineFacts {

    /** One fact: the request it is about, its event id and its payload (one of the request-event payloads). */
    public record Fact(String requestId, String eventId, Object payload) { }

    private final String engineId;
    private final String source;

    public EngineFacts(String engineId) {
        this.engineId = engineId;
        this.source = "engine:" + engineId;
    }

    public String engineId() {
        return engineId;
    }

    /** The {@code source} of this engine's facts. */
    public String source() {
        return source;
    }

    public Fact prefillCompleted(String requestId, long instanceEpoch, int[] sourceBlocks, int numTokens, Integer firstToken, KvLayout layout) {
        return new Fact(requestId, requestId + "/prefill-completed", PrefillCompleted.newBuilder().setEngineId(engineId)
                .setInstanceEpoch(instanceEpoch).setSourceBlocks(BlockRuns.fromBlocks(sourceBlocks)).setNumTokens(numTokens)
                .setFirstToken(firstToken).setLayout(layout).build());
    }

    public Fact prefillFailed(String requestId, long instanceEpoch, String reason, boolean retriable) {
        return new Fact(requestId, requestId + "/prefill-failed", PrefillFailed.newBuilder().setEngineId(engineId)
                .setInstanceEpoch(instanceEpoch).setReason(reason).setRetriable(retriable).build());
    }

    public Fact decodeReady(String requestId, long instanceEpoch, String leaseId, long leaseEpoch, int[] destBlocks, long leaseDeadlineMs,
                            KvLayout layout) {
        return decodeReady(requestId, instanceEpoch, leaseId, leaseEpoch, destBlocks, leaseDeadlineMs, layout, 0);
    }

    /** With the prompt's first {@code cachedBlocks} blocks in the engine's prefix cache: the order moves only the rest. */
    public Fact decodeReady(String requestId, long instanceEpoch, String leaseId, long leaseEpoch, int[] destBlocks, long leaseDeadlineMs,
                            KvLayout layout, int cachedBlocks) {
        return new Fact(requestId, requestId + "/decode-ready", DecodeReady.newBuilder().setEngineId(engineId)
                .setInstanceEpoch(instanceEpoch).setLeaseId(leaseId).setLeaseEpoch(leaseEpoch).setDestBlocks(BlockRuns.fromBlocks(destBlocks))
                .setLeaseDeadlineMs(leaseDeadlineMs).setLayout(layout).setCachedBlocks(cachedBlocks).build());
    }

    public Fact decodeRejected(String requestId, long instanceEpoch, String reason) {
        return new Fact(requestId, requestId + "/decode-rejected", DecodeRejected.newBuilder().setEngineId(engineId)
                .setInstanceEpoch(instanceEpoch).setReason(reason).build());
    }

    /** {@code seq} makes the event id unique per heartbeat. */
    public Fact heartbeat(String requestId, String leaseId, long leaseEpoch, long extendToMs, int seq) {
        return new Fact(requestId, requestId + "/heartbeat/" + seq, LeaseHeartbeat.newBuilder().setEngineId(engineId).setLeaseId(leaseId)
                .setLeaseEpoch(leaseEpoch).setExtendToMs(extendToMs).build());
    }

    public Fact decodeCompleted(String requestId, int outputTokens, boolean recomputed) {
        return new Fact(requestId, requestId + "/decode-completed", DecodeCompleted.newBuilder().setEngineId(engineId)
                .setOutputTokens(outputTokens).setRecomputed(recomputed).build());
    }

    public Fact cancel(String requestId, String reason) {
        return new Fact(requestId, requestId + "/cancel/" + source, CancelRequested.newBuilder().setRequestedBy(source).setReason(reason).build());
    }

    /**
     * The record of {@code fact}: keyed by request id on the request-events topic, with a child of {@code trace} as its
     * {@code traceparent} (null: no header) and {@code marks} plus {@code out} (now) as its timing header.
     */
    public ProducerRecord<String, byte[]> record(Topics topics, Fact fact, TraceContext trace, Marks marks) {
        ProducerRecord<String, byte[]> r = record(topics, source, fact.requestId(), fact.eventId(), fact.payload(), trace);
        (marks == null ? Marks.empty() : marks).writeOut(r.headers());
        return r;
    }

    /**
     * The record of one fact: keyed by request id, on the request-events topic, with a child of {@code trace} as its
     * {@code traceparent} header when the request came with a trace (null: no header).
     */
    public static ProducerRecord<String, byte[]> record(Topics topics, String source, String requestId, String eventId, Object payload,
                                                        TraceContext trace) {
        RequestEvent e = RequestEvent.newBuilder().setRequestId(requestId).setEventId(eventId).setSource(source)
                .setEventTimeMs(System.currentTimeMillis()).setPayload(payload).build();
        byte[] value = topics.requestEvents().valueSerde().serializer().serialize(topics.requestEvents().name(), e);
        ProducerRecord<String, byte[]> record = new ProducerRecord<>(topics.requestEvents().name(), requestId, value);
        if (trace != null) {
            TraceHeaders.write(record.headers(), trace.newChild());
        }
        return record;
    }
}
