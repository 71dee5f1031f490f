package io.orbitkv.pd.logtools.replay;

import static io.orbitkv.pd.logtools.SyntheticRun.POLICY;
import static io.orbitkv.pd.logtools.SyntheticRun.TOPICS;
import static io.orbitkv.pd.logtools.SyntheticRun.decision;
import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.decider.DeciderPolicy;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.logtools.LogExport;
import io.orbitkv.pd.logtools.LogFile;
import io.orbitkv.pd.logtools.LogRecord;
import io.orbitkv.pd.logtools.LogSlice;
import io.orbitkv.pd.logtools.LogSource;
import io.orbitkv.pd.logtools.Progress;
import io.orbitkv.pd.logtools.SyntheticRun;
import io.orbitkv.pd.logtools.TopicRole;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Set;
import java.util.function.Consumer;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/** Replay through a fresh decider: a real run is reproduced exactly; a changed or missing decision is shown with both versions. */
class ReplayerTest {

    @TempDir
    Path dir;

    private static ReplayReport replay(LogSource source, DeciderPolicy policy) {
        return Replayer.replay(source, policy, TOPICS, 50, Progress.NONE);
    }

    private static String text(ReplayReport r) {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        r.writeText(new PrintStream(b, true, StandardCharsets.UTF_8));
        return b.toString(StandardCharsets.UTF_8);
    }

    @Test
    void aRunOfTheDeciderIsReproducedExactly() {
        ReplayReport r = replay(SyntheticRun.copy().source(), POLICY);
        assertThat(r.identical()).as(text(r)).isTrue();
        assertThat(r.decisionsAfterSlice()).isZero();
        assertThat(r.requestsCompared()).isEqualTo(SyntheticRun.OPTIONS.requests());
        assertThat(r.requestsIdentical()).isEqualTo(r.requestsCompared());
        assertThat(r.decisionsReplayed()).isEqualTo(r.decisionsRecorded()).isPositive();
        assertThat(text(r)).contains("IDENTICAL:");
    }

