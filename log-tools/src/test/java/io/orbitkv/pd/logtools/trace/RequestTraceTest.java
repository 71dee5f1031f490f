package io.orbitkv.pd.logtools.trace;

import static io.orbitkv.pd.logtools.SyntheticRun.SERDES;
import static io.orbitkv.pd.logtools.SyntheticRun.decision;
import static org.assertj.core.api.Assertions.assertThat;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import io.orbitkv.pd.events.KvReady;
import io.orbitkv.pd.events.PhaseTimings;
import io.orbitkv.pd.events.RequestOutcome;
import io.orbitkv.pd.events.TransferOrder;
import io.orbitkv.pd.logtools.Progress;
import io.orbitkv.pd.logtools.SyntheticRun;
import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

/** A request's story: every fact and decision of it, in order, with components, and the phases from its outcome. */
class RequestTraceTest {

    private static String text(RequestTrace t) {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        t.writeText(new PrintStream(b, true, StandardCharsets.UTF_8), false, 120);
        return b.toString(StandardCharsets.UTF_8);
    }

    @Test
    void aRetriedRequestsWholeStory() throws Exception {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("retry");
        RequestTrace t = RequestTrace.collect(run.source(), id, SERDES, false, Progress.NONE);
        assertThat(t.found()).isTrue();
        assertThat(t.entries()).hasSize(run.facts(id).size() + run.decisions(id).size());
        assertThat(t.entries()).filteredOn(e -> e.kind() == RequestTrace.Kind.DECISION).allSatisfy(e -> assertThat(e.component()).isEqualTo("decider"));
        assertThat(t.entries()).filteredOn(e -> e.kind() == RequestTrace.Kind.FACT).extracting(RequestTrace.Entry::component)
                .contains("proxy-0").anySatisfy(c -> assertThat(c).startsWith("worker:")).anySatisfy(c -> assertThat(c).startsWith("engine:"));
        // two attempts (the first one's order may go out twice: ahead of the prefill, then with its pages)
        assertThat(t.entries()).filteredOn(e -> e.type().equals("TransferOrder"))
                .extracting(e -> ((TransferOrder) ((io.orbitkv.pd.events.Decision) e.event()).getPayload()).getAttempt()).containsOnly(1, 2);
        assertThat(t.entries()).extracting(e -> e.record().timestamp()).isSorted();

        PhaseTimings tm = ((RequestOutcome) decision(run.decision(id, RequestOutcome.class)).getPayload()).getTimings();
        assertThat(t.phases()).filteredOn(p -> p.name().equals("transfer")).singleElement()
                .satisfies(p -> assertThat(p.durationMs()).isEqualTo(tm.getTransferCompletedMs() - tm.getOrderIssuedMs()));
        assertThat(t.phases()).filteredOn(p -> p.name().equals("total")).singleElement()
                .satisfies(p -> assertThat(p.durationMs()).isEqualTo(tm.getFinishedMs() - tm.getAdmittedMs()));

        String text = text(t);
        assertThat(text).contains("request " + id + " — COMPLETED").contains("2 attempts").contains("phases").contains("transfer")
                .contains("engine prefill-").contains(run.decision(id, TransferOrder.class).where());

        ByteArrayOutputStream b = new ByteArrayOutputStream();
        t.writeJson(b);
        JsonNode json = new ObjectMapper().readTree(b.toByteArray());
        assertThat(json.get("request_id").asText()).isEqualTo(id);
        assertThat(json.get("outcome").get("kind").asText()).isEqualTo("COMPLETED");
        assertThat(json.get("entries")).hasSize(t.entries().size());
        assertThat(json.get("entries").get(0).get("event").get("payload").get("type").asText()).isEqualTo("RequestAdmitted");
        assertThat(json.get("phases").findValuesAsText("name")).contains("prefill", "transfer", "decode", "total");
    }

    @Test
    void aRequestInFlightShowsThePhasesSoFar() {
        SyntheticRun run = SyntheticRun.copy();
        String id = run.request("handoff");
        long cut = decision(run.decision(id, KvReady.class)).getStreamTimeMs();
        run.records().stream().filter(r -> r.timestamp() > cut).forEach(run::remove);
        RequestTrace t = RequestTrace.collect(run.source(), id, SERDES, false, Progress.NONE);
        assertThat(t.outcome()).isNull();
        assertThat(text(t)).contains("IN FLIGHT");
        assertThat(t.phases()).filteredOn(p -> p.name().equals("transfer")).singleElement().satisfies(p -> assertThat(p.durationMs()).isNotNull());
        assertThat(t.phases()).filteredOn(p -> p.name().equals("decode")).singleElement().satisfies(p -> assertThat(p.durationMs()).isNull());
    }

    @Test
    void anUnknownRequestIsNotFound() {
        RequestTrace t = RequestTrace.collect(SyntheticRun.copy().source(), "no-such-request", SERDES, false, Progress.NONE);
        assertThat(t.found()).isFalse();
        assertThat(text(t)).contains("no record").contains("--all-partitions");
    }
}
