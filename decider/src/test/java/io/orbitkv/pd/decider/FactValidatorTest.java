package io.orbitkv.pd.decider;

import static io.orbitkv.pd.decider.Facts.*;
import static org.assertj.core.api.Assertions.assertThat;

import io.orbitkv.pd.decider.RequestStateMachine.Rejection;
import io.orbitkv.pd.events.BlockRun;
import io.orbitkv.pd.events.DecodeReady;
import io.orbitkv.pd.events.KvLayout;
import io.orbitkv.pd.events.PrefillCompleted;
import io.orbitkv.pd.events.RequestAdmitted;
import io.orbitkv.pd.state.DeciderState;
import io.orbitkv.pd.state.HeldPages;
import io.orbitkv.pd.state.Phase;
import java.util.List;
import org.junit.jupiter.api.Test;

/** The checks a fact passes before it may change a request's state, and the check that two engines' pages fit. */
class FactValidatorTest {

    private final FactValidator validator = new FactValidator(4);

    private static Object prefill(KvLayout layout, BlockRun... runs) {
        return ((PrefillCompleted) prefillCompleted("r", 1, layout, runs).getPayload());
    }

    @Test
    void wellFormedFactsPass() {
        assertThat(validator.check(admitted("r").getPayload())).isNull();
        assertThat(validator.check(prefill(layout(), run(0, 4), run(10, 2)))).isNull();
        assertThat(validator.check(decodeReady("r", run(1020, 4)).getPayload())).isNull();
        assertThat(validator.check(heartbeat("r", 1, 0).getPayload())).as("facts without pages or engines to check").isNull();
    }

    @Test
    void anAdmissionNeedsBothEnginesAndNoNegativeCounts() {
        RequestAdmitted a = (RequestAdmitted) admitted("r").getPayload();
        assertThat(validator.check(RequestAdmitted.newBuilder(a).setDecodeEngineId("").build()))
                .isEqualTo(new Rejection("OUT_OF_BOUNDS", "RequestAdmitted: prefill_engine_id and decode_engine_id must be set"));
        assertThat(validator.check(RequestAdmitted.newBuilder(a).setMaxTokens(-1).build()))
                .isEqualTo(new Rejection("OUT_OF_BOUNDS", "RequestAdmitted: negative token counts"));
    }

    @Test
    void pagesNeedALayoutAndRunsInsideThePoolThatDoNotOverlap() {
        assertThat(validator.check(prefill(null, run(0, 1))))
                .isEqualTo(new Rejection("OUT_OF_BOUNDS", "PrefillCompleted.layout: required by the decider, missing"));
        assertThat(validator.check(prefill(KvLayout.newBuilder(layout()).setNumBlocks(0).build(), run(0, 1))).reason())
                .startsWith("PrefillCompleted.layout: ");
        assertThat(validator.check(prefill(layout())))
                .isEqualTo(new Rejection("OUT_OF_BOUNDS", "PrefillCompleted.source_blocks: no blocks"));
        assertThat(validator.check(prefill(layout(), run(1022, 4))))
                .isEqualTo(new Rejection("OUT_OF_BOUNDS", "PrefillCompleted.source_blocks: run 1022+4 outside the pool of 1024 blocks"));
        assertThat(validator.check(DecodeReady.newBuilder((DecodeReady) decodeReady("r", run(0, 1)).getPayload())
                .setDestBlocks(List.of(run(8, 4), run(0, 9))).build()))
                .isEqualTo(new Rejection("OUT_OF_BOUNDS", "DecodeReady.dest_blocks: runs 0+9 and 8+4 overlap"));
    }

    @Test
    void tooManyRunsOrBlocksAreOversized() {
        assertThat(validator.check(prefill(layout(), run(0, 1), run(2, 1), run(4, 1), run(6, 1), run(8, 1))))
                .isEqualTo(new Rejection("OVERSIZED", "oversized PrefillCompleted.source_blocks: 5 runs, more than decider.max-runs=4"));
        assertThat(validator.check(prefill(layout(), run(0, 1000), run(0, 1000))))
                .isEqualTo(new Rejection("OVERSIZED", "oversized PrefillCompleted.source_blocks: 2000 blocks in a pool of 1024"));
    }

    private static DeciderState paired(KvLayout source, List<BlockRun> sourceRuns, KvLayout dest, List<BlockRun> destRuns) {
        return DeciderState.newBuilder().setRequestId("r").setPhase(Phase.ADMITTED).setFirstSeenMs(0)
                .setTimings(io.orbitkv.pd.events.PhaseTimings.newBuilder().build()).setSeenEventIds(List.of()).setHistory(List.of())
                .setSource(HeldPages.newBuilder().setEngineId(PREFILL).setInstanceEpoch(1).setBlocks(sourceRuns).setLayout(source).build())
                .setDest(HeldPages.newBuilder().setEngineId(DECODE).setInstanceEpoch(1).setBlocks(destRuns).setLayout(dest).build()).build();
    }

    @Test
    void pagesFitWithTheSameShapeTensorParallelSizeAndBlockCount() {
        KvLayout otherPool = KvLayout.newBuilder(layout()).setNumBlocks(4096).build();
        assertThat(FactValidator.misfit(paired(layout(), List.of(run(0, 4)), otherPool, List.of(run(9, 1), run(20, 3))))).isNull();
        KvLayout tp2 = KvLayout.newBuilder(layout()).setTpSize(2).build();
        assertThat(FactValidator.misfit(paired(layout(), List.of(run(0, 4)), tp2, List.of(run(0, 4)))))
                .isEqualTo("tp_size 1 (prefill) vs 2 (decode)");
        assertThat(FactValidator.misfit(paired(layout(), List.of(run(0, 4)), layout(), List.of(run(0, 3)))))
                .isEqualTo("source holds 4 blocks, destination 3");
    }
}