    @Test
    void aChangedDecisionIsShownWithBothVersionsAndTheFieldThatDiffers() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("handoff");
        LogRecord kv = run.decision(id, KvReady.class);
        long bytes = ((KvReady) decision(kv).getPayload()).getBytes();
        run.editDecision(kv, d -> {
            d.setPayload(KvReady.newBuilder((KvReady) d.getPayload()).setBytes(bytes + 1).build());
            return d;
        });
        ReplayReport r = replay(run.source(), POLICY);
        assertThat(r.identical()).isFalse();
        assertThat(r.requestsDifferent()).isEqualTo(1);
        ReplayReport.Difference d = r.differences().get(0);
        assertThat(d.requestId()).isEqualTo(id);
        assertThat(d.index()).isEqualTo(decision(kv).getSeq());
        assertThat(d.recorded().decision().getPayload()).isInstanceOf(KvReady.class);
        assertThat(d.replayed().getPayload()).isInstanceOf(KvReady.class);
        assertThat(d.fields()).containsExactly("payload.bytes: " + (bytes + 1) + " → " + bytes);
        assertThat(text(r)).contains("recorded  " + kv.where()).contains("replayed").contains("DIFFERENT:");
    }

    @Test
    void aDecisionMissingFromTheLogIsADifference() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("handoff");
        run.remove(run.decision(id, RequestOutcome.class));
        ReplayReport r = replay(run.source(), POLICY);
        assertThat(r.differences()).singleElement().satisfies(d -> {
            assertThat(d.requestId()).isEqualTo(id);
            assertThat(d.recorded()).isNull();
            assertThat(d.replayed().getPayload()).isInstanceOf(RequestOutcome.class);
        });
        assertThat(text(r)).contains("(no decision: the log ends here)");
    }

    @Test
    void anotherAuthKeyShowsAsTokensOnlyWithAHint() {
        DeciderPolicy other = new DeciderPolicy(POLICY.prefillTimeout(), POLICY.decodeReadyTimeout(), POLICY.transferTimeout(),
                POLICY.leaseDuration(), POLICY.admissionGrace(), POLICY.drainGrace(), POLICY.retention(), POLICY.maxAttempts(),
                POLICY.backoffBase(), POLICY.backoffMax(), POLICY.maxRuns(), POLICY.historyLimit(),
                "another-key-0123456789".getBytes(StandardCharsets.UTF_8));
        ReplayReport r = replay(SyntheticRun.copy().source(), other);
        assertThat(r.identical()).isFalse();
        assertThat(r.differences()).allSatisfy(d -> {
            assertThat(d.replayed().getPayload()).isInstanceOf(TransferOrder.class);
            assertThat(d.fields()).singleElement().asString().startsWith("payload.auth_token");
        });
        assertThat(text(r)).contains("another auth.key");
    }

    @Test
    void aRequestExportedAloneReplaysExactlyFromTheFile() throws Exception {
        SyntheticRun run = SyntheticRun.copy();
        // a retry (its second order waits on stream time) and a cancel whose release waits out the drain on later records
        String retry = run.request("retry");
        String cancel = run.request("cancel");
        Path f = dir.resolve("bug-report.okvlog");
        LogExport.Result res = LogExport.export(run.source(), f, Set.of(retry, cancel), false, Progress.NONE);
        assertThat(res.marks()).isPositive();
        LogFile file = LogFile.open(f);
        assertThat(file.slice().filter()).contains(retry).contains(cancel);
        List<String> keys = new java.util.ArrayList<>();
        file.read(LogSource.RecordFilter.ALL, r -> {
            if (!r.streamTimeMark() && r.role() != TopicRole.ENGINES) {
                keys.add(r.keyString());
            }
        }, Progress.NONE);
        assertThat(keys).containsOnly(retry, cancel);
        assertThat(Files.size(f)).isLessThan(run.records().stream().mapToLong(r -> r.value() == null ? 0 : r.value().length).sum() / 5);
        ReplayReport r = replay(file, POLICY);
        assertThat(r.identical()).as(text(r)).isTrue();
        assertThat(r.requestsCompared()).isEqualTo(2);
    }

    @Test
    void withoutItsStreamTimeMarksAFilteredRequestWouldNotReplayTheSame() throws Exception {
        SyntheticRun run = SyntheticRun.copy();
        String cancel = run.request("cancel", id -> run.facts(id).stream().noneMatch(r -> SyntheticRun.fact(r).getPayload()
                instanceof io.orbitkv.pd.events.TransferFailed));
        Path f = dir.resolve("one.okvlog");
        LogExport.export(run.source(), f, Set.of(cancel), false, Progress.NONE);
        LogFile file = LogFile.open(f);
        LogSource noMarks = new LogSource() {
            @Override
            public LogSlice slice() {
                return file.slice();
            }

            @Override
            public void read(RecordFilter filter, Consumer<LogRecord> sink, Progress progress) {
                file.read(filter, r -> {
                    if (!r.streamTimeMark()) {
                        sink.accept(r);
                    }
                }, progress);
            }

            @Override
            public void close() { }
        };
        ReplayReport with = replay(file, POLICY);
        assertThat(with.identical()).isTrue();
        assertThat(with.decisionsAfterSlice()).isZero();
        // the drain-window releases are fired by later records of other requests: without the marks the slice ends
        // before them, and they cannot be compared
        ReplayReport without = replay(noMarks, POLICY);
        assertThat(without.decisionsAfterSlice()).isEqualTo(2);
        assertThat(without.decisionsRecorded()).isEqualTo(with.decisionsRecorded() - 2);
        assertThat(text(without)).contains("2 recorded decisions came after the last fact");
    }

    @Test
    void requestsBegunBeforeASliceAreNotComparedTheRestAre() {
        SyntheticRun run = SyntheticRun.copy(SyntheticRun.SLOW);
        long cut = SyntheticRun.SLOW.startMs() + 3_000; // a quarter of the requests started before
        LogSource all = run.source();
        LogSlice s = all.slice();
        LogSlice later = new LogSlice(s.origin(), s.serdeMode(), s.createdMs(), null, s.topics().stream().map(t -> new LogSlice.TopicSlice(
                t.name(), t.role(), t.partitions().stream().map(p -> new LogSlice.PartitionRange(p.partition(), p.start(), p.end(), false)).toList()))
                .toList());
        LogSource tail = new LogSource() {
            @Override
            public LogSlice slice() {
                return later;
            }

            @Override
            public void read(RecordFilter filter, Consumer<LogRecord> sink, Progress progress) {
                all.read(filter, r -> {
                    if (r.timestamp() >= cut) {
                        sink.accept(r);
                    }
                }, progress);
            }

            @Override
            public void close() { }
        };
        ReplayReport r = replay(tail, POLICY);
        assertThat(r.identical()).as(text(r)).isTrue();
        assertThat(r.requestsPartial()).isPositive();
        assertThat(r.requestsCompared()).isPositive();
        assertThat(r.requestsCompared() + r.requestsPartial()).isLessThanOrEqualTo(SyntheticRun.SLOW.requests());
    }
}
